"""Live frames of a worker's open steps, published to ``steerloop_live`` (``LivePublisher``).

``agent/assistant-stream`` frames are coalesced every 50 ms into one INSERT (``after_seq``,
``n``, the lease token) plus one NOTIFY ``<sid>:<after_seq>:<n>`` on ``steerloop_feed``; a
step's rows are deleted once the event that ends it has had a tick to commit, and rows of
tokens no longer holding a lease are swept as stale. Live frames are best effort: the
committed ``assistant/message`` supersedes them.
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import logging
from dataclasses import dataclass
from typing import Any

from ... import Runtime
from ...hooks import ASSISTANT_STREAM, SESSION_EVENT, SessionEventPayload, StreamFramePayload
from ...session._json import dumps
from ...session.store.postgres._store import PAYLOAD_BYTES, escape_id
from .._api import frame_json
from ._schema import ServiceTables
from ._sql import NOTIFY, Sql

__all__ = ["LivePublisher"]

log = logging.getLogger("steerloop.service.feed")


@dataclass(slots=True)
class _Step:
    """The open step of one session as published: frames after ``after_seq`` under
    ``token``, the last one numbered ``n``."""

    after_seq: int
    token: int
    n: int = 0


_Row = tuple[str, int, int, int, str]  # session_id, after_seq, n, token, frame JSON


class LivePublisher:
    """Publishes a worker's live frames to ``steerloop_live`` (see the module docstring).

    ``start()`` subscribes to the runtime's hooks and starts the flusher; ``await close()``
    stops it cooperatively after a last flush. Frames of sessions whose writer has no lease
    token (not a PostgreSQL store) are not published.

    Args:
        rt: the runtime whose frames are published (``None``: a publisher that only sweeps
            stale rows; ``start`` refuses it).
        every: the coalescing window in seconds (one INSERT + one NOTIFY per window).
        max_pending: frames held between flushes; past it the oldest are dropped (the
            committed ``assistant/message`` supersedes them).
        stale_every: seconds between sweeps of rows whose token holds no lease.
    """

    def __init__(
        self,
        pool: Any,
        tables: ServiceTables,
        rt: Runtime | None,
        *,
        every: float = 0.05,
        max_pending: int = 4096,
        stale_every: float = 30.0,
    ) -> None:
        self._pool = pool
        self._tables = tables
        self._rt = rt
        self.every = every
        self.max_pending = max_pending
        self.stale_every = stale_every
        self._steps: dict[str, _Step] = {}
        self._pending: builtins.list[_Row] = []
        self._retire: dict[str, int] = {}  # sid -> rows below this after_seq are superseded
        self._retiring: dict[str, int] = {}  # retired one tick ago: committed by now
        self._kick = asyncio.Event()
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._disposers: builtins.list[Any] = []
        self.flushes = 0
        self.published = 0
        """Frames committed to ``steerloop_live`` so far."""
        self.dropped = 0
        self._q = Sql(tables)

    def start(self) -> None:
        if self._task is not None:
            return
        if self._rt is None:
            raise ValueError("a LivePublisher without a runtime has no frames to publish")
        self._disposers = [
            self._rt.hooks.on(ASSISTANT_STREAM, self._on_frame),
            self._rt.hooks.on(SESSION_EVENT, self._on_event),
        ]
        self._task = asyncio.get_running_loop().create_task(
            self._run(), name="steerloop-live-publisher"
        )

    async def close(self) -> None:
        for dispose in self._disposers:
            dispose()
        self._disposers = []
        self._stop.set()
        self._kick.set()
        if self._task is not None:
            with contextlib.suppress(Exception):
                await self._task

    # --- hooks (synchronous, never block) ---------------------------------------------------

    def _on_frame(self, payload: StreamFramePayload) -> None:
        agent = payload.agent
        token = getattr(agent.session._sink, "token", None)
        if type(token) is not int:
            return
        session_id = agent.id
        after = agent.session.next_seq - 1
        step = self._steps.get(session_id)
        if step is None or step.after_seq != after or step.token != token:
            if step is not None and step.token != token:
                # A new lease: frames queued under the old token are not ours to publish.
                self._pending = [r for r in self._pending if r[0] != session_id]
            step = self._steps[session_id] = _Step(after, token)
        step.n += 1
        if len(self._pending) >= self.max_pending:
            del self._pending[0]
            self.dropped += 1
        self._pending.append((session_id, after, step.n, token, dumps(frame_json(payload.frame))))
        self._kick.set()

    def _on_event(self, payload: SessionEventPayload) -> None:
        session_id = payload.session.id
        step = self._steps.get(session_id)
        if step is None or payload.event.seq <= step.after_seq:
            return
        # The event that ends the step supersedes its frames once it has committed.
        del self._steps[session_id]
        self._retire[session_id] = max(self._retire.get(session_id, 0), payload.event.seq)
        self._kick.set()

    # --- the flusher --------------------------------------------------------------------------

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        next_sweep = loop.time() + self.stale_every
        while True:
            idle = not self._pending and not self._retire and not self._retiring
            if idle and self._stop.is_set():
                return
            timeout = max(0.0, next_sweep - loop.time()) if idle else self.every
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout):
                    if idle:
                        await self._kick.wait()
                    else:
                        await self._stop.wait()  # the window: gather what comes
            self._kick.clear()
            sweep = loop.time() >= next_sweep
            if sweep:
                next_sweep = loop.time() + self.stale_every
            await self._flush(sweep)

    async def _flush(self, sweep: bool) -> None:
        rows, self._pending = self._pending, []
        ready, self._retiring, self._retire = self._retiring, self._retire, {}
        if not rows and not ready and not sweep:
            return
        tops: dict[tuple[str, int], int] = {}
        for sid, after, n, _token, _frame in rows:
            tops[(sid, after)] = max(n, tops.get((sid, after), 0))
        try:
            async with self._pool.acquire() as conn, conn.transaction():
                if rows:
                    await conn.execute(
                        self._q.insert_live, *map(builtins.list, zip(*rows, strict=True))
                    )
                    for payload in _live_payloads(tops):
                        await conn.execute(NOTIFY, self._tables.feed_channel, payload)
                if ready:
                    await conn.execute(
                        self._q.retire_live, builtins.list(ready), builtins.list(ready.values())
                    )
                if sweep:
                    await conn.execute(self._q.stale_live)
            self.flushes += 1
            self.published += len(rows)
        except Exception as exc:  # best effort: the committed events supersede live frames
            log.warning("live frames: publishing failed (%s)", type(exc).__name__)
            for sid, below in ready.items():
                self._retire[sid] = max(self._retire.get(sid, 0), below)


def _live_payloads(tops: dict[tuple[str, int], int]) -> builtins.list[str]:
    """``<sid>:<after_seq>:<n>`` items, comma-separated, split below the server's limit."""
    payloads: builtins.list[str] = []
    items: builtins.list[str] = []
    size = 0
    for (sid, after), n in tops.items():
        item = f"{escape_id(sid)}:{after}:{n}"
        if items and size + len(item.encode()) + 1 > PAYLOAD_BYTES:
            payloads.append(",".join(items))
            items, size = [], 0
        items.append(item)
        size += len(item.encode()) + 1
    if items:
        payloads.append(",".join(items))
    return payloads
