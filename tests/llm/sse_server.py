"""A scripted HTTP/1.1 server on loopback for driving provider SDKs over the real wire.

Reusable by every provider adapter test (OpenAI chat completions, Anthropic messages):
the server knows nothing about either API. Each request consumes the next ``Reply`` of the
script (or a callable ``(RecordedRequest) -> Reply``); the server records the method, path,
headers and body of every request it receives.

A ``Reply`` is a status, headers, and either a plain ``body`` or a list of ``chunks`` written
one by one (chunked transfer encoding, flushed after each piece). Use ``sse(...)`` to format
server-sent events. ``reset_after=n`` sends the first ``n`` chunks, then resets the TCP
connection (RST); ``hang_after=n`` sends ``n`` chunks, then waits until the client closes
the connection (``RecordedRequest.client_closed`` is set when it does). ``gates`` maps a chunk
index to an ``asyncio.Event`` the server waits for before writing that chunk.

    server = await SSEServer.start([sse_reply([sse({"a": 1}), sse("[DONE]")])])
    ... client at server.url ...
    server.requests[0].json()
    await server.stop()

Every response carries ``Connection: close``, so each request uses a fresh connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import struct
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "RecordedRequest",
    "Reply",
    "SSEServer",
    "json_reply",
    "sse",
    "sse_reply",
]

_REASONS = {
    200: "OK",
    400: "Bad Request",
    401: "Unauthorized",
    403: "Forbidden",
    404: "Not Found",
    408: "Request Timeout",
    409: "Conflict",
    413: "Payload Too Large",
    422: "Unprocessable Entity",
    429: "Too Many Requests",
    500: "Internal Server Error",
    502: "Bad Gateway",
    503: "Service Unavailable",
    529: "Overloaded",
}


def sse(data: Any, *, event: str | None = None, id: str | None = None) -> bytes:
    """One server-sent event; ``data`` is JSON-encoded unless it is already a ``str``."""
    text = data if isinstance(data, str) else json.dumps(data)
    lines = []
    if event is not None:
        lines.append(f"event: {event}")
    if id is not None:
        lines.append(f"id: {id}")
    lines += [f"data: {line}" for line in text.split("\n")]
    return ("\n".join(lines) + "\n\n").encode()


@dataclass
class Reply:
    """One scripted response."""

    status: int = 200
    headers: Mapping[str, str] = field(default_factory=dict)
    body: bytes | None = None
    chunks: Sequence[bytes | str] = ()
    reset_after: int | None = None
    hang_after: int | None = None
    gates: Mapping[int, asyncio.Event] = field(default_factory=dict)


def sse_reply(
    events: Sequence[bytes | str],
    *,
    status: int = 200,
    headers: Mapping[str, str] | None = None,
    reset_after: int | None = None,
    hang_after: int | None = None,
    gates: Mapping[int, asyncio.Event] | None = None,
) -> Reply:
    """A ``text/event-stream`` response written event by event."""
    return Reply(
        status=status,
        headers={"content-type": "text/event-stream", **(headers or {})},
        chunks=list(events),
        reset_after=reset_after,
        hang_after=hang_after,
        gates=gates or {},
    )


def json_reply(status: int, payload: Any, headers: Mapping[str, str] | None = None) -> Reply:
    """A plain JSON response (error bodies, non-streamed answers)."""
    return Reply(
        status=status,
        headers={"content-type": "application/json", **(headers or {})},
        body=json.dumps(payload).encode(),
    )


@dataclass
class RecordedRequest:
    """What the server received; ``client_closed`` is set once the client hung up."""

    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    client_closed: asyncio.Event = field(default_factory=asyncio.Event)
    completed: asyncio.Event = field(default_factory=asyncio.Event)

    def json(self) -> Any:
        return json.loads(self.body)


Script = Reply | Callable[[RecordedRequest], Reply]


class SSEServer:
    """A loopback HTTP server answering from a script (see the module docstring)."""

    def __init__(self, script: Sequence[Script] = ()) -> None:
        self.script: list[Script] = list(script)
        self.requests: list[RecordedRequest] = []
        self.errors: list[str] = []
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._writers: set[asyncio.StreamWriter] = set()
        self.port = 0

    @classmethod
    async def start(cls, script: Sequence[Script] = ()) -> SSEServer:
        server = cls(script)
        await server._start()
        return server

    async def _start(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def add(self, *replies: Script) -> None:
        self.script.extend(replies)

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for writer in list(self._writers):
            writer.transport.abort()
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            with contextlib.suppress(BaseException):
                await task
        if self._server is not None:
            await self._server.wait_closed()
            self._server = None

    async def __aenter__(self) -> SSEServer:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    # --- connection handling ----------------------------------------------------------

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        self._writers.add(writer)
        try:
            request = await self._read_request(reader)
            if request is None:
                return
            self.requests.append(request)
            reply = self._next_reply(request)
            await self._respond(reply, request, reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            self._writers.discard(writer)
            self._tasks.discard(task)
            writer.close()

    async def _read_request(self, reader: asyncio.StreamReader) -> RecordedRequest | None:
        head = await reader.readuntil(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        method, path, _ = lines[0].split(" ", 2)
        headers: dict[str, str] = {}
        for line in lines[1:]:
            if ":" in line:
                name, value = line.split(":", 1)
                headers[name.strip().lower()] = value.strip()
        if headers.get("transfer-encoding", "").lower() == "chunked":
            body = b""
            while True:
                size = int((await reader.readuntil(b"\r\n")).strip().split(b";")[0], 16)
                data = await reader.readexactly(size + 2)
                if size == 0:
                    break
                body += data[:-2]
        else:
            body = await reader.readexactly(int(headers.get("content-length", "0")))
        return RecordedRequest(method=method, path=path, headers=headers, body=body)

    def _next_reply(self, request: RecordedRequest) -> Reply:
        if not self.script:
            self.errors.append(f"script exhausted at {request.method} {request.path}")
            return json_reply(500, {"error": {"message": "script exhausted"}})
        entry = self.script.pop(0)
        return entry(request) if callable(entry) else entry

    async def _respond(
        self,
        reply: Reply,
        request: RecordedRequest,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
    ) -> None:
        status_line = f"HTTP/1.1 {reply.status} {_REASONS.get(reply.status, 'Status')}\r\n"
        headers = {k.lower(): v for k, v in reply.headers.items()}
        headers["connection"] = "close"
        streamed = reply.body is None
        if streamed:
            headers["transfer-encoding"] = "chunked"
            headers.setdefault("cache-control", "no-cache")
        else:
            assert reply.body is not None
            headers["content-length"] = str(len(reply.body))
        head = status_line + "".join(f"{k}: {v}\r\n" for k, v in headers.items()) + "\r\n"
        writer.write(head.encode("latin-1"))
        if not streamed:
            assert reply.body is not None
            writer.write(reply.body)
            await writer.drain()
            request.completed.set()
            return
        await writer.drain()
        for i, piece in enumerate(reply.chunks):
            if reply.reset_after is not None and i >= reply.reset_after:
                _reset(writer)
                return
            if reply.hang_after is not None and i >= reply.hang_after:
                break
            gate = reply.gates.get(i)
            if gate is not None:
                await _wait_or_closed(gate, reader, request)
                if request.client_closed.is_set():
                    return
            data = piece.encode() if isinstance(piece, str) else piece
            writer.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
            await writer.drain()
        if reply.reset_after is not None:
            _reset(writer)
            return
        if reply.hang_after is not None:
            await _until_closed(reader, request)
            return
        writer.write(b"0\r\n\r\n")
        await writer.drain()
        request.completed.set()


def _reset(writer: asyncio.StreamWriter) -> None:
    """Abort the connection with an RST, as a crashed upstream would."""
    sock = writer.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


async def _until_closed(reader: asyncio.StreamReader, request: RecordedRequest) -> None:
    try:
        while await reader.read(1024):
            pass
    except ConnectionError:
        pass
    request.client_closed.set()


async def _wait_or_closed(
    gate: asyncio.Event, reader: asyncio.StreamReader, request: RecordedRequest
) -> None:
    closed = asyncio.ensure_future(_until_closed(reader, request))
    opened = asyncio.ensure_future(gate.wait())
    try:
        await asyncio.wait({closed, opened}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for fut in (closed, opened):
            if not fut.done():
                fut.cancel()
                with contextlib.suppress(BaseException):
                    await fut
