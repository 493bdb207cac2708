"""The SSE side of the service: the one feed loop over a ``FeedSource`` (in-process or
PostgreSQL), the event feed of ``GET /v1/sessions/{id}/events`` built on it, and the SSE
response every streaming endpoint answers with."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any

from sse_starlette import EventSourceResponse
from starlette.responses import Response

from ..errors import SessionStorageError
from ..session._json import dumps
from ._content import with_blob_urls
from ._fanout import event_json, event_sse
from ._source import FeedReader, FeedSource
from ._state import Settings

__all__ = ["PAGE", "PING_SECONDS", "RETRY_MS", "feed", "pages", "sse"]

log = logging.getLogger("steerloop.service")

PING_SECONDS = 15.0
RETRY_MS = 2000
"""The SSE ``retry:`` a client waits before reconnecting (with ``Last-Event-ID``)."""
_RETRY_SECONDS = 1.0
PAGE = 500
"""Events one read of the feed takes (and the log's default page)."""


def sse(items: AsyncGenerator[dict[str, Any] | bytes], settings: Settings) -> Response:
    """``items`` as an SSE response, pinged and bounded by ``settings``."""
    return EventSourceResponse(
        _one_per_turn(items),
        ping=settings.ping_seconds,
        sep="\n",  # LF: what AG-UI's and most clients' parsers split events on
        send_timeout=settings.send_timeout,
        headers={"Cache-Control": "no-store"},
    )


async def pages(
    source: FeedSource, reader: FeedReader, seq: int, n: int
) -> AsyncIterator[tuple[str, int, int, dict[str, Any]]]:
    """The one feed loop (in-process or PostgreSQL): ``("frame", seq, n, body)`` for each
    live frame numbered after the cursor ``seq:n``, then ``("event", seq, 0, event)`` for each
    durable event after ``seq``; again while the cursor moves, then ``("caught-up", seq, n,
    {})`` before it waits for the flag. Pulled by this reader's own cursor: a slow reader only
    delays its own next page, nothing is buffered for it.

    The frames are read after the page of events: a frame numbered after ``seq`` was written
    before the first event after ``seq``, so a durable event that lands mid-stream (a steer)
    comes after every frame this reader had not yet read, never instead of them."""
    while not source.closed:
        seen = reader.version  # before reading: a wake during the read is not missed
        try:
            page = await reader.events_after(seq, PAGE)
            frames = await reader.frames_after(seq, n)
        except SessionStorageError as exc:
            await _retry_later(reader, exc)
            continue
        for n, frame in frames:
            yield "frame", seq, n, frame
        for event in page:
            seq, n = event["seq"], 0
            yield "event", seq, 0, event
        if page or frames:
            continue
        yield "caught-up", seq, n, {}
        await reader.wait(seen, PING_SECONDS)


async def _one_per_turn(
    items: AsyncGenerator[dict[str, Any] | bytes],
) -> AsyncGenerator[dict[str, Any] | bytes]:
    """``items`` for the SSE response, one per turn of the event loop.

    The server writes each item to the socket at once (uvicorn's ``send`` does not suspend),
    so a page sent in one go goes on writing after the peer is gone: the transport learns
    it at the first failed write (or a read of the reset), but the server marks the request
    disconnected, and sse-starlette ends the stream, only in a later turn of the loop; each
    write in between lands on a closed transport (asyncio logs ``socket.send() raised
    exception.`` from the fifth on). A turn of the loop between two writes lets that report
    run first: the server drops the write and the stream ends. Only an item ready at once
    needs one made for it; one that came after the feed waited had it (hundreds of readers
    of one session each take one event per wake: no extra turn each)."""
    loop = asyncio.get_running_loop()
    turned = [True]

    def mark() -> None:
        turned[0] = True

    async with contextlib.aclosing(items):
        async for item in items:
            if not turned[0]:
                await asyncio.sleep(0)  # the previous write's report runs first
            turned[0] = False
            loop.call_soon(mark)  # runs at the loop's next turn, whoever causes it
            yield item


async def _retry_later(reader: FeedReader, exc: Exception) -> None:
    """A transient read failure (the server restarts, a pool connection died): the reader
    retries by its cursor after the next wake or a second."""
    log.warning("feed read failed, retrying: %s", exc)
    await reader.wait(reader.version, _RETRY_SECONDS)


async def feed(
    source: FeedSource, session_id: str, seq: int, n: int
) -> AsyncGenerator[dict[str, Any] | bytes]:
    """The SSE feed: durable events after ``seq`` (``id`` = seq), then live frames of the
    open step after ``n`` (``event: stream``, ``id`` = ``seq:n``)."""
    reader = source.subscribe(session_id)  # before the first read: no wake-up is missed
    retry: dict[str, Any] = {"retry": RETRY_MS}  # on the first event: reconnect after 2 s
    try:
        async for kind, at, number, body in pages(source, reader, seq, n):
            if kind == "caught-up":
                continue
            if kind == "event":
                body = with_blob_urls(session_id, body)  # a new dict only if it has blobs
                shared = None if retry else event_sse(body)
                if shared is not None:
                    yield shared  # encoded once for every reader of the session
                else:
                    yield {"event": body["type"], "id": str(at), "data": event_json(body)} | retry
            else:
                yield {"event": "stream", "id": f"{at}:{number}", "data": dumps(body)} | retry
            retry = {}
    finally:
        reader.close()
