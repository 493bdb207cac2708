"""Where an SSE reader's events come from: one protocol for the in-process feed of a
``--role all`` host (``LocalHost``) and the PostgreSQL feed of an API node
(``_pg._feed.PgFeedSource``), so one generator serves both (``_sse``).

A reader registers *first* (``subscribe``), then pulls by its own cursor: durable events
after ``seq`` (``events_after``), then live frames of the open step after ``seq:n``
(``frames_after``), then ``wait``s for the flag to move past the version it saw before
reading. Nothing is pushed to a reader, so a slow one only delays its own next page.
"""

from __future__ import annotations

import asyncio
from typing import Any, Protocol

__all__ = ["FeedReader", "FeedSource", "Wakeup"]


class Wakeup:
    """A version readers wait on: ``bump`` moves it and wakes every waiter; ``wait`` returns
    at once when it moved since the reader saw it (so a wake between two reads is kept)."""

    __slots__ = ("version", "waiters")

    def __init__(self) -> None:
        self.version = 0
        self.waiters: set[asyncio.Future[None]] = set()

    def bump(self) -> None:
        self.version += 1
        for waiter in self.waiters:
            if not waiter.done():
                waiter.set_result(None)
        self.waiters.clear()

    async def wait(self, seen: int, timeout: float) -> None:
        """Return when the version moved past ``seen`` (at once if it has), or at ``timeout``."""
        if self.version != seen:
            return
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[None] = loop.create_future()
        self.waiters.add(waiter)
        # A timer handle, not ``wait_for``: hundreds of readers wait on one session, and
        # each wake re-arms every one of them.
        expiry = loop.call_later(timeout, _expire, waiter)
        try:
            await waiter
        finally:
            expiry.cancel()
            self.waiters.discard(waiter)


def _expire(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)


class FeedReader(Protocol):
    """One SSE reader's view of one session's feed."""

    @property
    def version(self) -> int:
        """Moves whenever something may have happened; read before reading pages."""

    async def wait(self, seen: int, timeout: float) -> None:
        """Return once ``version`` moved past ``seen`` (at once if it already has), or at
        ``timeout``."""

    async def events_after(self, after: int, limit: int) -> list[dict[str, Any]]:
        """Durable events with seq > ``after`` (at most ``limit``) in their JSON form."""

    async def frames_after(self, seq: int, n: int) -> list[tuple[int, dict[str, Any]]]:
        """Live frames ``(n, body)`` of the step open after event ``seq`` numbered > ``n``."""

    def close(self) -> None:
        """The reader leaves (idempotent)."""


class FeedSource(Protocol):
    """Hands out readers; ``closed`` ends every feed (the service is stopping)."""

    @property
    def closed(self) -> bool: ...

    def subscribe(self, session_id: str) -> FeedReader:
        """Register a reader of ``session_id`` (before its first read: no wake is missed)."""
