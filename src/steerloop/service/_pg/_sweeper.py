"""The sweeper: revokes dead workers' leases, queues takeovers, repairs lost NOTIFYs.

Every worker runs one (design/SERVICE.md §3.3, §3.4); only the **leader** sweeps. Leadership
is ``pg_try_advisory_lock(ns, 0)`` taken on the worker's control connection, so it lives
exactly as long as that connection: when the leader dies, the next sweeper to try takes it.

A sweep by the leader, each rule idempotent (two leaders for an instant do no harm):

1. **Dead workers.** A worker key is *absent* when no granted advisory lock ``(ns, key)``
   exists. Keys come from the worker rows, the owners of live-or-expired leases and the
   claimers of wakeups. The leader records when *it* first saw each key absent; a key absent
   for ``grace`` seconds is dead. A new leader therefore waits one grace before revoking
   anything (a brief reconnect or a primary restart must not revoke everyone).
2. **Revocation** (one transaction): the dead keys' leases get ``lease_id = NULL, token =
   token + 1, expires_at = now()``; each revoked session that was running or has unconsumed
   commands gets a wakeup (reason ``takeover``; an existing one is released from its claimer,
   who could not have taken the lease yet) and a NOTIFY on ``steerloop_wake``; wakeup
   claims held by dead keys are cleared (and re-announced); dead worker rows are deleted.
3. **TTL** (``ttl_takeover``): a paused or partitioned owner keeps its socket and its lock, so
   only its lease's expiry shows it. An expired lease of a running session without a wakeup
   gets one (reason ``takeover``); the fence already refuses the old owner.
4. **Orphans**: a session whose status says a turn is running but whose lease was revoked or
   released at least ``reconcile_after`` ago, with no wakeup (a takeover wakeup lost to a
   race), gets one (reason ``takeover``).
5. **Reconciliation** (lost NOTIFYs): unconsumed commands older than ``reconcile_after``
   with no live lease and no wakeup → a wakeup (reason ``reconcile``) + NOTIFY
   ``steerloop_wake``; a live lease with unconsumed commands older than ``renotify_after`` →
   NOTIFY its owner's ``steerloop_w_<key>`` again (at most once per ``renotify_after`` per
   session).

A leader that is paused (SIGSTOP, a stalled VM) keeps its socket and so its lock, and would
stop every sweep, the TTL path included. So the other sweepers watch it: when the worker row
of the backend holding the leadership lock has a heartbeat (its control connection's check)
older than ``leader_stale_after``, they end that backend (``pg_terminate_backend``). Its lock
goes, another sweeper leads, and the deposed worker self-fences when it runs again.

Database times (``now()``) judge leases, commands and heartbeats, so hosts need no
synchronised clocks; only the grace is measured on the leader's own clock (``clock``,
monotonic by default).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ._control import LEADER_KEY, ControlConnection
from ._depose import depose_hung, depose_stale_leader
from ._schema import ServiceTables
from ._sql import NOTIFY_EACH, NOTIFY_OWNERS, TRY_LOCK, UNLOCK, Sql
from ._watch import Watches

__all__ = ["SweepReport", "Sweeper"]

log = logging.getLogger("steerloop.service")

TAKEOVER = "takeover"
RECONCILE = "reconcile"
_PROVEN_TTL = 60.0
"""Seconds a proven death is kept for a key not (yet) seen absent."""


@dataclass(slots=True)
class SweepReport:
    """What one ``sweep_once`` did (for tests and logs)."""

    leader: bool = False
    absent: list[int] = field(default_factory=list)
    dead: list[int] = field(default_factory=list)
    revoked: list[str] = field(default_factory=list)
    woken: list[str] = field(default_factory=list)
    """Sessions given a wakeup by this sweep (takeover, TTL or reconciliation)."""
    unclaimed: list[str] = field(default_factory=list)
    """Wakeups whose claim by a dead key was cleared."""
    renotified: list[str] = field(default_factory=list)
    deposed: int | None = None
    """The key of a stale leader whose control connection this (non-leading) sweep ended."""
    hung: list[int] = field(default_factory=list)
    """Keys of workers whose heartbeat went stale: this (leading) sweep ended their control
    connections, so their leases are revoked now rather than at their TTL."""


class Sweeper:
    """The sweeper task of one worker (leader by advisory lock on its control connection).

    Args:
        pool: an asyncpg pool on the database (the sweep's statements run there).
        tables: the schema's tables.
        control: this worker's started control connection (leadership lives on it). When it
            is lost, this sweeper stops leading; the worker starts a new ``Sweeper`` with its
            new control connection.
        grace: seconds a worker's lock must be absent, as seen by the leader, before its
            leases are revoked.
        period: seconds between sweeps (and between leadership attempts).
        ttl_takeover: turn expired leases of running sessions into wakeups.
        reconcile_after: age in seconds of an unconsumed command that reconciliation repairs.
        renotify_after: age in seconds of an unconsumed command whose live owner is notified
            again (and the least time between two such notifications of one session).
        leader_stale_after: seconds without a heartbeat after which a leader counts as
            hung and is deposed (the default: the control connection's check interval
            plus its timeout, past which a live worker has given itself up anyway).
        stale_after: the same for any other worker, judged by the leader: a paused or hung
            owner's control connection is ended, so its sessions are taken over now instead
            of at their leases' expiry (``None``: only the TTL shows a paused owner). The
            paused worker, once it runs again, finds its connection gone and self-fences.
        query_timeout: seconds any one statement of a sweep may take.
        clock: the leader's clock for the grace (seconds, monotonic).
        dsn: with it, the running sweeper (``start``) also *watches* locks (``_watch.py``):
            as leader each other worker's key, else the leadership lock, each on a
            connection of its own. A death a watch proves is swept at once, without the
            grace; without ``dsn`` deaths are found by the periodic pass only.
        max_watches: most worker keys the leader watches (one connection each).
    """

    def __init__(
        self,
        pool: Any,
        tables: ServiceTables,
        control: ControlConnection,
        *,
        grace: float = 1.0,
        period: float = 0.5,
        ttl_takeover: bool = True,
        reconcile_after: float = 1.0,
        renotify_after: float = 2.0,
        leader_stale_after: float = 6.0,
        stale_after: float | None = 6.0,
        query_timeout: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
        dsn: str | None = None,
        max_watches: int = 32,
    ) -> None:
        if grace < 0 or not period > 0 or reconcile_after < 0 or renotify_after < 0:
            raise ValueError("grace, reconcile_after and renotify_after ≥ 0, period > 0")
        if not leader_stale_after > 0 or not query_timeout > 0:
            raise ValueError("leader_stale_after and query_timeout must be positive")
        if stale_after is not None and not stale_after > 0:
            raise ValueError("stale_after must be positive (or None)")
        self._pool = pool
        self._t = tables
        self._q = Sql(tables)
        self.control = control
        self.grace = grace
        self.period = period
        self.ttl_takeover = ttl_takeover
        self.reconcile_after = reconcile_after
        self.renotify_after = renotify_after
        self.leader_stale_after = leader_stale_after
        self.stale_after = stale_after
        self._timeout = query_timeout
        self._clock = clock
        self.leader = False
        self._absent_since: dict[int, float] = {}
        self._renotified: dict[str, float] = {}
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.sweeps = 0
        """Sweeps run as leader (for tests and metrics)."""
        self._proven: dict[int, float] = {}  # key -> when a watch proved its holder gone
        self._again = asyncio.Event()  # a watch fired: sweep now
        self.watches: Watches | None = None
        if dsn is not None:
            self.watches = Watches(
                dsn, control.ns, LEADER_KEY, control.worker_id, self._on_dead, limit=max_watches
            )

    def start(self) -> None:
        """Start the sweep task (call from the running loop)."""
        if self._task is not None:
            raise RuntimeError("the sweeper was already started")
        self._task = asyncio.get_running_loop().create_task(
            self._run(), name=f"steerloop-sweeper {self.control.worker_id}"
        )

    async def close(self) -> None:
        """Stop cooperatively (the current sweep finishes), then give up leadership."""
        self._stop.set()
        self._again.set()
        if self._task is not None:
            with contextlib.suppress(Exception):
                await self._task
        if self.watches is not None:
            await self.watches.close()
        if self.leader:
            self.leader = False
            with contextlib.suppress(Exception):
                await self.control.fetchval(UNLOCK, *self._lock)

    @property
    def _lock(self) -> tuple[int, int]:
        return (self.control.ns, LEADER_KEY)

    async def _run(self) -> None:
        while not self._stop.is_set():
            self._again.clear()
            try:
                await self.sweep_once()
                await self._sync_watches()
            except Exception:
                log.exception("sweeper of %s: sweep failed", self.control.worker_id)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.period):
                    await self._again.wait()  # a watch proved a death, or close()

    def prove(self, key: int) -> None:
        """``key``'s worker is gone for certain (e.g. this worker's own previous key after it
        lost its control connection): when this sweeper leads, its leases are revoked at
        once, without the grace."""
        self._on_dead(key)

    def _on_dead(self, key: int) -> None:
        """A watch got the lock of ``key`` (a worker's, or the dead leader's): its holder is
        gone for certain; sweep now (never blocks)."""
        self._proven[key] = self._clock()
        self._again.set()

    async def _sync_watches(self) -> None:
        if self.watches is None or self._stop.is_set() or self.control.lost:
            return
        async with self._pool.acquire() as conn:
            await self.watches.sync(conn, self._q, self.control.key, self.leader)

    async def _elect(self) -> bool:
        """Hold or try to take the leadership lock; forget leader state on a change."""
        if self.control.lost:
            self._demote()
            return False
        if self.leader:
            return True
        try:
            won = await self.control.fetchval(TRY_LOCK, *self._lock)
        except ConnectionError:
            return False
        if won:
            self.leader = True
            self._absent_since.clear()  # a new leader observes absences itself: one grace
            self._renotified.clear()
            log.info("sweeper of %s leads", self.control.worker_id)
        return bool(won)

    def _demote(self) -> None:
        if self.leader:
            log.info("sweeper of %s no longer leads", self.control.worker_id)
        self.leader = False

    async def sweep_once(self) -> SweepReport:
        """One round: take leadership if free, and sweep if this sweeper leads."""
        report = SweepReport()
        if not await self._elect():
            if not self.control.lost:
                async with self._pool.acquire() as conn:
                    report.deposed = await self._depose_stale_leader(conn)
            return report
        report.leader = True
        async with self._pool.acquire() as conn:
            if self.stale_after is not None:
                await self._depose_hung(conn, report)
            await self._find_dead(conn, report)
            if report.dead:
                await self._revoke(conn, report)
            if self.ttl_takeover:
                await self._ttl(conn, report)
            await self._orphans(conn, report)
            await self._reconcile(conn, report)
        self.sweeps += 1
        if report.revoked or report.woken or report.unclaimed:
            log.info(
                "sweep: dead workers %s, revoked %s, woken %s, unclaimed %s",
                report.dead,
                report.revoked,
                report.woken,
                report.unclaimed,
            )
        return report

    async def _depose_stale_leader(self, conn: Any) -> int | None:
        """End the control connection of a leader whose heartbeat is stale (it is paused or
        hung: its socket and lock live on, but it sweeps nothing)."""
        return await depose_stale_leader(
            conn, self._q, self.control, self.leader_stale_after, self._timeout
        )

    async def _depose_hung(self, conn: Any, report: SweepReport) -> None:
        """End the control connections of workers whose heartbeat is older than
        ``stale_after`` (paused, partitioned behind a live socket, or hung): their locks go,
        and the deaths count as proven (no grace), so their sessions are taken over now."""
        assert self.stale_after is not None
        hung = await depose_hung(conn, self._q, self.control, self.stale_after, self._timeout)
        for key in hung:
            self._proven[key] = self._clock()
            report.hung.append(key)
        if hung:
            self._again.set()  # its lock is gone a moment later: sweep again at once

    async def _find_dead(self, conn: Any, report: SweepReport) -> None:
        rows = await conn.fetch(
            self._q.absent_keys,
            self.control.ns,
            LEADER_KEY,
            timeout=self._timeout,
        )
        now = self._clock()
        absent = {row["key"] for row in rows}
        for key in list(self._absent_since):
            if key not in absent:
                del self._absent_since[key]  # back (or gone from every table)
        for key in absent:
            self._absent_since.setdefault(key, now)
        report.absent = sorted(absent)
        # A death a watch proved needs no grace; one only seen missing waits for it.
        for key, when in list(self._proven.items()):
            if key not in absent and now - when > _PROVEN_TTL:
                del self._proven[key]
        report.dead = sorted(
            k for k in absent if k in self._proven or now - self._absent_since[k] >= self.grace
        )
        if absent:
            await conn.execute(
                self._q.mark_lock_missing,
                sorted(absent),
                timeout=self._timeout,
            )

    async def _revoke(self, conn: Any, report: SweepReport) -> None:
        q = self._q
        dead = report.dead
        async with conn.transaction():
            revoked = await conn.fetch(
                q.revoke_owned,
                dead,
                timeout=self._timeout,
            )
            report.revoked = sorted(row["session_id"] for row in revoked)
            woken = await conn.fetch(
                q.wake_revoked,
                report.revoked,
                TAKEOVER,
                timeout=self._timeout,
            )
            unclaimed = await conn.fetch(
                q.unclaim_dead,
                dead,
                timeout=self._timeout,
            )
            report.unclaimed = sorted(row["session_id"] for row in unclaimed)
            await conn.execute(q.delete_workers, dead, timeout=self._timeout)
            fresh = sorted({row["session_id"] for row in woken} | set(report.unclaimed))
            await self._wake(conn, fresh)
        report.woken.extend(row["session_id"] for row in woken)
        for key in dead:
            self._absent_since.pop(key, None)
            self._proven.pop(key, None)

    async def _ttl(self, conn: Any, report: SweepReport) -> None:
        await self._insert_wakeups(conn, report, self._q.wake_expired, TAKEOVER)

    async def _orphans(self, conn: Any, report: SweepReport) -> None:
        await self._insert_wakeups(
            conn, report, self._q.wake_orphans, TAKEOVER, self.reconcile_after
        )

    async def _reconcile(self, conn: Any, report: SweepReport) -> None:
        await self._insert_wakeups(
            conn, report, self._q.wake_unapplied, self.reconcile_after, RECONCILE
        )
        stale = await conn.fetch(self._q.stale_commands, self.renotify_after, timeout=self._timeout)
        now = self._clock()
        for sid in list(self._renotified):
            if now - self._renotified[sid] >= self.renotify_after:
                del self._renotified[sid]
        due = [row for row in stale if row["session_id"] not in self._renotified]
        if due:
            await conn.execute(
                NOTIFY_OWNERS,
                [row["session_id"] for row in due],
                [row["owner_key"] for row in due],
                [row["cmd_seq"] for row in due],
                self._t.worker_channel_prefix,
                timeout=self._timeout,
            )
            for row in due:
                self._renotified[row["session_id"]] = now
            report.renotified = sorted(row["session_id"] for row in due)

    async def _insert_wakeups(
        self, conn: Any, report: SweepReport, insert: str, *args: object
    ) -> None:
        """One rule: the wakeups ``insert`` adds (a queued one is kept) and their NOTIFY, in
        one transaction; the new ones go into ``report``."""
        async with conn.transaction():
            rows = await conn.fetch(insert, *args, timeout=self._timeout)
            woken = sorted(row["session_id"] for row in rows)
            await self._wake(conn, woken)
        report.woken.extend(woken)

    async def _wake(self, conn: Any, session_ids: list[str]) -> None:
        if session_ids:
            await conn.execute(
                NOTIFY_EACH,
                self._t.wake_channel,
                session_ids,
                timeout=self._timeout,
            )
