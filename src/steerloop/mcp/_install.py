"""``install_mcp``: MCP server tools as steerloop tools, kept in step with the servers.

Besides its tools, an installed server offers its resources (``resources``,
``read_resource``, and a ``<server>__read_resource`` tool), its prompts (``prompts``,
``prompt_message``), and it may ask things of the agent during a call: input from a person
(``_peer.py``), a sample of the model (``_sampling.py``), the roots (``install_mcp(roots=)``).
A tool the server runs as a task is called as one (``_tasks.py``).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import re
import weakref
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

import mcp_types as types
from mcp.client import Client

from .. import AbortController
from .. import hooks as h
from ..agent import Agent
from ..errors import AbortedError, ToolDefinitionError
from ..hooks import Disposer, RequestPayload
from ..llm import CallConfig
from ..messages import Block, TextBlock, ToolCallBlock, UserMessage
from ..tools import Tool, ToolError, ToolExec, ToolResult, define_tool
from ._calls import CallContext, Deadline
from ._config import MCPServer
from ._connection import Connection
from ._content import block_from_mcp
from ._limits import CUT_KEY
from ._peer import Peer
from ._prompts import expand_prompt, list_prompts, parse_prompt_arguments
from ._resources import (
    ResourceWatch,
    list_resources,
    offers_resources,
    read_resource,
    read_resource_tool,
)
from ._tasks import call_as_task, find_task, recover_task, uses_tasks

if TYPE_CHECKING:
    from .. import Runtime

__all__ = ["MCPTools", "install_mcp", "installed_mcp", "result_from_mcp"]

_log = logging.getLogger("steerloop.mcp")
_TOOL_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


#: The tool name (after the server's prefix) of the resource reader a server gets.
READ_RESOURCE = "read_resource"


def tool_name(server: str, tool: str) -> str:
    return f"{server}__{tool}"


def with_cut_note(result: ToolResult, mcp_result: types.CallToolResult) -> ToolResult:
    """``result`` with the one-line note of what the bounds cut of ``mcp_result``, if any."""
    note = (mcp_result.meta or {}).get(CUT_KEY)
    if not isinstance(note, str):
        return result
    content = result.content
    blocks = [TextBlock(content)] if isinstance(content, str) else list(content)
    return dataclasses.replace(result, content=[*blocks, TextBlock(note)])


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


def _may_run_as_task(spec: types.Tool) -> bool:
    execution = spec.execution
    return execution is not None and execution.task_support in ("optional", "required")


class _Server:
    """One installed server: its connection and the registrations of its tools."""

    def __init__(
        self, owner: MCPTools, server: MCPServer, errlog: TextIO | None, roots: Sequence[Path]
    ) -> None:
        self.owner = owner
        self.config = server
        self.stale = False
        self.connection = Connection(server, self._changed, errlog)
        self.watch = ResourceWatch(self.connection, self._subscribe)
        self.connection.peer = Peer(server, self.connection.in_flight, roots, self.watch.updated)
        self.names: tuple[str, ...] = ()
        self.registrations: list[Disposer] = []

    def _changed(self) -> None:
        self.stale = True

    async def listing(self) -> list[Tool]:
        """The server's tools as steerloop tools (see ``build``), listed now."""
        listed = await self.connection.list_tools()
        return self.build(listed, reader=await offers_resources(self.connection))

    def build(self, listed: Sequence[types.Tool], *, reader: bool = False) -> list[Tool]:
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
                    execute=self._body(spec),
                    concurrency_safe=read_only,
                    # A call the server may run as a task can learn its outcome at recovery.
                    reconcile=self.reconcile if _may_run_as_task(spec) else None,
                )
            except ToolDefinitionError as exc:
                raise ToolDefinitionError(
                    f"MCP server {server!r}, tool {spec.name!r}: {exc}"
                ) from None
            tools.append(tool)
        name = tool_name(server, READ_RESOURCE)
        if reader and name not in seen:  # a server tool of that name takes precedence
            tools.append(read_resource_tool(name, self.connection, self.watch))
        return tools

    def _body(self, spec: types.Tool) -> Any:
        connection = self.connection
        remote = spec.name
        seconds = self.config.timeout

        async def execute(args: Any, exec: ToolExec) -> ToolResult:
            # Arguments were validated against the server's schema before this body runs.
            # The call's own signal: the turn's, and the tool timeout, which stands still
            # while the server waits for a person's answer.
            controller = AbortController()
            unlink = exec.signal.add_listener(controller.abort)
            deadline = Deadline(seconds, controller, f"tool {exec.name!r}")
            call = CallContext(exec=exec, signal=controller.signal, deadline=deadline)
            try:
                with connection.in_flight.running(call):
                    capabilities = await connection.capabilities(call.signal)
                    if uses_tasks(capabilities, spec):
                        session = exec.agent.session
                        result = await call_as_task(connection, call, session, remote, args)
                    else:
                        result = await connection.call(remote, args, call.signal)
            except AbortedError:
                if deadline.expired and not exec.signal.aborted:
                    raise TimeoutError(f"tool {exec.name!r} timed out after {seconds}s") from None
                raise
            finally:
                deadline.cancel()
                unlink()
            return with_cut_note(result_from_mcp(result), result)

        return execute

    async def reconcile(self, call: ToolCallBlock, exec: ToolExec) -> ToolResult | None:
        """At recovery, the result of a call the server ran as a task (``None`` otherwise)."""
        handle = find_task(exec.agent.session.events, call.id)
        if handle is None:
            return None
        result = await recover_task(self.connection, handle, exec.signal)
        return None if result is None else with_cut_note(result_from_mcp(result), result)

    async def _subscribe(self, uri: str) -> None:
        capabilities = await self.connection.capabilities()
        resources = capabilities.resources if capabilities is not None else None
        if resources is None or not resources.subscribe:
            raise ValueError("the server does not offer subscriptions")
        request = types.SubscribeRequest(params=types.SubscribeRequestParams(uri=uri))

        def send(client: Client) -> Any:
            return client.session.send_request(request, types.EmptyResult)

        await self.connection.run(None, send)

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
            tools = await self.listing()
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

    # --- resources and prompts ---------------------------------------------------------

    async def resources(self, server_name: str) -> tuple[types.Resource, ...]:
        """The resources ``server_name`` lists (all pages, at most 1,000).

        Raises:
            KeyError: no server of that name was installed.
        """
        return tuple(await list_resources(self._servers[server_name].connection))

    async def read_resource(
        self, server_name: str, uri: str, *, agent: Agent | None = None
    ) -> tuple[Block, ...]:
        """The contents of resource ``uri`` as blocks (within the server's limits); with
        ``agent``, the server's later updates of it are logged to that agent's session.

        Raises:
            KeyError: no server of that name was installed.
            ValueError: a bad URI.
        """
        server = self._servers[server_name]
        blocks, _binary = await read_resource(server.connection, uri)
        if agent is not None:
            await server.watch.add(uri, agent)
        return blocks

    async def prompts(self, server_name: str) -> tuple[types.Prompt, ...]:
        """The prompts ``server_name`` lists.

        Raises:
            KeyError: no server of that name was installed.
        """
        return tuple(await list_prompts(self._servers[server_name].connection))

    async def prompt_message(
        self, server_name: str, prompt: str, arguments: str = ""
    ) -> UserMessage:
        """Prompt ``prompt`` of ``server_name`` expanded into one user message; ``arguments``
        is a command line (``key=value`` or positional words).

        Raises:
            KeyError: no server of that name was installed.
            ValueError: no such prompt, or arguments it does not take.
        """
        connection = self._servers[server_name].connection
        for candidate in await list_prompts(connection):
            if candidate.name == prompt:
                values = parse_prompt_arguments(candidate, arguments)
                return await expand_prompt(connection, prompt, values)
        raise ValueError(f"MCP server {server_name!r} has no prompt {prompt!r}")

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
        held = _INSTALLED.get(self.rt)
        if held is not None and self in held:
            held.remove(self)
        for dispose in self._hooks:
            dispose()
        self._hooks = []
        for server in self._servers.values():
            server.unregister()
        await asyncio.gather(
            *(s.connection.close() for s in self._servers.values()), return_exceptions=True
        )


