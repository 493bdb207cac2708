"""The worker host (design/SERVICE.md §3.3–3.4): claims sessions, drives their agents and
applies their commands, meeting other processes only through the v2 tables.

* **Liveness.** A ``ControlConnection`` holds the worker's advisory lock and LISTENs; its
  key is stamped on every lease this worker's store takes (``owner_key``). Its NOTIFY
  callback only sets flags. A lost connection self-fences: every resident agent is disposed
  (its turn aborted, cause ``disposed``) and the worker registers again under a new key.
* **Claims.** ``UPDATE wakeups … FOR UPDATE SKIP LOCKED LIMIT free`` over the sessions whose
  profile and version this worker serves; a claimed session is created (no stored log yet)
  or resumed (repair runs), a resumed one whose last turn was interrupted gets the
  profile's takeover followup, then its commands are drained and the wakeup deleted.
* **Exactly once with respect to the log.** A followup/steer/inject writes its
  ``agent/inbox/spliced`` synchronously; the command's consumption is *attached* to that
  event (``writer.attach``), so both commit in one fenced batch or neither does. A message id
  already in the log is only marked consumed. A cancel is consumed by a fenced update first,
  then applied (at most once).
* **Idle unload.** An idle session with an empty inbox is disposed after ``idle_unload``
  seconds (its lease released); then unconsumed commands, if any, become a wakeup again.
* **Leaving** (``close``, a SIGTERM): a drain for rolling deploys. The worker claims
  nothing more (its row says ``draining``), idle sessions are unloaded at once, running
  turns get ``drain_timeout`` seconds to end, and the still-busy ones are handed over like a
  takeover (writer fenced, lease revoked, ``takeover`` wakeup) without waiting for the
  sweeper's grace.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ... import CancelCause, Runtime, hooks
from ...agent import Agent, AgentHandle
from ...errors import SessionConflictError, SessionPersistenceError
from ...hooks import SessionEventPayload, StatusPayload
from ...messages import Block, MessageSource, block_from_json, user_message
from ...session.store.postgres import PostgresStore
from ...session.store.postgres._writer import PostgresWriter
from .._agui_commands import AGUI_COMMANDS, apply_command
from .._inputs_api import INPUT_BY
from .._profile import Profile, origin_setup
from .._takeover import takeover_message
from .._trace import continue_caller_trace
from ._capacity import ADMIT_AFTER, claim_wakeups, least_recent_idle
from ._control import ControlConnection
from ._feed import LivePublisher
from ._sweeper import Sweeper

__all__ = ["Worker"]

log = logging.getLogger("steerloop.service")

_DRAIN_PAGE = 100
_TAKEOVER = "takeover"
"""The wakeup reason of a session whose owner left (the sweeper's, for a dead one)."""


@dataclass(slots=True)
class _Resident:
    handle: AgentHandle
    profile: Profile
    idle_since: float
    applied_upto: int = 0  # cmd_seq applied here (its consumption may still be riding)
    dirty: bool = True
    drain: asyncio.Task[None] | None = None
    seen_ids: set[str] = field(default_factory=set)
    scanned: int = 0  # events folded into ``seen_ids``


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
        self.dispose_timeout = dispose_timeout
        self.drain_timeout = drain_timeout
        self._clock = clock
        self.t = store.tables
        self.control: ControlConnection | None = None
        self._pool: Any = None
        self._sweeper: Sweeper | None = None
        self._publisher: LivePublisher | None = None
        self._residents: dict[str, _Resident] = {}
        self._loading: set[str] = set()
        self._tasks: set[asyncio.Task[Any]] = set()
        self._dirty: set[str] = set()
        self._statuses: dict[str, str] = {}
        self._wake = True  # claim at start
        self._lost = False
        self._closing = False  # claims stop (the loop ends)
        self._leaving = False  # commands stop being applied (residents go next)
        self._kick = asyncio.Event()
        self._loop_task: asyncio.Task[None] | None = None
        self._disposers = [
            rt.hooks.on(hooks.STATUS, self._on_status),
            rt.hooks.on(hooks.SESSION_EVENT, self._on_event),
        ]

    # --- lifecycle ------------------------------------------------------------------------

    async def start(self) -> None:
        self._pool = await self.store.pool()
        await self._register()
        self._loop_task = asyncio.get_running_loop().create_task(
            self._run(), name=f"steerloop-worker {self.worker_id}"
        )
        self._publisher = LivePublisher(self._pool, self.t, self.rt)
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
        self.store.owner_key = control.key
        self._sweeper = Sweeper(self._pool, self.t, control, dsn=self.store.dsn)
        self._sweeper.start()
        self._wake = True
        self._kick.set()

    async def close(self) -> None:
        """Leave gracefully (the SIGTERM of a rolling deploy): stop claiming (the worker row
        says ``draining``, so the API counts this worker out), unload the idle sessions
        (their leases released, a wakeup if commands are waiting), let running turns end
        for up to ``drain_timeout`` seconds, then hand the still-running ones over like a
        takeover: fenced, lease revoked, a ``takeover`` wakeup, so another worker resumes,
        repairs and continues them. Then the worker row and lock go."""
        self._closing = True
        self._kick.set()
        await self._mark_draining()
        if self._loop_task is not None:
            await asyncio.gather(self._loop_task, return_exceptions=True)
        await asyncio.gather(*list(self._tasks), return_exceptions=True)
        # Idle sessions go at once: their next message is served elsewhere without waiting.
        for session_id in [sid for sid in self._residents if not self._busy(sid)]:
            await self._unload(session_id)
        # Running turns may end meanwhile; their commands (a steer, a cancel) still apply.
        await self._wait_turns()
        self._leaving = True
        drains = [r.drain for r in self._residents.values() if r.drain is not None]
        await asyncio.gather(*drains, return_exceptions=True)  # each stops after its command
        for dispose in self._disposers:
            dispose()
        for session_id in list(self._residents):
            if self._busy(session_id):
                await self._hand_over(session_id)
            else:
                await self._unload(session_id)  # commands left: wake another
        await self._stop_helpers()
        if self.control is not None:
            await self.control.close()

    async def _mark_draining(self) -> None:
        control = self.control
        if control is None or control.lost:
            return
        try:
            await self._pool.execute(
                f"UPDATE {self.t.workers} SET draining = true WHERE key = $1", control.key
            )
        except Exception:  # the row only informs the API; leaving goes on
            log.exception("worker %s: marking itself draining failed", self.worker_id)

    def _busy(self, session_id: str) -> bool:
        # A turn is running (or waits for an approval). Pending injects of an idle agent
        # start nothing: they are in the log and a reload finds them.
        return self._residents[session_id].handle.agent.status != "idle"

    async def _wait_turns(self) -> None:
        """Until no resident session is busy, for at most ``drain_timeout`` seconds (woken
        by every status change; the short period is a safety net)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.drain_timeout
        while not self._lost and any(self._busy(sid) for sid in self._residents):
            left = deadline - loop.time()
            if left <= 0:
                return
            self._kick.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(min(left, 0.25)):
                    await self._kick.wait()

    async def _hand_over(self, session_id: str) -> None:
        """Give a busy session to another worker as a crash would, without the wait: the
        writer is fenced first (nothing more of ours is appended, the lease is not
        released), the agent aborted, then in one transaction the lease is revoked (token
        + 1) and a ``takeover`` wakeup queued. A batch already committing either lands
        before the revocation (it holds the lease row) or is refused by its fence."""
        resident = self._residents.pop(session_id, None)
        if resident is None:
            return
        self._statuses.pop(session_id, None)
        writer = self.store.writer(session_id)
        lease_id = None
        if writer is not None and writer.error is None:
            lease_id = writer.lease_id
            writer.lose()
        try:
            await resident.handle.dispose(timeout=1.0)
        except Exception as exc:
            log.info("worker %s: disposing %s: %s", self.worker_id, session_id, exc)
        if lease_id is None:  # fenced out already: its new owner has it
            return
        t = self.t
        try:
            async with self._pool.acquire() as conn, conn.transaction():
                revoked = await conn.fetchval(
                    f"UPDATE {t.leases} SET lease_id = NULL, token = token + 1, "
                    "expires_at = now() WHERE session_id = $1 AND lease_id = $2 RETURNING 1",
                    session_id,
                    lease_id,
                )
                if revoked is None:
                    return
                await conn.execute(
                    f"INSERT INTO {t.wakeups} (session_id, reason) VALUES ($1, $2) "
                    "ON CONFLICT (session_id) DO UPDATE SET reason = EXCLUDED.reason, "
                    "claimed_by = NULL, claimed_at = NULL, due_at = now()",
                    session_id,
                    _TAKEOVER,
                )
                await conn.execute(
                    f"UPDATE {t.specs} SET status = 'unloaded', updated_at = now() "
                    "WHERE session_id = $1",
                    session_id,
                )
                await conn.execute("SELECT pg_notify($1, $2)", self.t.wake_channel, session_id)
            log.warning("worker %s: handed %s over (still busy)", self.worker_id, session_id)
        except Exception:  # the lease then expires and the sweeper hands the session on
            log.exception("worker %s: handing %s over failed", self.worker_id, session_id)

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
        return tuple(self._residents)

    # --- callbacks (never block) ----------------------------------------------------------

    def _on_notify(self, channel: str, payload: str) -> None:
        if channel == self.t.wake_channel:
            self._wake = True
            self._kick.set()
            if len(self._residents) + len(self._loading) >= self.capacity:
                # Full: the newcomer may be admitted in place of an idle session once it
                # has waited ADMIT_AFTER (a worker with a free slot had it first).
                asyncio.get_running_loop().call_later(ADMIT_AFTER * 1.2, self._rewake)
            return
        session_id = payload.rpartition(":")[0] or payload
        if session_id in self._residents and not self._lost and not self._leaving:
            # The flag, and a drain task if none runs: nothing here awaits.
            self._schedule_drain(session_id)
        else:
            self._dirty.add(session_id)
            self._kick.set()

    def _rewake(self) -> None:
        self._wake = True
        self._kick.set()

    def _on_lost(self) -> None:
        self._lost = True
        self._kick.set()

    def _on_status(self, payload: StatusPayload) -> None:
        session_id = payload.agent.id
        if session_id in self._residents:
            self._residents[session_id].idle_since = self._clock()
            self._statuses[session_id] = payload.status
            self._kick.set()

    def _on_event(self, payload: SessionEventPayload) -> None:
        resident = self._residents.get(payload.session.id)
        if resident is not None:
            resident.idle_since = self._clock()

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
                await self._drop_fenced()
                await self._write_statuses()
                dirty, self._dirty = self._dirty, set()
                for session_id in dirty:
                    self._schedule_drain(session_id)
                now = self._clock()
                if self._wake or now >= next_poll:
                    self._wake = False
                    next_poll = now + self.poll
                    await self._recheck()
                    await self._claim()
                if self.idle_unload is not None:
                    await self._unload_idle(now)
            except Exception:
                # A database hiccup must not end the worker: the next round retries.
                log.exception("worker %s: round failed", self.worker_id)

    def _spawn(self, coro: Any, name: str) -> None:
        task = asyncio.get_running_loop().create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _drop_fenced(self) -> None:
        """Unload the sessions whose writer failed (a refused fence: someone else owns the
        session now; or a storage failure): their unconsumed commands become a wakeup."""
        for session_id in list(self._residents):
            writer = self.store.writer(session_id)
            if writer is None or writer.error is not None:
                await self._unload(session_id)

    async def _self_fence(self) -> None:
        """The control connection is gone: this worker may already be declared dead, so
        every resident agent is disposed; then register again under a new key."""
        self._lost = False
        log.warning("worker %s: self-fencing %d sessions", self.worker_id, len(self._residents))
        for session_id in list(self._residents):
            # Fenced before the abort: nothing more of ours commits and the lease is not
            # released, so the log stays as a crash leaves it and the sweeper hands the
            # session on (revocation after the grace, takeover, repair, continue).
            writer = self.store.writer(session_id)
            if writer is not None:
                writer.lose()
            await self._unload(session_id, check=False)
        await self._stop_helpers()
        old, self.control = self.control, None
        if old is not None:
            await old.close()
        while not self._closing:
            try:
                await self._register()
                if old is not None and self._sweeper is not None:
                    self._sweeper.prove(old.key)  # should it lead: no grace for itself
                return
            except Exception:
                log.exception("worker %s: registering again failed", self.worker_id)
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(1.0):
                        await self._kick.wait()
                self._kick.clear()

    async def _recheck(self) -> None:
        """A lost NOTIFY must not leave a command of a resident session waiting: one query
        finds the residents with unconsumed commands beyond what this worker applied."""
        if not self._residents:
            return
        ids = list(self._residents)
        rows = await self._pool.fetch(
            f"SELECT DISTINCT c.session_id FROM {self.t.commands} c "
            "JOIN unnest($1::text[], $2::bigint[]) AS r (sid, upto) ON c.session_id = r.sid "
            "WHERE c.consumed_at IS NULL AND c.cmd_seq > r.upto",
            ids,
            [self._residents[sid].applied_upto for sid in ids],
        )
        for row in rows:
            self._schedule_drain(row["session_id"])

    # --- claims ---------------------------------------------------------------------------

    async def _claim(self) -> None:
        """Claim what fits (``_capacity.py``): free slots first; when they are all taken,
        wakeups that waited ``ADMIT_AFTER`` in place of the least recently active idle
        sessions, which are unloaded once the newcomers' loads are under way."""
        control = self.control
        if control is None or control.lost or not self.profiles:
            return
        served = {name: p.version for name, p in self.profiles.items()}
        free = self.capacity - len(self._residents) - len(self._loading)
        rows = await claim_wakeups(self._pool, self.t, control.key, served, free)
        if len(rows) >= free:  # full (or now full): room only in place of idle sessions
            room = len(self._idle_lru()) + min(free, 0)
            rows += await claim_wakeups(
                self._pool, self.t, control.key, served, room, min_age=ADMIT_AFTER
            )
        for row in rows:
            session_id = row["session_id"]
            if session_id in self._residents or session_id in self._loading:
                await self._done_wakeup(session_id, control.key)
                self._schedule_drain(session_id)
                continue
            self._loading.add(session_id)
            self._spawn(self._load(session_id, control.key), f"steerloop-load {session_id}")
        over = len(self._residents) + len(self._loading) - self.capacity
        for session_id in self._idle_lru()[: max(over, 0)]:
            log.info("worker %s: unloading idle %s for a newcomer", self.worker_id, session_id)
            await self._unload(session_id)

    def _idle_lru(self) -> list[str]:
        """The resident sessions unloading would lose nothing of, least recently active first."""
        return least_recent_idle(
            (sid, self._unloadable(sid), r.idle_since) for sid, r in self._residents.items()
        )

    def _unloadable(self, session_id: str) -> bool:
        """Idle with nothing left to apply: unloading it loses no work."""
        resident = self._residents.get(session_id)
        if resident is None or session_id in self._loading:
            return False
        agent = resident.handle.agent
        return (
            agent.status == "idle"
            and not agent.inbox.has_pending
            and not resident.dirty
            and (resident.drain is None or resident.drain.done())
        )

    async def _done_wakeup(self, session_id: str, key: int) -> None:
        await self._pool.execute(
            f"DELETE FROM {self.t.wakeups} WHERE session_id = $1 AND claimed_by = $2",
            session_id,
            key,
        )

    async def _load(self, session_id: str, key: int) -> None:
        try:
            await self._load_in(session_id, key)
        except SessionConflictError as exc:
            # Someone holds a live lease: that owner drains. If it is dead the sweeper
            # revokes it and queues the session again.
            log.info("worker %s: %s is held elsewhere: %s", self.worker_id, session_id, exc)
            with contextlib.suppress(Exception):
                await self._done_wakeup(session_id, key)
        except Exception:
            log.exception("worker %s: loading %s failed; retried later", self.worker_id, session_id)
            with contextlib.suppress(Exception):
                await self._pool.execute(
                    f"UPDATE {self.t.wakeups} SET claimed_by = NULL, claimed_at = NULL, "
                    "due_at = now() + make_interval(secs => least(attempts, 30)) "
                    "WHERE session_id = $1 AND claimed_by = $2",
                    session_id,
                    key,
                )
        finally:
            self._loading.discard(session_id)

    async def _load_in(self, session_id: str, key: int) -> None:
        spec = await self._pool.fetchrow(
            f"SELECT profile, profile_version, meta FROM {self.t.specs} WHERE session_id = $1",
            session_id,
        )
        if spec is None:  # deleted meanwhile
            await self._done_wakeup(session_id, key)
            return
        profile = self.profiles[spec["profile"]]
        meta = None if spec["meta"] is None else json.loads(spec["meta"])
        setup = origin_setup(profile, meta)
        resumed = await self.store.exists(session_id)
        if resumed:
            handle = await self.rt.agents.resume(
                resume_session_id=session_id, agent_options=profile.options, setup=setup
            )
        else:
            handle = await self.rt.agents.create(
                session_id=session_id, agent_options=profile.options, setup=setup, meta=meta
            )
        if self._closing or self._lost:
            with contextlib.suppress(Exception):
                await handle.dispose()
                # Leaving: the claim goes back, so another worker loads it at once.
                await self._pool.execute(
                    f"UPDATE {self.t.wakeups} SET claimed_by = NULL, claimed_at = NULL "
                    "WHERE session_id = $1 AND claimed_by = $2",
                    session_id,
                    key,
                )
                await self._pool.execute(
                    "SELECT pg_notify($1, $2)", self.t.wake_channel, session_id
                )
            return
        resident = _Resident(handle, profile, self._clock())
        self._residents[session_id] = resident
        agent = handle.agent
        self._statuses[session_id] = agent.status
        await self._write_statuses()
        if resumed and profile.on_takeover == "continue":
            writer = self.store.writer(session_id)
            from_seq = (writer.stored_length if writer is not None else 0) + 1
            message = takeover_message(agent.session.events, from_seq)
            if message is not None:
                agent.followup(message)
        await self._done_wakeup(session_id, key)
        self._schedule_drain(session_id)

    # --- draining -------------------------------------------------------------------------

    def _schedule_drain(self, session_id: str) -> None:
        resident = self._residents.get(session_id)
        if resident is None:
            return
        resident.dirty = True
        if resident.drain is None or resident.drain.done():
            resident.drain = asyncio.get_running_loop().create_task(
                self._drain(session_id, resident), name=f"steerloop-drain {session_id}"
            )

    async def _drain(self, session_id: str, resident: _Resident) -> None:
        while resident.dirty and not self._leaving and not self._lost:
            resident.dirty = False
            if self._residents.get(session_id) is not resident:
                return
            try:
                rows = await self._pool.fetch(
                    f"SELECT cmd_seq, kind, message_id, body FROM {self.t.commands} "
                    "WHERE session_id = $1 AND consumed_at IS NULL AND cmd_seq > $2 "
                    "ORDER BY cmd_seq LIMIT $3",
                    session_id,
                    resident.applied_upto,
                    _DRAIN_PAGE,
                )
                for row in rows:
                    if self._residents.get(session_id) is not resident or self._lost:
                        return
                    await self._apply(session_id, resident, row)
                    resident.applied_upto = row["cmd_seq"]
                    resident.idle_since = self._clock()
                if len(rows) == _DRAIN_PAGE:
                    resident.dirty = True
            except SessionPersistenceError as exc:
                # The lease is gone (fenced) or the store failed: this worker must not
                # drive the session any more; whoever owns it now drains.
                log.warning("worker %s: dropping %s: %s", self.worker_id, session_id, exc)
                await self._unload(session_id)
                return
            except Exception:
                log.exception("worker %s: draining %s failed", self.worker_id, session_id)
                return

    async def _apply(self, session_id: str, resident: _Resident, row: Any) -> None:
        agent = resident.handle.agent
        writer = self.store.writer(session_id)
        if writer is None or writer.error is not None:
            raise SessionConflictError(f"session {session_id!r}: no usable writer")
        kind = row["kind"]
        cmd_seq = row["cmd_seq"]
        body = json.loads(row["body"])
        if not isinstance(body, dict):
            body = {}
        if kind in ("followup", "steer", "inject"):
            message_id = row["message_id"]
            content = body.get("content")
            if message_id in self._seen_ids(resident) or not isinstance(content, str | list):
                if not isinstance(content, str | list):  # a stored row the API never writes
                    log.warning("session %s: command %d has no text; skipped", session_id, cmd_seq)
                await self._consume_fenced(session_id, cmd_seq, writer)
                return
            try:
                extra = body.get("source")
                source = MessageSource(extra=extra) if isinstance(extra, dict) else None
                message = user_message(_content_of(content), id=message_id, source=source)
                continue_caller_trace(agent, body.get("trace"), message.id)
                if kind == "followup":
                    seq = agent.followup(message)
                elif kind == "steer":
                    seq = agent.steer(message)
                else:
                    seq = agent.inject(message)
            except ValueError:
                log.exception("session %s: command %d refused", session_id, cmd_seq)
                await self._consume_fenced(session_id, cmd_seq, writer)
                return
            # The consumption rides on the splice's own batch (fence, event and consumption
            # commit together or not at all).
            writer.attach(seq, self._consume_sql, session_id, cmd_seq, seq)
            resident.seen_ids.add(message.id)
        elif kind == "cancel":
            # At most once: consumed (fenced) before it is applied.
            if await self._consume_fenced(session_id, cmd_seq, writer):
                agent.cancel(CancelCause.user(), keep_inbox=bool(body.get("keep_inbox")))
        elif kind == "approval":
            await self._apply_approval(session_id, agent, writer, cmd_seq, body)
        elif kind == "input":
            await self._apply_input(session_id, agent, writer, cmd_seq, body)
        elif kind in AGUI_COMMANDS:
            # At most once, like a cancel: consumed (fenced) before it is applied.
            if await self._consume_fenced(session_id, cmd_seq, writer):
                try:
                    apply_command(agent, kind, body)
                except ValueError:
                    log.info("session %s: command %d refused", session_id, cmd_seq, exc_info=True)
        else:  # 'dispose' and anything unknown: nothing to apply here
            await self._consume_fenced(session_id, cmd_seq, writer)

    async def _apply_approval(
        self,
        session_id: str,
        agent: Agent,
        writer: PostgresWriter,
        cmd_seq: int,
        body: dict[str, Any],
    ) -> None:
        call_id, decision, reason = body.get("call_id"), body.get("decision"), body.get("reason")
        by = body.get("by", "http")
        if (
            not isinstance(call_id, str)
            or decision not in ("allow", "deny")
            or not isinstance(reason, str | None)
            or not isinstance(by, str)
        ):  # a stored row the API never writes
            log.warning("session %s: approval %d has a bad body; skipped", session_id, cmd_seq)
            await self._consume_fenced(session_id, cmd_seq, writer)
            return
        try:
            seq = agent.decide_approval(call_id, decision, reason=reason, by=by)
        except SessionPersistenceError:
            raise
        except Exception:  # ApprovalError: not pending any more
            log.info("session %s: approval %d not applicable", session_id, cmd_seq, exc_info=True)
            await self._consume_fenced(session_id, cmd_seq, writer)
            return
        try:
            writer.attach(seq, self._consume_sql, session_id, cmd_seq, seq)
        except ValueError:  # its batch already took the event: consume on its own
            await self._consume_fenced(session_id, cmd_seq, writer)

    async def _apply_input(
        self,
        session_id: str,
        agent: Agent,
        writer: PostgresWriter,
        cmd_seq: int,
        body: dict[str, Any],
    ) -> None:
        """An answer to an input request: ``input/answered``, consumed in its batch."""
        input_id, action, content = body.get("id"), body.get("action"), body.get("content")
        if (
            not isinstance(input_id, str)
            or action not in ("accept", "decline", "cancel")
            or not isinstance(content, dict | None)
        ):  # a stored row the API never writes
            log.warning("session %s: input %d has a bad body; skipped", session_id, cmd_seq)
            await self._consume_fenced(session_id, cmd_seq, writer)
            return
        try:
            seq = agent.answer_input(input_id, action, content, by=INPUT_BY)
        except SessionPersistenceError:
            raise
        except Exception:  # InputError (not pending any more), ValueError (a bad row)
            log.info("session %s: input %d not applicable", session_id, cmd_seq, exc_info=True)
            await self._consume_fenced(session_id, cmd_seq, writer)
            return
        try:
            writer.attach(seq, self._consume_sql, session_id, cmd_seq, seq)
        except ValueError:  # its batch already took the event: consume on its own
            await self._consume_fenced(session_id, cmd_seq, writer)

    @property
    def _consume_sql(self) -> str:
        return (
            f"UPDATE {self.t.commands} SET consumed_at = now(), consumed_seq = $3 "
            "WHERE session_id = $1 AND cmd_seq = $2 AND consumed_at IS NULL"
        )

    async def _consume_fenced(self, session_id: str, cmd_seq: int, writer: PostgresWriter) -> bool:
        """Mark one command consumed only while this writer's lease is current."""
        done = await self._pool.fetchval(
            f"UPDATE {self.t.commands} c SET consumed_at = now() FROM {self.t.leases} l "
            "WHERE c.session_id = $1 AND c.cmd_seq = $2 AND c.consumed_at IS NULL "
            "AND l.session_id = $1 AND l.lease_id = $3 AND l.token = $4 "
            "AND l.expires_at > now() RETURNING 1",
            session_id,
            cmd_seq,
            writer.lease_id,
            writer.token,
        )
        return done is not None

    def _seen_ids(self, resident: _Resident) -> set[str]:
        """Message ids any splice of the log inserted (folded incrementally)."""
        events = resident.handle.agent.session.events
        for event in events[resident.scanned :]:
            if event.type == "agent/inbox/spliced":
                resident.seen_ids.update(m.id for m in event.data.inserted)
        resident.scanned = len(events)
        return resident.seen_ids

    # --- status and unload ----------------------------------------------------------------

    async def _write_statuses(self) -> None:
        statuses, self._statuses = self._statuses, {}
        for session_id, status in statuses.items():
            writer = self.store.writer(session_id)
            if writer is None:
                continue
            await self._pool.execute(
                f"UPDATE {self.t.specs} SET status = $2, updated_at = now() "
                f"WHERE session_id = $1 AND EXISTS (SELECT 1 FROM {self.t.leases} "
                "WHERE session_id = $1 AND lease_id = $3)",
                session_id,
                status,
                writer.lease_id,
            )

    async def _unload_idle(self, now: float) -> None:
        assert self.idle_unload is not None
        for session_id, resident in list(self._residents.items()):
            if self._unloadable(session_id) and now - resident.idle_since >= self.idle_unload:
                await self._unload(session_id)

    async def _unload(self, session_id: str, *, check: bool = True) -> None:
        """Dispose a resident session (its lease is released), mark it unloaded, and wake
        it again if commands arrived meanwhile."""
        resident = self._residents.pop(session_id, None)
        if resident is None:
            return
        self._statuses.pop(session_id, None)
        writer = self.store.writer(session_id)
        # A fenced-out agent cannot write its teardown: bounded, the stray activity is left
        # behind (its calls recorded unknown in memory only; the new owner repairs the log).
        fenced = writer is None or writer.error is not None
        try:
            await resident.handle.dispose(timeout=1.0 if fenced else self.dispose_timeout)
        except Exception as exc:
            log.info("worker %s: disposing %s: %s", self.worker_id, session_id, exc)
        t = self.t
        try:
            await self._pool.execute(
                f"UPDATE {t.specs} SET status = 'unloaded', updated_at = now() "
                f"WHERE session_id = $1 AND NOT EXISTS (SELECT 1 FROM {t.leases} "
                "WHERE session_id = $1 AND lease_id IS NOT NULL AND expires_at > now())",
                session_id,
            )
            if not check:
                return
            # A command accepted while this worker was releasing found a live lease and
            # only notified it: make sure somebody loads the session again.
            woken = await self._pool.fetchval(
                f"INSERT INTO {t.wakeups} (session_id, reason) SELECT $1, 'unload' "
                f"WHERE EXISTS (SELECT 1 FROM {t.commands} WHERE session_id = $1 "
                "AND consumed_at IS NULL) ON CONFLICT (session_id) DO NOTHING RETURNING 1",
                session_id,
            )
            if woken is not None:
                await self._pool.execute(
                    "SELECT pg_notify($1, $2)", self.t.wake_channel, session_id
                )
        except Exception:
            log.exception("worker %s: after unloading %s", self.worker_id, session_id)


def _content_of(content: str | list[Any]) -> str | tuple[Block, ...]:
    """A command row's content: text, or blocks in their stored form (images and files by
    the hash the API stored them under).

    Raises:
        ValueError: a malformed block (the row is refused, as a message that does not apply).
    """
    if isinstance(content, str):
        return content
    if not all(isinstance(b, dict) for b in content):
        raise ValueError("a stored content part is not an object")
    return tuple(block_from_json(b) for b in content)
