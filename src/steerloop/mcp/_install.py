"""``install_mcp``: MCP server tools as steerloop tools, kept in step with the servers.

Besides its tools, an installed server offers its resources (``resources``,
``read_resource``, and a ``<server>__read_resource`` tool), its prompts (``prompts``,
``prompt_message``), and it may ask things of the agent during a call: input from a person
(``_peer.py``), a sample of the model (``_sampling.py``), the roots (``install_mcp(roots=)``).
A tool the server runs as a task is called as one (``_tasks.py``); input rounds are
driven durably (``_rounds.py``). One server's tools: ``_server.py``.
"""

from __future__ import annotations

import asyncio
import logging
import os
import weakref
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

import mcp_types as types

from .. import hooks as h
from ..agent import Agent
from ..errors import ToolDefinitionError
from ..hooks import Disposer, RequestPayload
from ..llm import CallConfig
from ..messages import Block, UserMessage
from ..tools import Tool
from ._config import MCPServer
from ._prompts import expand_prompt, list_prompts, parse_prompt_arguments
from ._resources import list_resources, read_resource
from ._results import result_from_mcp
from ._server import InstalledServer

if TYPE_CHECKING:
    from .. import Runtime

__all__ = ["MCPTools", "install_mcp", "installed_mcp", "result_from_mcp"]

_log = logging.getLogger("steerloop.mcp")


class MCPTools:
    """The servers ``install_mcp`` connected: their tools, status and ``close()``."""

    def __init__(self, rt: Runtime) -> None:
        self.rt = rt
        self._servers: dict[str, InstalledServer] = {}
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

    def clash(self, tools: Sequence[Tool], of: InstalledServer) -> str | None:
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
            server = InstalledServer(rt, installed.clash, config, errlog, root_paths)
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
