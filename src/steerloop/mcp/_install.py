"""``install_mcp``: MCP server tools as steerloop tools, kept in step with the servers."""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any, TextIO

import mcp_types as types

from .. import hooks as h
from .._hooks import Disposer
from ..agent._decisions import RequestPayload
from ..errors import ToolDefinitionError
from ..llm._types import CallConfig
from ..messages import Block
from ..tools import Tool, ToolError, ToolExec, ToolResult, define_tool
from ._config import MCPServer
from ._connection import Connection
from ._content import block_from_mcp

if TYPE_CHECKING:
    from .._runtime import Runtime

__all__ = ["MCPTools", "install_mcp", "result_from_mcp"]

_log = logging.getLogger("steerloop.mcp")
_TOOL_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


def tool_name(server: str, tool: str) -> str:
    return f"{server}__{tool}"


def result_from_mcp(result: types.CallToolResult) -> ToolResult:
    """An MCP tool result as a steerloop one (``block_from_mcp`` for each item)."""
    blocks: list[Block] = [block_from_mcp(item) for item in result.content]
    meta = None
    if result.structured_content is not None:
        meta = {"structured_content": result.structured_content}
    if result.is_error:
        return ToolResult(
            content=blocks or "the tool reported an error",
            is_error=True,
            error=ToolError("TOOL_FAILED"),
            meta=meta,
        )
    return ToolResult(content=blocks, meta=meta)


class _Server:
    """One installed server: its connection and the registrations of its tools."""

    def __init__(self, owner: MCPTools, server: MCPServer, errlog: TextIO | None) -> None:
        self.owner = owner
        self.config = server
        self.stale = False
        self.connection = Connection(server, self._changed, errlog)
        self.names: tuple[str, ...] = ()
        self.registrations: list[Disposer] = []

    def _changed(self) -> None:
        self.stale = True

    def build(self, listed: Sequence[types.Tool]) -> list[Tool]:
        """steerloop tools for ``listed``.

        Raises:
            ToolDefinitionError: an invalid or repeated name, or an invalid input schema.
        """
        server = self.config.name
        tools: list[Tool] = []
        seen: set[str] = set()
        for spec in listed:
            name = tool_name(server, spec.name)
            if not _TOOL_NAME.match(name):
                raise ToolDefinitionError(
                    f"MCP server {server!r}: tool {spec.name!r} gives the name {name!r}, "
                    f"which does not match {_TOOL_NAME.pattern}"
                )
            if name in seen:
                raise ToolDefinitionError(f"MCP server {server!r} lists tool {spec.name!r} twice")
            seen.add(name)
            schema = {k: v for k, v in dict(spec.input_schema).items() if k != "$schema"}
            read_only = spec.annotations is not None and spec.annotations.read_only_hint is True
            try:
                tool = define_tool(
                    name=name,
                    description=spec.description or "",
                    parameters=schema,
                    execute=self._body(spec.name),
                    concurrency_safe=read_only,
                    timeout=self.config.timeout,
                )
            except ToolDefinitionError as exc:
                raise ToolDefinitionError(
                    f"MCP server {server!r}, tool {spec.name!r}: {exc}"
                ) from None
            tools.append(tool)
        return tools

    def _body(self, remote: str) -> Any:
        connection = self.connection

        async def execute(args: Any, exec: ToolExec) -> ToolResult:
            # Arguments were validated against the server's schema before this body runs.
            result = await connection.call(remote, args, exec.signal)
            return result_from_mcp(result)

        return execute

    def register(self, tools: Sequence[Tool]) -> None:
        for dispose in self.registrations:
            dispose()
        self.registrations = [self.owner.rt.tools.register(t) for t in tools]
        self.names = tuple(t.name for t in tools)

    def unregister(self) -> None:
        for dispose in self.registrations:
            dispose()
        self.registrations = []
        self.names = ()

    async def refresh(self) -> None:
        """Re-list after ``tools/list_changed``; a failure keeps the tools as they were."""
        self.stale = False
        try:
            tools = self.build(await self.connection.list_tools())
            clash = self.owner.clash(tools, self)
            if clash is not None:
                raise ToolDefinitionError(clash)
        except Exception as exc:
            _log.warning("MCP server %r: tools not re-listed: %s", self.config.name, exc)
            return
        self.register(tools)


