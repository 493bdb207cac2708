"""The worker (design/SERVICE.md §3.3–3.4): a supervisor with an explicit state that claims
sessions and owns the small parts that drive them, meeting other processes only through
the service's tables.

* **Liveness.** A ``ControlConnection`` holds the worker's advisory lock and LISTENs; its
  key is stamped on every lease this worker's store takes (``stamp_leases``). Its NOTIFY
  callback only sets flags. A lost connection self-fences: every resident agent is disposed
  (its turn aborted, cause ``disposed``) and the worker registers again under a new key.
* **Claims** (``_capacity.py``): due wakeups of the profiles and versions this worker
  serves, ``FOR UPDATE SKIP LOCKED``, up to the free slots (or in place of idle sessions);
  a claimed session is loaded into the resident table (``_residents.py``).
* **Commands** of resident sessions are applied in order (``_apply.py``).
* **Idle unload.** An idle session with an empty inbox is unloaded after ``idle_unload``
  seconds; its unconsumed commands, if any, become a wakeup again.
* **Leaving** (``close``): the drain of ``_drain.py``.

States (``WorkerState``): ``new`` → ``running`` (↔ ``fencing`` while it registers again after
a lost connection) → ``draining`` (claims stop; running turns may end, their commands still
apply) → ``handing-over`` (commands stop; busy sessions go to other workers) → ``stopped``.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
import time
from collections.abc import Callable
from typing import Any

from ... import Runtime, hooks
from ...errors import SessionConflictError
from ...hooks import SessionEventPayload, StatusPayload
from ...session.store.postgres._store import PostgresStore
from .._profile import Profile
from ._apply import CommandApplier
from ._capacity import ADMIT_AFTER, claim_wakeups
from ._control import ControlConnection
from ._drain import hand_over, mark_draining, wait_turns
from ._live import LivePublisher
from ._residents import Residents
from ._schema import ServiceTables
from ._sweeper import Sweeper

__all__ = ["Worker", "WorkerState"]

log = logging.getLogger("steerloop.service")


class WorkerState(enum.Enum):
    """Where a worker is in its life (module docstring)."""

    NEW = "new"
    RUNNING = "running"
    FENCING = "fencing"
    DRAINING = "draining"
    HANDING_OVER = "handing-over"
    STOPPED = "stopped"


_NEXT: dict[WorkerState, frozenset[WorkerState]] = {
    WorkerState.NEW: frozenset({WorkerState.RUNNING, WorkerState.DRAINING}),
    WorkerState.RUNNING: frozenset({WorkerState.FENCING, WorkerState.DRAINING}),
    WorkerState.FENCING: frozenset({WorkerState.RUNNING, WorkerState.DRAINING}),
    WorkerState.DRAINING: frozenset({WorkerState.HANDING_OVER}),
    WorkerState.HANDING_OVER: frozenset({WorkerState.STOPPED}),
    WorkerState.STOPPED: frozenset(),
}
_CLOSING = frozenset({WorkerState.DRAINING, WorkerState.HANDING_OVER, WorkerState.STOPPED})


class Worker:
    """Drives the sessions this process claims (roles ``worker`` and ``all``)."""

    def __init__(
        self,
        rt: Runtime,
        store: PostgresStore,
        profiles: dict[str, Profile],
        *,
        worker_id: str,
        capacity: int = 100,
        idle_unload: float | None = 300.0,
        poll: float = 1.0,
        dispose_timeout: float = 10.0,
        drain_timeout: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if capacity < 1:
            raise ValueError("capacity must be >= 1")
        if drain_timeout < 0:
            raise ValueError("drain_timeout must be >= 0")
        self.rt = rt
        self.store = store
        self.profiles = profiles
        self.worker_id = worker_id
        self.capacity = capacity
        self.idle_unload = idle_unload
        self.poll = poll
        self.drain_timeout = drain_timeout
        self._clock = clock
        self.t = ServiceTables(store.schema)
        self.state = WorkerState.NEW
        self.control: ControlConnection | None = None
        self.residents = Residents(
            rt, store, self.t, worker_id=worker_id, dispose_timeout=dispose_timeout, clock=clock
        )
        self.commands = CommandApplier(
            self.residents,
            store,
            worker_id=worker_id,
            clock=clock,
            stopped=lambda: (
                self._lost or self.state in (WorkerState.HANDING_OVER, WorkerState.STOPPED)
            ),
            drop=self.residents.unload,
        )
        self._sweeper: Sweeper | None = None
        self._publisher: LivePublisher | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self._dirty: set[str] = set()
        self._wake = True  # claim at start
        self._lost = False  # the control connection reported a loss (handled by the loop)
        self._kick = asyncio.Event()
        self._loop_task: asyncio.Task[None] | None = None
        self._disposers = [
            rt.hooks.on(hooks.STATUS, self._on_status),
            rt.hooks.on(hooks.SESSION_EVENT, self._on_event),
        ]

    def _enter(self, state: WorkerState) -> None:
        """Move to ``state``; a move the life of a worker has no arrow for is a bug."""
        if state not in _NEXT[self.state]:
            raise RuntimeError(f"worker {self.worker_id}: {self.state.value} → {state.value}")
        self.state = state

    @property
    def _closing(self) -> bool:
        return self.state in _CLOSING

    # --- lifecycle ------------------------------------------------------------------------

    async def start(self) -> None:
        self.residents.pool = await self.store.pool()
        await self._register()
        self._enter(WorkerState.RUNNING)
        self._loop_task = asyncio.get_running_loop().create_task(
            self._run(), name=f"steerloop-worker {self.worker_id}"
        )
        self._publisher = LivePublisher(self.residents.pool, self.t, self.rt)
        self._publisher.start()

    async def _register(self) -> None:
        control = ControlConnection(
            self.store.dsn,
            self.t.schema,
            worker_id=self.worker_id,
            profiles={name: p.version for name, p in self.profiles.items()},
            capacity=self.capacity,
            on_lost=self._on_lost,
            on_notify=self._on_notify,
        )
        await control.start()
        self.control = control
        self.store.stamp_leases(control.key)
        self._sweeper = Sweeper(self.residents.pool, self.t, control, dsn=self.store.dsn)
        self._sweeper.start()
        self._wake = True
        self._kick.set()

    async def close(self) -> None:
        """Leave gracefully (``_drain.py``): stop claiming, unload the idle sessions, let
        running turns end for up to ``drain_timeout`` seconds, hand the still-running ones
        over like a takeover. Then the worker row and lock go."""
        if self._closing:
            return
        self._enter(WorkerState.DRAINING)
        self._kick.set()
        if self.control is not None and not self.control.lost:
            await mark_draining(self.residents, self.control.key)
        if self._loop_task is not None:
            await asyncio.gather(self._loop_task, return_exceptions=True)
        await asyncio.gather(*list(self._tasks), return_exceptions=True)
        residents = self.residents
        # Idle sessions go at once: their next message is served elsewhere without waiting.
        for session_id in [sid for sid in residents if not residents.busy(sid)]:
            await residents.unload(session_id)
        # Running turns may end meanwhile; their commands (a steer, a cancel) still apply.
        await wait_turns(residents, self.drain_timeout, self._kick, lambda: self._lost)
        self._enter(WorkerState.HANDING_OVER)
        await asyncio.gather(*self.commands.tasks(), return_exceptions=True)
        for dispose in self._disposers:
            dispose()
        for session_id in residents:
            if residents.busy(session_id):
                await hand_over(residents, session_id)
            else:
                await residents.unload(session_id)  # commands left: wake another
        await self._stop_helpers()
        if self.control is not None:
            await self.control.close()
        self._enter(WorkerState.STOPPED)

    async def _stop_helpers(self) -> None:
        helpers: tuple[LivePublisher | Sweeper | None, ...] = (self._publisher, self._sweeper)
        for helper in helpers:
            if helper is None:
                continue
            try:
                await helper.close()
            except Exception:
                log.exception("worker %s: closing %r failed", self.worker_id, helper)
        self._publisher = None
        self._sweeper = None

    def resident(self) -> tuple[str, ...]:
        return tuple(self.residents)

    # --- callbacks (never block) ----------------------------------------------------------

    def _on_notify(self, channel: str, payload: str) -> None:
        if channel == self.t.wake_channel:
            self._wake = True
            self._kick.set()
            if self.residents.occupied >= self.capacity:
                # Full: the newcomer may be admitted in place of an idle session once it
                # has waited ADMIT_AFTER (a worker with a free slot had it first).
                asyncio.get_running_loop().call_later(ADMIT_AFTER * 1.2, self._rewake)
            return
        session_id = payload.rpartition(":")[0] or payload
        if session_id in self.residents and not self._lost and not self._leaving:
            # The flag, and an applier task if none runs: nothing here awaits.
            self.commands.schedule(session_id)
        else:
            self._dirty.add(session_id)
            self._kick.set()

    @property
    def _leaving(self) -> bool:
        return self.state in (WorkerState.HANDING_OVER, WorkerState.STOPPED)

    def _rewake(self) -> None:
        self._wake = True
        self._kick.set()

    def _on_lost(self) -> None:
        self._lost = True
        self._kick.set()

    def _on_status(self, payload: StatusPayload) -> None:
        session_id = payload.agent.id
        if session_id in self.residents:
            self.residents.touch(session_id, payload.status)
            self._kick.set()

    def _on_event(self, payload: SessionEventPayload) -> None:
        self.residents.touch(payload.session.id)

    # --- the loop -------------------------------------------------------------------------

    async def _run(self) -> None:
        next_poll = 0.0
        period = self.poll
        if self.idle_unload is not None:
            period = max(0.05, min(period, self.idle_unload / 2))
        while not self._closing:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(period):
                    await self._kick.wait()
            self._kick.clear()
            if self._closing:
                return
            try:
                if self._lost:
                    await self._self_fence()
                    continue
                next_poll = await self._round(next_poll)
            except Exception:
                # A database hiccup must not end the worker: the next round retries.
                log.exception("worker %s: round failed", self.worker_id)

    async def _round(self, next_poll: float) -> float:
        """One round of the loop; returns when the next poll is due."""
        await self._drop_fenced()
        await self.residents.write_statuses()
        dirty, self._dirty = self._dirty, set()
        for session_id in dirty:
            self.commands.schedule(session_id)
        now = self._clock()
        if self._wake or now >= next_poll:
            self._wake = False
            next_poll = now + self.poll
            await self.commands.recheck()
            await self._claim()
        if self.idle_unload is not None:
            await self.residents.unload_idle(now, self.idle_unload)
        return next_poll

    def _spawn(self, coro: Any, name: str) -> None:
        task = asyncio.get_running_loop().create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _drop_fenced(self) -> None:
        """Unload the sessions whose writer failed (a refused fence: someone else owns the
        session now; or a storage failure): their unconsumed commands become a wakeup."""
        for session_id in self.residents:
            writer = self.store.writer(session_id)
            if writer is None or writer.error is not None:
                await self.residents.unload(session_id)

    async def _self_fence(self) -> None:
        """The control connection is gone: this worker may already be declared dead, so
        every resident agent is disposed; then register again under a new key."""
        self._lost = False
        self._enter(WorkerState.FENCING)
        log.warning("worker %s: self-fencing %d sessions", self.worker_id, len(self.residents))
        for session_id in self.residents:
            # Fenced before the abort: nothing more of ours commits and the lease is not
            # released, so the log stays as a crash leaves it and the sweeper hands the
            # session on (revocation after the grace, takeover, repair, continue).
            writer = self.store.writer(session_id)
            if writer is not None:
                writer.lose()
            await self.residents.unload(session_id, check=False)
        await self._stop_helpers()
        old, self.control = self.control, None
        if old is not None:
            await old.close()
        while not self._closing:
            try:
                await self._register()
                if old is not None and self._sweeper is not None:
                    self._sweeper.prove(old.key)  # should it lead: no grace for itself
                if not self._closing:  # close() may have begun while registering
                    self._enter(WorkerState.RUNNING)
                return
            except Exception:
                log.exception("worker %s: registering again failed", self.worker_id)
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(1.0):
                        await self._kick.wait()
                self._kick.clear()

    # --- claims ---------------------------------------------------------------------------

    async def _claim(self) -> None:
        """Claim what fits (``_capacity.py``): free slots first; when they are all taken,
        wakeups that waited ``ADMIT_AFTER`` in place of the least recently active idle
        sessions, which are unloaded once the newcomers' loads are under way."""
        control = self.control
        if control is None or control.lost or not self.profiles:
            return
        residents = self.residents
        served = {name: p.version for name, p in self.profiles.items()}
        free = self.capacity - residents.occupied
        pool, q = residents.pool, residents.q
        rows = await claim_wakeups(pool, q, control.key, served, free)
        if len(rows) >= free:  # full (or now full): room only in place of idle sessions
            room = len(residents.idle_lru()) + min(free, 0)
            rows += await claim_wakeups(pool, q, control.key, served, room, min_age=ADMIT_AFTER)
        for row in rows:
            session_id = row["session_id"]
            if session_id in residents or session_id in residents.loading:
                await residents.done_wakeup(session_id, control.key)
                self.commands.schedule(session_id)
                continue
            residents.loading.add(session_id)
            self._spawn(self._load(session_id, control.key), f"steerloop-load {session_id}")
        over = residents.occupied - self.capacity
        for session_id in residents.idle_lru()[: max(over, 0)]:
            log.info("worker %s: unloading idle %s for a newcomer", self.worker_id, session_id)
            await residents.unload(session_id)

    async def _load(self, session_id: str, key: int) -> None:
        residents = self.residents
        try:
            leaving = lambda: self._closing or self._lost  # noqa: E731
            if await residents.load(session_id, key, self.profiles, leaving):
                self.commands.schedule(session_id)
        except SessionConflictError as exc:
            # Someone holds a live lease: that owner applies. If it is dead the sweeper
            # revokes it and queues the session again.
            log.info("worker %s: %s is held elsewhere: %s", self.worker_id, session_id, exc)
            with contextlib.suppress(Exception):
                await residents.done_wakeup(session_id, key)
        except Exception:
            log.exception("worker %s: loading %s failed; retried later", self.worker_id, session_id)
            with contextlib.suppress(Exception):
                await residents.retry_later(session_id, key)
        finally:
            residents.loading.discard(session_id)
