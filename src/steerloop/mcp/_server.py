"""One installed MCP server: its connection, its tools as steerloop tools, kept in step.

A tool's body calls the server (as a task when the server runs it as one, ``_tasks.py``;
through the input rounds otherwise, ``_rounds.py``). The server's ``InputResumer`` finishes
a call whose input round outlived its process (registered while the server is installed).

A tool's input schema is kept as the server gave it, ``$schema`` included: arguments are
validated in the dialect it names (2020-12 when it names none), and the provider adapters
that refuse the keyword leave it out of their requests.
"""

from __future__ import annotations

import logging
import re
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

import mcp_types as types
from mcp.client import Client
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from .. import AbortController
from ..errors import AbortedError, ToolDefinitionError
from ..hooks import Disposer
from ..messages import ToolCallBlock
from ..session.events import InputAnswered, InputRequest
from ..tools import Tool, ToolExec, ToolResult, define_tool
from ._calls import CallContext, Deadline
from ._config import MCPServer
from ._connection import Connection
from ._peer import Peer
from ._resources import ResourceWatch, offers_resources, read_resource_tool
from ._results import READ_RESOURCE, result_from_mcp, tool_name, with_cut_note
from ._rounds import Rounds
from ._tasks import call_as_task, find_task, recover_task, uses_tasks

if TYPE_CHECKING:
    from .. import Runtime

__all__ = ["InstalledServer"]

_log = logging.getLogger("steerloop.mcp")
_TOOL_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


def _may_run_as_task(spec: types.Tool) -> bool:
    execution = spec.execution
    return execution is not None and execution.task_support in ("optional", "required")


class InstalledServer:
    """One installed server: its connection and the registrations of its tools."""

    def __init__(
        self,
        rt: Runtime,
        clash: Callable[[Sequence[Tool], InstalledServer], str | None],
        server: MCPServer,
        errlog: TextIO | None,
        roots: Sequence[Path],
    ) -> None:
        self.rt = rt
        self._clash = clash
        self.config = server
        self.stale = False
        self.connection = Connection(server, self._changed, errlog)
        self.watch = ResourceWatch(self.connection, self._subscribe)
        self.connection.peer = Peer(server, self.connection.in_flight, roots, self.watch.updated)
        self.rounds = Rounds(self.connection)
        self.names: tuple[str, ...] = ()
        self.registrations: list[Disposer] = []
        # Raises ValueError when another installation serves a server of this name.
        self.resumer = rt.loop_services.resumers.register(server.name, self.resume)

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
            read_only = spec.annotations is not None and spec.annotations.read_only_hint is True
            try:
                tool = define_tool(
                    name=name,
                    description=spec.description or "",
                    # As given, ``$schema`` too: validation follows the dialect it names.
                    parameters=dict(spec.input_schema),
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

    @asynccontextmanager
    async def _calling(self, exec: ToolExec) -> AsyncIterator[CallContext]:
        """A call of the server for ``exec``, in flight inside. Its own signal: the turn's,
        and the tool timeout, which stands still while the server waits for a person."""
        seconds = self.config.timeout
        controller = AbortController()
        unlink = exec.signal.add_listener(controller.abort)
        deadline = Deadline(seconds, controller, f"tool {exec.name!r}")
        call = CallContext(exec=exec, signal=controller.signal, deadline=deadline)
        try:
            with self.connection.in_flight.running(call):
                yield call
        except AbortedError:
            if deadline.expired and not exec.signal.aborted:
                raise TimeoutError(f"tool {exec.name!r} timed out after {seconds}s") from None
            raise
        finally:
            deadline.cancel()
            unlink()

    def _body(self, spec: types.Tool) -> Any:
        connection = self.connection
        remote = spec.name

        async def execute(args: Any, exec: ToolExec) -> ToolResult:
            # Arguments were validated against the server's schema before this body runs.
            async with self._calling(exec) as call:
                capabilities = await connection.capabilities(call.signal)
                if uses_tasks(capabilities, spec):
                    session = exec.agent.session
                    result = await call_as_task(connection, call, session, remote, args)
                else:
                    result = await self.rounds.call(call, remote, args)
            return with_cut_note(result_from_mcp(result), result)

        return execute

    async def resume(
        self, request: InputRequest, answer: InputAnswered, exec: ToolExec
    ) -> ToolResult:
        """The ``InputResumer`` of this server: finish a call whose input round was asked
        before a restart, with the person's answer (``Rounds.finish``)."""
        async with self._calling(exec) as call:
            result = await self.rounds.finish(call, request, answer)
        return with_cut_note(result_from_mcp(result), result)

    async def reconcile(self, call: ToolCallBlock, exec: ToolExec) -> ToolResult | None:
        """At recovery, the result of a call the server ran as a task (``None`` otherwise)."""
        handle = find_task(exec.agent.session.events, call.id)
        if handle is None:
            return None
        result = await recover_task(self.connection, handle, exec.signal)
        return None if result is None else with_cut_note(result_from_mcp(result), result)

    async def _subscribe(self, uri: str) -> None:
        client = await self.connection.client()
        if client.protocol_version in MODERN_PROTOCOL_VERSIONS:
            # 2026-07-28: the URI joins the connection's subscriptions/listen filter.
            await self.connection.listener.watch(uri, self.config.timeout)
            return
        capabilities = client.server_capabilities
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
        self.registrations = [self.rt.tools.register(t) for t in tools]
        self.names = tuple(t.name for t in tools)

    def unregister(self) -> None:
        for dispose in self.registrations:
            dispose()
        self.registrations = []
        self.names = ()
        self.resumer()

    async def refresh(self) -> None:
        """Re-list after ``tools/list_changed``; a failure keeps the tools as they were."""
        self.stale = False
        try:
            tools = await self.listing()
            clash = self._clash(tools, self)
            if clash is not None:
                raise ToolDefinitionError(clash)
        except Exception as exc:
            _log.warning("MCP server %r: tools not re-listed: %s", self.config.name, exc)
            return
        self.register(tools)
