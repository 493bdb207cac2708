"""One live connection to an MCP server: connect, list tools, call, reconnect after a death.

The SDK's client is built on anyio: it must be entered and left in one task, so each
connection runs in a task of its own that holds the client open until it is told to stop or
the transport reaches end-of-stream. Calls are made from the callers' tasks.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from functools import partial
from typing import TYPE_CHECKING, Any, TextIO, TypeVar

import anyio
import httpx2
import mcp_types as types
from mcp.client import Client, IncomingMessage
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp_types import CONNECTION_CLOSED
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from .. import AbortSignal
from ..errors import AbortedError
from ._bounds import Bounder
from ._calls import InFlight
from ._config import MCPServer
from ._errors import TRANSPORT_ERRORS, MCPConnectionError, MCPLimitError, describe
from ._http import BoundedHTTP
from ._limits import DROPPED_KEY, REFUSED_KEY
from ._listen import SUBSCRIPTION_ID, Listener
from ._oauth_flow import oauth_provider
from ._person import PersonTime, ready_within
from ._stdio import contained_stdio
from ._streams import checkpoint, watched

if TYPE_CHECKING:
    from ._peer import Peer

__all__ = ["Connection", "MCPConnectionError", "MCPLimitError"]

T = TypeVar("T")

_log = logging.getLogger("steerloop.mcp")

# Bound for letting a connection task leave its client (the SDK bounds each shutdown step
# itself: closing stdin, SIGTERM, SIGKILL of the process group, ~6 s in all).
_CLOSE_TIMEOUT = 15.0

# The SDK's read timeout of one tool call: its own deadline (the tool timeout, standing still
# while a person is asked) bounds a call, so this only keeps the SDK's timer out of the way.
_CALL_READ_TIMEOUT = 7 * 24 * 3600.0

#: Seconds a server may take to start and complete its handshake, at least (a Python or Node
#: server can take several seconds to import on a loaded machine).
CONNECT_TIMEOUT = 30.0


def _list_page(client: Client, cursor: str | None) -> Awaitable[types.ListToolsResult]:
    return client.list_tools(cursor=cursor)


class Connection:
    """The client side of one server: ``tools()`` lists, ``call()`` calls, ``close()`` ends.

    A connection found dead (end-of-stream, a transport failure) is replaced by a fresh one
    at the next request; a request that was on its way when it died is never re-sent.
    """

    def __init__(
        self,
        server: MCPServer,
        on_tools_changed: Callable[[], None],
        errlog: TextIO | None = None,
    ) -> None:
        self.server = server
        self._on_tools_changed = on_tools_changed
        self._errlog = errlog
        self._client: Client | None = None
        self._task: asyncio.Task[None] | None = None
        self._stop: asyncio.Event | None = None
        self._ready: asyncio.Future[Client] | None = None
        self._scope: anyio.CancelScope | None = None
        self._dead = True
        self._closed = False
        self._lock = asyncio.Lock()
        self._connections = 0
        self._person = PersonTime()
        # One OAuth provider per connection (its tokens are kept in the configuration's storage).
        self._auth = (
            None
            if server.oauth is None or server.url is None
            else oauth_provider(server.url, server.oauth, self._person.waiting)
        )
        self.last_error: str | None = None
        self._fault: str | None = None  # why the transport ended a connection, if it did
        self.bounder = Bounder(server.limits)
        self.in_flight = InFlight()
        self.peer: Peer | None = None  # the server's requests (set by the installer)
        self.listener = Listener(server.name, on_tools_changed, self._resource_updated)

    @property
    def alive(self) -> bool:
        return not self._dead and self._client is not None

    # --- connecting ------------------------------------------------------------------

    async def _connected(self, signal: AbortSignal | None) -> Client:
        async with self._lock:
            if self._closed:
                raise MCPConnectionError(f"MCP server {self.server.name!r} is closed")
            if self._client is not None and not self._dead:
                return self._client
            await self._stop_task()
            ready: asyncio.Future[Client] = asyncio.get_running_loop().create_future()
            self._stop = asyncio.Event()
            self._ready = ready
            self._scope = None
            self._task = asyncio.ensure_future(self._run(ready, self._stop))
            bound = max(self.server.timeout, CONNECT_TIMEOUT)
            waiter = ready_within(ready, bound, self._person)
            try:
                client = await (waiter if signal is None else signal.race(waiter))
            except BaseException as exc:
                await self._stop_task()
                if isinstance(exc, asyncio.TimeoutError):
                    self.last_error = f"no answer within {bound}s"
                    raise MCPConnectionError(
                        f"MCP server {self.server.name!r} did not connect within {bound}s"
                    ) from None
                if isinstance(exc, AbortedError | asyncio.CancelledError):
                    raise
                self.last_error = describe(exc)
                raise MCPConnectionError(
                    f"MCP server {self.server.name!r} could not connect: {self.last_error}"
                ) from exc
            if self._connections:
                # A new server process (or session) may offer other tools than the last.
                self._on_tools_changed()
            self._connections += 1
            self._client = client
            self._dead = False
            self.last_error = None
            return client

    async def _run(self, ready: asyncio.Future[Client], stop: asyncio.Event) -> None:
        """Hold one client open until ``stop`` is set (by close, or end-of-stream)."""

        def ended() -> None:
            self._dead = True
            stop.set()

        with anyio.CancelScope() as scope:
            if self._stop is stop:  # still the current connection
                self._scope = scope
            if not stop.is_set():
                await self._hold(ready, stop, ended)

    async def _hold(
        self, ready: asyncio.Future[Client], stop: asyncio.Event, ended: Callable[[], None]
    ) -> None:
        try:
            async with AsyncExitStack() as stack:
                transport = await self._transport(stack, ended)
                client = Client(
                    transport,
                    # Bounds every request the SDK makes on its own (discover, initialize,
                    # the re-list after a header mismatch); calls are bounded by the signal.
                    read_timeout_seconds=max(self.server.timeout, CONNECT_TIMEOUT),
                    message_handler=self._on_message,
                    # No response cache: a list is always fresh after list_changed.
                    cache=None,
                    **(self.peer.client_options() if self.peer is not None else {}),
                )
                await stack.enter_async_context(client)
                if not ready.done():
                    ready.set_result(client)
                async with anyio.create_task_group() as group:
                    if client.protocol_version in MODERN_PROTOCOL_VERSIONS:
                        tools = _announces_tool_changes(client)
                        group.start_soon(self.listener.run, client, tools)
                    await stop.wait()
                    group.cancel_scope.cancel()
        except BaseException as exc:  # handed to the waiter, or logged
            self._dead = True
            if not ready.done():
                ready.set_exception(exc)
            elif not isinstance(exc, asyncio.CancelledError):
                _log.warning("MCP server %r: connection ended: %s", self.server.name, exc)
            if isinstance(exc, asyncio.CancelledError):
                raise
        finally:
            self._dead = True
            if not ready.done():
                ready.set_exception(MCPConnectionError("connection ended before it was ready"))

    async def _transport(self, stack: AsyncExitStack, ended: Callable[[], None]) -> Any:
        server = self.server
        self._fault = None
        if server.transport == "stdio":
            # Our own transport: it bounds messages as it decodes them, off the loop.
            inner = contained_stdio(server, self.bounder, self._errlog, self._transport_fault)
            return watched(inner, ended, None)
        assert server.url is not None
        http = await stack.enter_async_context(
            httpx2.AsyncClient(
                headers=dict(server.headers),
                auth=self._auth,
                timeout=httpx2.Timeout(30.0, read=server.timeout + 5.0),
                # Every response within max_message_bytes, a large one decoded off the loop.
                transport=BoundedHTTP(
                    self.bounder, self._transport_fault, httpx2.AsyncHTTPTransport()
                ),
            )
        )
        cap = server.limits.max_message_bytes
        inner = streamable_http_client(server.url, http_client=http, max_sse_event_size=cap)
        return watched(inner, ended, self.bounder)

    def _transport_fault(self, cause: str) -> None:
        self._fault = cause

    async def _stop_task(self) -> None:
        """End the connection task (bounded); its client closes the transport and process."""
        task, stop, ready = self._task, self._stop, self._ready
        self._task = self._stop = self._ready = None
        self._client = None
        self._dead = True
        if task is None or stop is None:
            return
        stop.set()
        scope = self._scope
        if scope is not None and not (ready is not None and ready.done()):
            # Still connecting: nothing to wind down in order. Cancelling the connection's
            # scope interrupts the handshake; the SDK's process shutdown is shielded.
            scope.cancel()
        done, _ = await asyncio.wait({task}, timeout=_CLOSE_TIMEOUT)
        if not done and scope is not None:
            # The SDK bounds each step of its shutdown, so this is a transport wedged
            # elsewhere; its scope is cancelled rather than the process leaked.
            scope.cancel()
            await asyncio.wait({task}, timeout=_CLOSE_TIMEOUT)

    async def close(self) -> None:
        """Close the connection for good (bounded); a stdio server's process tree ends."""
        self._closed = True
        async with self._lock:
            await self._stop_task()

    # --- requests --------------------------------------------------------------------

    async def client(self, signal: AbortSignal | None = None) -> Client:
        """The live SDK client (connecting first)."""
        return await self._connected(signal)

    async def capabilities(self, signal: AbortSignal | None = None) -> types.ServerCapabilities:
        """What the server declared (connecting first)."""
        return (await self._connected(signal)).server_capabilities

    def _resource_updated(self, uri: str) -> None:
        if self.peer is not None:
            self.peer.resource_updated(uri)

    def _on_message(self, message: IncomingMessage) -> Any:
        # Connections older than 2026-07-28 announce changes as plain notifications. A
        # notification of a subscriptions/listen stream reaches this handler too: the
        # listener reports it (once).
        if _of_subscription(message):
            pass
        elif isinstance(message, types.ToolListChangedNotification):
            self._on_tools_changed()
        elif self.peer is not None:
            self.peer.notified(message)
        return checkpoint()

    async def list_tools(self, signal: AbortSignal | None = None) -> list[types.Tool]:
        """Every tool of the server, all pages, in the server's order; a tool over
        ``max_schema_bytes`` is left out with a warning.

        Raises:
            MCPLimitError: the list is longer than ``max_tools``.
        """
        tools: list[types.Tool] = []
        cursor: str | None = None
        limit = self.server.limits.max_tools
        for _ in range(1000):  # a paginator that never ends must not hang us
            page = await self.run(signal, partial(_list_page, cursor=cursor))
            meta = page.meta or {}
            refused = meta.get(REFUSED_KEY)
            if refused is None and len(tools) + len(page.tools) > limit:
                refused = f"the server lists more than {limit:,} tools (max_tools)"
            if refused is not None:
                raise MCPLimitError(f"MCP server {self.server.name!r}: tools refused: {refused}")
            for dropped in meta.get(DROPPED_KEY, ()):
                _log.warning("MCP server %r: %s: left out", self.server.name, dropped)
            tools.extend(page.tools)
            cursor = page.next_cursor
            if not cursor:
                return tools
        raise MCPConnectionError(f"MCP server {self.server.name!r}: tools/list never ended")

    async def call(
        self, name: str, arguments: dict[str, Any], signal: AbortSignal
    ) -> types.CallToolResult:
        """Call tool ``name``; the signal's abort cancels the request on the server.

        Raises:
            AbortedError: the signal aborted (the SDK sent the server its cancellation).
            MCPConnectionError: the connection ended while the call was on its way.
        """
        return await self.run(
            signal,
            lambda client: client.call_tool(
                name, arguments, read_timeout_seconds=_CALL_READ_TIMEOUT
            ),
        )

    async def run(self, signal: AbortSignal | None, request: Callable[[Client], Awaitable[T]]) -> T:
        """Make ``request`` with the live client (connecting first); the signal's abort
        cancels it on the server.

        Raises:
            AbortedError: the signal aborted.
            MCPConnectionError: the connection ended while the request was on its way.
        """
        client = await self._connected(signal)
        try:
            return await self._request(signal, lambda: request(client))
        except Exception as exc:
            self._note_failure(exc)
            raise

    async def _request(self, signal: AbortSignal | None, send: Callable[[], Awaitable[T]]) -> T:
        if signal is None:
            return await send()
        signal.throw_if_aborted()
        # The SDK cancels a request when its caller's cancel scope is cancelled: it then
        # sends notifications/cancelled to the server. Aborting the signal cancels this
        # scope, which is that cooperative path (no task is cancelled from outside it).
        scope = anyio.CancelScope()
        dispose = signal.add_listener(lambda _reason: scope.cancel())
        try:
            with scope:
                return await send()
        finally:
            dispose()
        # Reached only when the scope swallowed its own cancellation: the signal aborted.
        raise AbortedError(signal.reason)

    def _note_failure(self, exc: BaseException) -> None:
        """Mark the connection dead after a transport failure, and say so.

        Anything else (an error answer, a malformed result) leaves the connection as it is
        and propagates unchanged: the tool call ends ``TOOL_FAILED`` with its message.
        """
        if isinstance(exc, MCPError):
            lost = exc.error.code == CONNECTION_CLOSED
        else:
            lost = self._dead or isinstance(exc, TRANSPORT_ERRORS)
        if not lost:
            return
        self._dead = True
        cause = exc.error.message if isinstance(exc, MCPError) else describe(exc)
        if self._fault is not None:
            cause = self._fault
        self.last_error = cause
        # Whatever the request was, it is not re-sent: the server may have acted on it.
        raise MCPConnectionError(
            f"MCP server {self.server.name!r} went away during the call: {cause}"
        ) from exc


def _of_subscription(message: IncomingMessage) -> bool:
    params = getattr(message, "params", None)
    meta = getattr(params, "meta", None)
    return isinstance(meta, dict) and SUBSCRIPTION_ID in meta


def _announces_tool_changes(client: Client) -> bool:
    tools = client.server_capabilities.tools
    return (
        client.protocol_version in MODERN_PROTOCOL_VERSIONS
        and tools is not None
        and bool(tools.list_changed)
    )
