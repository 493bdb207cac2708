"""The streamable-HTTP transport's responses, bounded before the SDK reads them.

The SDK reads a JSON response whole (``aread``) and decodes it on the event loop, and an
SSE event up to its own cap: a server could send an endless body, or one large message
that holds the loop while it is decoded. Every response here goes through ``BoundedHTTP``:

* a body (or one SSE event) over ``MCPLimits.max_message_bytes`` fails with
  ``ResponseTooLarge`` (naming the cap) as soon as the byte past it arrives, or at once when
  ``Content-Length`` says so; nothing more of it is held;
* a JSON message over ``FAST_CHARS`` (a JSON body, or an SSE event's data) is decoded and
  bounded by the connection's ``Bounder`` in a worker thread, a slice at a time, and handed
  on re-encoded: what the SDK then decodes on the loop is already within the limits.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable

import anyio.to_thread
import httpx2
from mcp.shared.message import SessionMessage

from ._bounds import FAST_CHARS, Bounder

__all__ = ["BoundedHTTP", "ResponseTooLarge"]


class ResponseTooLarge(httpx2.StreamError):
    """A server's response body, or one of its SSE events, is over the byte cap."""


class BoundedHTTP(httpx2.AsyncBaseTransport):
    """An HTTP transport whose responses are bounded (see the module)."""

    def __init__(
        self, bounder: Bounder, on_fault: Callable[[str], None], inner: httpx2.AsyncBaseTransport
    ) -> None:
        self._bounder = bounder
        self._on_fault = on_fault
        self._inner = inner

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        response = await self._inner.handle_async_request(request)
        cap = self._bounder.limits.max_message_bytes
        declared = response.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > cap:
            await response.aclose()
            raise self._too_large(f"a response of {int(declared):,} bytes", cap)
        stream = response.stream
        assert isinstance(stream, httpx2.AsyncByteStream)  # an async transport's
        kind = response.headers.get("content-type", "").partition(";")[0].strip().lower()
        if kind == "text/event-stream":
            body: httpx2.AsyncByteStream = _Events(self, stream, cap)
        elif kind == "application/json":
            body = _Json(self, stream, cap)
        else:
            body = _Capped(self, stream, cap)
        return httpx2.Response(
            status_code=response.status_code,
            headers=response.headers,
            stream=body,
            extensions=response.extensions,
            request=request,
        )

    async def aclose(self) -> None:
        await self._inner.aclose()

    def _too_large(self, what: str, cap: int) -> ResponseTooLarge:
        cause = f"the server sent {what} over max_message_bytes={cap:,}"
        self._on_fault(cause)
        return ResponseTooLarge(cause)

    async def rewrite(self, data: bytes) -> bytes:
        """The JSON-RPC message ``data`` bounded and re-encoded (a large one off the loop);
        a message that does not decode is handed on as it is, for the SDK to report."""
        if len(data) <= FAST_CHARS:
            return data
        message = await self._bounder.decode(data)
        if not isinstance(message, SessionMessage):
            return data

        def encode() -> bytes:
            root = message.message
            return root.model_dump_json(by_alias=True, exclude_none=True).encode()

        return await anyio.to_thread.run_sync(encode)


class _Capped(httpx2.AsyncByteStream):
    """A body of at most ``cap`` bytes, passed through as it comes."""

    def __init__(self, owner: BoundedHTTP, inner: httpx2.AsyncByteStream, cap: int) -> None:
        self._owner = owner
        self._inner = inner
        self._cap = cap

    async def __aiter__(self) -> AsyncIterator[bytes]:
        size = 0
        async for chunk in self._inner:
            size += len(chunk)
            if size > self._cap:
                raise self._owner._too_large("a response body", self._cap)
            yield chunk

    async def aclose(self) -> None:
        await self._inner.aclose()


class _Json(_Capped):
    """A JSON body: read whole (within the cap), then handed on bounded."""

    async def __aiter__(self) -> AsyncIterator[bytes]:
        pieces = [chunk async for chunk in super().__aiter__()]
        yield await self._owner.rewrite(b"".join(pieces))


class _Events(_Capped):
    """An SSE stream: each event at most ``cap`` bytes, its data bounded when large."""

    async def __aiter__(self) -> AsyncIterator[bytes]:
        pending: list[bytes] = []  # the current event's pieces, line ends normalised
        size = 0
        held = b""  # a chunk's last "\r" waits for the next: it may start a "\r\n"
        async for raw in self._inner:
            chunk = held + raw
            held = b""
            if chunk.endswith(b"\r"):
                chunk, held = chunk[:-1], b"\r"
            chunk = chunk.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
            # Events end at a blank line, which may straddle two chunks.
            tail = pending[-1][-1:] if pending else b""
            pending.append(chunk)
            size += len(chunk)
            if b"\n\n" not in tail + chunk:
                if size > self._cap:
                    raise self._owner._too_large("an SSE event", self._cap)
                continue
            *events, rest = b"".join(pending).split(b"\n\n")
            for event in events:
                if len(event) > self._cap:
                    raise self._owner._too_large("an SSE event", self._cap)
                yield await self._event(event) + b"\n\n"
            pending, size = [rest], len(rest)
        rest = b"".join(pending) + held
        if rest:
            yield rest

    async def _event(self, event: bytes) -> bytes:
        if len(event) <= FAST_CHARS:
            return event
        fields: list[bytes] = []
        data: list[bytes] = []
        for line in event.split(b"\n"):
            if line.startswith(b"data:"):
                value = line[5:]
                data.append(value[1:] if value.startswith(b" ") else value)
            else:
                fields.append(line)
        if not data:
            return event
        message = await self._owner.rewrite(b"\n".join(data))
        # A JSON encoding has no line breaks: the bounded message is one data line.
        return b"\n".join([*fields, b"data: " + message])
