"""The in-process host's session table: what is loaded, resumed, read live or stored, unloaded."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

from .. import Runtime
from ..agent import Agent, AgentHandle
from ..errors import SessionPersistenceNotFoundError
from ..session import InputRequest, pending_approvals, pending_inputs
from ..session.events import ApprovalRequested, SessionEvent
from ._api import ApiError
from ._profile import Profile, origin_setup, stored_origin

__all__ = ["LocalSessions"]


class LocalSessions:
    """The sessions one ``--role all`` process holds (see the module docstring).

    ``busy`` counts a session's unconsumed commands (one with any stays loaded); ``forget``
    drops what the host keeps beside the agent of a session being unloaded.
    """

    def __init__(
        self,
        rt: Runtime,
        profiles: dict[str, Profile],
        *,
        clock: Callable[[], float],
        busy: Callable[[str], int],
        forget: Callable[[str], None],
    ) -> None:
        self.rt = rt
        self.profiles = profiles
        self.handles: dict[str, AgentHandle] = {}
        self._profile_of: dict[str, str] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        self._idle_since: dict[str, float] = {}
        self._clock = clock
        self._busy = busy
        self._forget = forget

    def adopt(self, session_id: str, handle: AgentHandle, profile: Profile) -> None:
        self.handles[session_id] = handle
        self._profile_of[session_id] = profile.name
        self._idle_since[session_id] = self._clock()

    def lock(self, session_id: str) -> asyncio.Lock:
        lock = self._locks.get(session_id)
        if lock is None:
            lock = self._locks[session_id] = asyncio.Lock()
        return lock

    def touch(self, session_id: str) -> None:
        """A loaded session wrote an event: it is not idle since before it."""
        if session_id in self.handles:
            self._idle_since[session_id] = self._clock()

    async def stored_profile(self, session_id: str) -> tuple[str | None, int | None]:
        """The profile (name, version) a session was created with."""
        if session_id in self._profile_of:
            name = self._profile_of[session_id]
            return name, self.profiles[name].version
        return await stored_origin(self.rt.sessions.persistence, session_id)

    async def load(self, session_id: str) -> Agent:
        """The live agent of ``session_id``, resumed from the store when unloaded."""
        handle = self.handles.get(session_id)
        if handle is not None:
            return handle.agent
        async with self.lock(session_id):
            handle = self.handles.get(session_id)
            if handle is not None:
                return handle.agent
            name, version = await self.stored_profile(session_id)
            profile = self.profiles.get(name or "default")
            if profile is None or (version is not None and version != profile.version):
                raise ApiError(
                    503,
                    "profile_not_served",
                    f"session {session_id!r} needs profile {name!r} version {version}, "
                    "which this process does not serve",
                )
            handle = await self.rt.agents.resume(
                resume_session_id=session_id,
                agent_options=profile.options,
                setup=origin_setup(profile, None),
            )
            self.adopt(session_id, handle, profile)
            return handle.agent

    def status(self, session_id: str) -> str:
        handle = self.handles.get(session_id)
        if handle is None:
            return "unloaded"
        return str(handle.agent.status)

    # --- reads: the live agent's, else the store's ------------------------------------------

    async def log_events(self, session_id: str) -> tuple[SessionEvent, ...]:
        """The session's log: the live agent's, else the store's."""
        handle = self.handles.get(session_id)
        if handle is not None:
            return tuple(handle.agent.session.events)
        store = self.rt.sessions.persistence
        if store is None:
            return ()
        try:
            return tuple(await store.load(session_id))
        except SessionPersistenceNotFoundError:
            return ()

    async def pending_approvals(self, session_id: str) -> tuple[ApprovalRequested, ...]:
        """The session's calls waiting for a decision: the live agent's, or the stored
        log's fold when it is not loaded here."""
        handle = self.handles.get(session_id)
        if handle is not None:
            return handle.agent.pending_approvals
        return pending_approvals(await self.log_events(session_id))

    async def pending_inputs(self, session_id: str) -> tuple[InputRequest, ...]:
        """The session's input requests waiting for an answer: the live agent's, or the
        stored log's fold when it is not loaded here."""
        handle = self.handles.get(session_id)
        if handle is not None:
            return handle.agent.pending_inputs
        return pending_inputs(await self.log_events(session_id))

    async def last_seq(self, session_id: str) -> int:
        handle = self.handles.get(session_id)
        if handle is not None:
            return handle.agent.session.next_seq - 1
        store = self.rt.sessions.persistence
        if store is None:
            return 0
        return (await store.info(session_id)).events

    # --- idle unload ----------------------------------------------------------------------

    async def unload_idle(
        self, idle_unload: float, stop: asyncio.Event, closed: Callable[[], bool]
    ) -> None:
        """Unload the sessions idle for ``idle_unload`` seconds until ``closed()``."""
        period = max(0.05, min(idle_unload / 2, 5.0))
        while not closed():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), period)
            if closed():
                return
            now = self._clock()
            for session_id, handle in list(self.handles.items()):
                idle_for = now - self._idle_since.get(session_id, now)
                if (
                    handle.agent.status == "idle"
                    and self._busy(session_id) == 0
                    and idle_for >= idle_unload
                ):
                    await self.unload(session_id)

    async def unload(self, session_id: str) -> None:
        async with self.lock(session_id):
            handle = self.handles.get(session_id)
            if handle is None or handle.agent.status != "idle" or self._busy(session_id):
                return
            del self.handles[session_id]
            self._forget(session_id)
            await handle.dispose()