class MCPTools:
    """The servers ``install_mcp`` connected: their tools, status and ``close()``."""

    def __init__(self, rt: Runtime) -> None:
        self.rt = rt
        self._servers: dict[str, _Server] = {}
        self._hooks: list[Disposer] = []
        self._closing: asyncio.Future[None] | None = None

    def tools(self, server_name: str) -> tuple[str, ...]:
        """The names registered for ``server_name``, in the server's order.

        Raises:
            KeyError: no server of that name was installed.
        """
        return self._servers[server_name].names

    def servers(self) -> tuple[MCPServer, ...]:
        return tuple(s.config for s in self._servers.values())

    def status(self, server_name: str) -> str:
        """``connected``, ``disconnected`` or ``failed: <cause>``."""
        connection = self._servers[server_name].connection
        if connection.alive:
            return "connected"
        if connection.last_error is not None:
            return f"failed: {connection.last_error}"
        return "disconnected"

    def clash(self, tools: Sequence[Tool], of: _Server) -> str | None:
        """Why ``tools`` cannot be registered for ``of``, or ``None``."""
        mine = set(of.names)
        for tool in tools:
            if tool.name in mine:
                continue
            for other in self._servers.values():
                if other is not of and tool.name in other.names:
                    used_by = other.config.name
                    return f"tool name {tool.name!r} is already used by MCP server {used_by!r}"
            if self.rt.tools.get(tool.name) is not None:
                return f"tool name {tool.name!r} is already registered"
        return None

    async def _before_request(
        self, payload: RequestPayload, next_: Callable[[], Awaitable[CallConfig]]
    ) -> CallConfig:
        # A changed tool list takes effect here, before a model request and so never
        # inside a tool group of the requesting agent.
        for server in self._servers.values():
            if server.stale:
                await server.refresh()
        return await next_()

    async def close(self) -> None:
        """Unregister every tool and close every connection (memoised; bounded)."""
        if self._closing is None:
            self._closing = asyncio.ensure_future(self._close())
        await asyncio.shield(self._closing)

    async def _close(self) -> None:
        for dispose in self._hooks:
            dispose()
        self._hooks = []
        for server in self._servers.values():
            server.unregister()
        await asyncio.gather(
            *(s.connection.close() for s in self._servers.values()), return_exceptions=True
        )


async def install_mcp(
    rt: Runtime, servers: Sequence[MCPServer], *, errlog: TextIO | None = None
) -> MCPTools:
    """Connect to ``servers``, list their tools and register each as ``<server>__<tool>``.

    The connections close with ``close()`` on the result, or with ``rt.close()``.
    ``errlog`` receives the stderr of stdio servers (default: ours).

    Raises:
        ValueError: two servers of one name.
        ToolDefinitionError: an invalid or clashing tool name, or an invalid input schema.
        Exception: a server that cannot be reached (its connection error); nothing stays open.
    """
    names = [s.name for s in servers]
    if len(set(names)) != len(names):
        raise ValueError(f"MCP server names must be unique: {names}")
    installed = MCPTools(rt)
    try:
        for config in servers:
            server = _Server(installed, config, errlog)
            installed._servers[config.name] = server
            tools = server.build(await server.connection.list_tools())
            server.stale = False  # the listing just made is the current one
            clash = installed.clash(tools, server)
            if clash is not None:
                raise ToolDefinitionError(f"MCP server {config.name!r}: {clash}")
            server.register(tools)
    except BaseException:
        await installed.close()
        raise
    installed._hooks = [
        rt.hooks.on(h.REQUEST, installed._before_request),
        rt.hooks.on(h.RUNTIME_CLOSING, lambda _closing: installed.close()),
    ]
    return installed
