"""A hostile MCP server over streamable HTTP, of the tests' own: the SDK's server (2026-07-28,
stateless) answers everything but the calls of its hostile tools, which get raw bodies no
well-behaved server sends:

* ``endless_json`` / ``endless_sse``: a JSON body, or one SSE event, that never ends;
* ``blocks_json`` / ``blocks_sse``: a result of ``n`` text blocks (200,000 is ~6 MB) as a
  JSON body, or as one SSE event.

Run as ``python http_hostile_server.py STATE_DIR PORT``; each hostile call is noted in
``STATE_DIR/calls``.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping
from pathlib import Path
from typing import Any

import uvicorn
from mcp.server.mcpserver import MCPServer

STATE = Path(sys.argv[1])
PORT = int(sys.argv[2])

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

server = MCPServer("http-hostile")
HOSTILE = ("endless_json", "endless_sse", "blocks_json", "blocks_sse")


@server.tool()
def echo(text: str) -> str:
    """Return the text."""
    return text


def _listed(name: str) -> None:
    # Listed like any tool (the client validates arguments against the schema); their
    # calls never reach the SDK: ``hostile`` below answers them.
    @server.tool(name=name, description=f"hostile: {name}", structured_output=False)
    def body(n: int = 0) -> str:
        raise AssertionError(f"{name} is answered by the hostile layer")


for _name in HOSTILE:
    _listed(_name)


def blocks(request_id: Any, n: int) -> bytes:
    items = ",".join(f'{{"type":"text","text":"block {i}"}}' for i in range(n))
    return (
        f'{{"jsonrpc":"2.0","id":{json.dumps(request_id)},'
        f'"result":{{"resultType":"complete","content":[{items}]}}}}'
    ).encode()


async def endless(prefix: bytes) -> AsyncIterator[bytes]:
    yield prefix
    chunk = b"x" * 65_536
    while True:
        yield chunk


async def respond(
    receive: Receive, send: Send, kind: str, body: AsyncIterator[bytes] | bytes
) -> None:
    headers = [(b"content-type", kind.encode())]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    if isinstance(body, bytes):
        await send({"type": "http.response.body", "body": body})
        return
    # Until the client goes away (uvicorn drops what is sent after that, so it is watched).
    gone = asyncio.ensure_future(receive())
    try:
        async for chunk in body:
            if gone.done():
                return
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await asyncio.sleep(0)
    finally:
        gone.cancel()


def hostile(app: Callable[[Scope, Receive, Send], Awaitable[None]]) -> Any:
    async def wrapped(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            await app(scope, receive, send)
            return
        chunks = []
        while True:
            message = await receive()
            chunks.append(message.get("body", b""))
            if not message.get("more_body"):
                break
        raw = b"".join(chunks)
        request = json.loads(raw) if raw else {}
        params = request.get("params") or {}
        name = params.get("name") if request.get("method") == "tools/call" else None
        if name not in HOSTILE:
            replayed = False

            async def replay() -> Message:
                nonlocal replayed
                if replayed:
                    return await receive()
                replayed = True
                return {"type": "http.request", "body": raw, "more_body": False}

            await app(scope, replay, send)
            return
        with (STATE / "calls").open("a") as f:
            f.write(f"{name}\n")
        n = int((params.get("arguments") or {}).get("n", 0))
        if name == "endless_json":
            opening = b'{"jsonrpc":"2.0","result":"'
            await respond(receive, send, "application/json", endless(opening))
        elif name == "endless_sse":
            await respond(receive, send, "text/event-stream", endless(b"event: message\ndata: "))
        elif name == "blocks_json":
            await respond(receive, send, "application/json", blocks(request["id"], n))
        else:
            event = b"event: message\ndata: " + blocks(request["id"], n) + b"\n\n"
            await respond(receive, send, "text/event-stream", event)

    return wrapped


if __name__ == "__main__":
    app = hostile(server.streamable_http_app(stateless_http=True))
    uvicorn.run(app, host="127.0.0.1", port=PORT, log_level="warning")
