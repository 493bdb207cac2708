"""A ``MemoryStore`` whose writers trace what the dispatch gate asks of them.

Every event written is rendered into ``store.trace`` (the CONTRACTS.md notation of
``support.render``), and each fence adds ``fence`` when it is asked and ``fenced`` when it
returns, so one list orders events, fences and the bodies of ``Bench`` tools (give the
``Bench`` the same list). A test can hold fences (``hold``), refuse them (``refuse``), and
say that the lease may have expired (``lease_ok = False``; a fence that succeeds renews it).
``durable`` is the last seq a completed flush or fence covered.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

from steerloop.session import MemoryStore, SessionEvent
from steerloop.session._session import EventSink

from ..support import render

__all__ = ["FenceStore"]


class FenceStore(MemoryStore):
    """A memory store with traced, controllable fences (see the module note)."""

    def __init__(self, trace: list[str] | None = None) -> None:
        super().__init__()
        self.trace: list[str] = trace if trace is not None else []
        self.fences = 0
        self.hold: asyncio.Event | None = None
        self.refuse: Exception | None = None
        self.lease_ok = True
        self.durable = 0

    async def open_writer(self, session_id: str) -> EventSink:
        return _FencedSink(self, await super().open_writer(session_id))


class _FencedSink(EventSink):
    def __init__(self, store: FenceStore, inner: EventSink) -> None:
        self._store = store
        self._inner = inner
        self._written = 0

    def write(self, event: SessionEvent) -> None:
        self._inner.write(event)
        self._written = event.seq
        self._store.trace.extend(render(event))

    async def flush(self) -> None:
        covers = self._written
        await self._inner.flush()
        self._store.durable = max(self._store.durable, covers)

    async def fence(self) -> None:
        store = self._store
        covers = self._written
        store.fences += 1
        store.trace.append("fence")
        if store.hold is not None:
            await store.hold.wait()
        if store.refuse is not None:
            raise store.refuse
        await self._inner.fence()
        store.durable = max(store.durable, covers)
        store.lease_ok = True  # a fenced commit renews the lease
        store.trace.append("fenced")

    def lease_valid(self) -> bool:
        return self._store.lease_ok and self._store.refuse is None

    async def close(self) -> None:
        await self._inner.close()

    def publish(self) -> None:
        self._inner.publish()

    async def discard(self) -> None:
        await self._inner.discard()

    def set_header(self, header: Mapping[str, Any]) -> None:
        self._inner.set_header(header)