_INSTALLED: weakref.WeakKeyDictionary[Runtime, list[MCPTools]] = weakref.WeakKeyDictionary()
"""The open ``install_mcp`` results of each runtime (``installed_mcp``)."""


def installed_mcp(rt: Runtime) -> tuple[MCPTools, ...]:
    """The open ``install_mcp`` results of ``rt``, in install order: what a service lists
    and expands as a session's MCP prompts."""
    return tuple(_INSTALLED.get(rt, ()))


async def install_mcp(
    rt: Runtime,
    servers: Sequence[MCPServer],
    *,
    errlog: TextIO | None = None,
    roots: Sequence[str | os.PathLike[str]] = (),
) -> MCPTools:
    """Connect to ``servers``, list their tools and register each as ``<server>__<tool>``.

    The connections close with ``close()`` on the result, or with ``rt.close()``.
    ``errlog`` receives the stderr of stdio servers (default: ours). ``roots`` are the
    directories the servers are told they may work in (the ``roots`` capability is declared
    only when there are some).

    Raises:
        ValueError: two servers of one name.
        ToolDefinitionError: an invalid or clashing tool name, an invalid input schema, or a
            tool list over its server's ``max_tools`` (``MCPLimitError``).
        Exception: a server that cannot be reached (its connection error); nothing stays open.
    """
    names = [s.name for s in servers]
    if len(set(names)) != len(names):
        raise ValueError(f"MCP server names must be unique: {names}")
    root_paths = [Path(r).resolve() for r in roots]
    installed = MCPTools(rt)
    try:
        for config in servers:
            server = _Server(installed, config, errlog, root_paths)
            installed._servers[config.name] = server
            tools = await server.listing()
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
    _INSTALLED.setdefault(rt, []).append(installed)
    return installed
