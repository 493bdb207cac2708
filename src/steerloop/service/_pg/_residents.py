"""The resident-session table of one worker: the sessions it holds (each with its agent,
profile and how far its commands were applied), those it is loading, and the statuses
still to write to their spec rows.

A session becomes resident by ``load`` (created when no log is stored yet, else resumed:
repair runs, and a resumed session whose last turn was interrupted gets the profile's
takeover followup) and stops being resident by ``unload`` (disposed, its lease released,
its spec row ``unloaded``, and a wakeup again when commands arrived meanwhile).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from ... import Runtime
from ...agent import Agent, AgentHandle
from ...session.store.postgres._store import PostgresStore
from .._profile import Profile, origin_setup
from .._takeover import takeover_message
from ._capacity import least_recent_idle
from ._schema import ServiceTables
from ._sql import NOTIFY, Sql

__all__ = ["Resident", "Residents"]

log = logging.getLogger("steerloop.service")


@dataclass(slots=True)
class Resident:
    """One session this worker holds."""

    handle: AgentHandle
    profile: Profile
    idle_since: float
    applied_upto: int = 0  # cmd_seq applied here (its consumption may still be riding)
    dirty: bool = True  # commands may wait: the applier reads them
    drain: asyncio.Task[None] | None = None  # the applier's task for this session
    seen_ids: set[str] = field(default_factory=set)
    scanned: int = 0  # events folded into ``seen_ids``

    @property
    def agent(self) -> Agent:
        return self.handle.agent

    @property
    def busy(self) -> bool:
        """A turn is running (or waits for an approval). Pending injects of an idle agent
        start nothing: they are in the log and a reload finds them."""
        return self.agent.status != "idle"

    def message_ids(self) -> set[str]:
        """Message ids any splice of the log inserted (folded incrementally)."""
        events = self.agent.session.events
        for event in events[self.scanned :]:
            if event.type == "agent/inbox/spliced":
                self.seen_ids.update(m.id for m in event.data.inserted)
        self.scanned = len(events)
        return self.seen_ids


class Residents:
    """The sessions one worker holds or is loading (see the module docstring)."""

    def __init__(
        self,
        rt: Runtime,
        store: PostgresStore,
        tables: ServiceTables,
        *,
        worker_id: str,
        dispose_timeout: float,
        clock: Callable[[], float],
    ) -> None:
        self.rt = rt
        self.store = store
        self.t = tables
        self.q = Sql(tables)
        self.pool: Any = None  # the store's (``start``)
        self.worker_id = worker_id
        self.dispose_timeout = dispose_timeout
        self._clock = clock
        self._sessions: dict[str, Resident] = {}
        self.loading: set[str] = set()
        self._statuses: dict[str, str] = {}

    # --- the table ------------------------------------------------------------------------

    def get(self, session_id: str) -> Resident | None:
        return self._sessions.get(session_id)

    def __contains__(self, session_id: object) -> bool:
        return session_id in self._sessions

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._sessions))

    def __len__(self) -> int:
        return len(self._sessions)

    def items(self) -> list[tuple[str, Resident]]:
        return list(self._sessions.items())

    @property
    def occupied(self) -> int:
        """Slots taken: resident sessions and those being loaded."""
        return len(self._sessions) + len(self.loading)

    def busy(self, session_id: str) -> bool:
        return self._sessions[session_id].busy

    def any_busy(self) -> bool:
        return any(r.busy for r in self._sessions.values())

    def touch(self, session_id: str, status: str | None = None) -> None:
        """The session was active now (and has ``status`` to write, if given)."""
        resident = self._sessions.get(session_id)
        if resident is not None:
            resident.idle_since = self._clock()
            if status is not None:
                self._statuses[session_id] = status

    def unloadable(self, session_id: str) -> bool:
        """Idle with nothing left to apply: unloading it loses no work."""
        resident = self._sessions.get(session_id)
        if resident is None or session_id in self.loading:
            return False
        agent = resident.agent
        return (
            agent.status == "idle"
            and not agent.inbox.has_pending
            and not resident.dirty
            and (resident.drain is None or resident.drain.done())
        )

    def idle_lru(self) -> list[str]:
        """The resident sessions unloading would lose nothing of, least recently active first."""
        return least_recent_idle(
            (sid, self.unloadable(sid), r.idle_since) for sid, r in self._sessions.items()
        )

    def pop(self, session_id: str) -> Resident | None:
        """Take ``session_id`` out of the table (its status is not written any more)."""
        self._statuses.pop(session_id, None)
        return self._sessions.pop(session_id, None)

    # --- loading --------------------------------------------------------------------------

    async def load(
        self, session_id: str, key: int, profiles: dict[str, Profile], leaving: Callable[[], bool]
    ) -> bool:
        """Create or resume the claimed ``session_id`` and make it resident; ``False`` when
        it was not (its spec is gone, or the worker started leaving meanwhile: the claim
        goes back so another worker loads it at once)."""
        spec = await self.pool.fetchrow(self.q.load_spec, session_id)
        if spec is None:  # deleted meanwhile
            await self.done_wakeup(session_id, key)
            return False
        profile = profiles[spec["profile"]]
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
        if leaving():
            with contextlib.suppress(Exception):
                await handle.dispose()
                await self.pool.execute(self.q.release_claim, session_id, key)
                await self.pool.execute(NOTIFY, self.t.wake_channel, session_id)
            return False
        self._sessions[session_id] = Resident(handle, profile, self._clock())
        agent = handle.agent
        self._statuses[session_id] = agent.status
        await self.write_statuses()
        if resumed and profile.on_takeover == "continue":
            writer = self.store.writer(session_id)
            from_seq = (writer.stored_length if writer is not None else 0) + 1
            message = takeover_message(agent.session.events, from_seq)
            if message is not None:
                agent.followup(message)
        await self.done_wakeup(session_id, key)
        return True

    async def done_wakeup(self, session_id: str, key: int) -> None:
        await self.pool.execute(self.q.done_wakeup, session_id, key)

    async def retry_later(self, session_id: str, key: int) -> None:
        """A load failed: the claim goes back, due again after a backoff."""
        await self.pool.execute(self.q.retry_wakeup, session_id, key)

    # --- status and unload ----------------------------------------------------------------

    async def write_statuses(self) -> None:
        statuses, self._statuses = self._statuses, {}
        for session_id, status in statuses.items():
            writer = self.store.writer(session_id)
            if writer is None:
                continue
            await self.pool.execute(self.q.write_status, session_id, status, writer.lease_id)

    async def unload_idle(self, now: float, idle_unload: float) -> None:
        for session_id, resident in self.items():
            if self.unloadable(session_id) and now - resident.idle_since >= idle_unload:
                await self.unload(session_id)

    async def unload(self, session_id: str, *, check: bool = True) -> None:
        """Dispose a resident session (its lease is released), mark it unloaded, and wake
        it again if commands arrived meanwhile."""
        resident = self.pop(session_id)
        if resident is None:
            return
        writer = self.store.writer(session_id)
        # A fenced-out agent cannot write its teardown: bounded, the stray activity is left
        # behind (its calls recorded unknown in memory only; the new owner repairs the log).
        fenced = writer is None or writer.error is not None
        try:
            await resident.handle.dispose(timeout=1.0 if fenced else self.dispose_timeout)
        except Exception as exc:
            log.info("worker %s: disposing %s: %s", self.worker_id, session_id, exc)
        try:
            await self.pool.execute(self.q.unloaded_if_unleased, session_id)
            if not check:
                return
            # A command accepted while this worker was releasing found a live lease and
            # only notified it: make sure somebody loads the session again.
            woken = await self.pool.fetchval(self.q.wake_if_unconsumed, session_id)
            if woken is not None:
                await self.pool.execute(NOTIFY, self.t.wake_channel, session_id)
        except Exception:
            log.exception("worker %s: after unloading %s", self.worker_id, session_id)
