"""The in-process host of a ``--role all`` service: loads agents from profiles, applies the
commands the API accepts in their per-session order, feeds SSE readers and unloads idle
sessions.

Commands go through ``_commands.LocalCommands``: applied in order per session and answered
once what they wrote is durable, recognised after a restart from the log alone. Which
sessions are loaded, and their reads, are ``_local_sessions.LocalSessions``.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import socket
import time
from collections.abc import Callable, Mapping
from typing import Any, Literal

from .. import Runtime
from ..agent import Agent
from ..errors import SessionPersistenceNotFoundError
from ..hooks import ASSISTANT_STREAM, SESSION_EVENT, SessionEventPayload, StreamFramePayload
from ..messages import Block
from ..session import InputAction, InputRequest, approval_state
from ..session.events import ApprovalRequested, SessionEvent
from ._api import (
    ApiError,
    approval_json,
    check_session_id,
    choose_profile,
    frame_json,
    not_waiting,
    require_found,
    shared_fields,
)
from ._commands import Answer, Cancel, Command, Decide, Followup, Inject, Steer, agui_command
from ._inputs_api import checked_answer, input_json
from ._local_commands import LocalCommands, Queued
from ._local_feed import Durability, LocalFeeds, LocalReader
from ._local_sessions import LocalSessions
from ._profile import Profile, origin_setup
from ._text import check_text, check_texts

__all__ = ["LocalHost"]

log = logging.getLogger("steerloop.service")


class LocalHost:
    """Drives the agents of one process for the HTTP app (role ``all``)."""

    def __init__(
        self,
        rt: Runtime,
        profiles: dict[str, Profile],
        *,
        idle_unload: float | None = 300.0,
        max_unconsumed: int = 100,
        clock: Callable[[], float] = time.monotonic,
        worker_id: str | None = None,
    ) -> None:
        self.rt = rt
        self.worker_id = worker_id or f"{socket.gethostname()}:{os.getpid()}"
        self.profiles = profiles
        self.idle_unload = idle_unload
        self.max_unconsumed = max_unconsumed
        self.sessions = LocalSessions(
            rt, profiles, clock=clock, busy=self.unconsumed, forget=self._forget
        )
        self._handles = self.sessions.handles
        self._feeds = LocalFeeds(lambda session_id: session_id in self._handles)
        self._durable = Durability()
        self.commands = LocalCommands(
            self.sessions.load, self._durable_through, max_unconsumed=max_unconsumed
        )
        self._closed = False
        self._stop = asyncio.Event()
        self._unloader: asyncio.Task[None] | None = None
        self._disposers = [
            rt.hooks.on(SESSION_EVENT, self._on_event),
            rt.hooks.on(ASSISTANT_STREAM, self._on_frame),
        ]

    # --- lifecycle ------------------------------------------------------------------------

    async def start(self) -> None:
        if self.idle_unload is not None and self._unloader is None:
            unloading = self.sessions.unload_idle(
                self.idle_unload, self._stop, lambda: self._closed
            )
            self._unloader = asyncio.get_running_loop().create_task(unloading)

    async def close(self) -> None:
        """Stop accepting, let the drains and the unloader see it, then dispose every agent
        (their turns end aborted, cause disposed)."""
        self._closed = True
        self._stop.set()
        for dispose in self._disposers:
            dispose()
        self._feeds.wake_all()
        self.commands.closed = True
        tasks = self.commands.drains()
        if self._unloader is not None:
            tasks.append(self._unloader)
        # No task is cancelled: each checks ``_closed`` between commands or sweeps.
        await asyncio.gather(*tasks, return_exceptions=True)
        for handle in list(self._handles.values()):
            try:
                await handle.dispose()
            except Exception:
                log.exception("disposing %s failed", handle.agent.id)
        self._handles.clear()

    @property
    def closed(self) -> bool:
        return self._closed

    def loaded(self) -> tuple[str, ...]:
        return tuple(self._handles)

    # --- sessions -------------------------------------------------------------------------

    def profile(self, name: str | None) -> Profile:
        return choose_profile(self.profiles, name)

    async def exists(self, session_id: str) -> bool:
        if session_id in self._handles:
            return True
        store = self.rt.sessions.persistence
        return store is not None and await store.exists(session_id)

    async def require(self, session_id: str) -> None:
        require_found(session_id, await self.exists(session_id))

    async def create(
        self,
        session_id: str,
        profile: Profile,
        meta: dict[str, Any] | None,
        first: str | tuple[Block, ...] | None,
    ) -> dict[str, Any]:
        check_session_id(session_id)
        check_texts(meta, "meta")
        if isinstance(first, str):
            check_text(first, "input")
        async with self.sessions.lock(session_id):
            if await self.exists(session_id):
                raise ApiError(409, "session_exists", f"session {session_id!r} already exists")
            handle = await self.rt.agents.create(
                session_id=session_id,
                agent_options=profile.options,
                setup=origin_setup(profile, meta),
                meta=meta,
            )
            self.sessions.adopt(session_id, handle, profile)
        # Answered once stored: a 201 is a session a restart still has.
        await self._durable_through(session_id, handle.agent, handle.agent.session.next_seq - 1)
        if first is not None:
            await self.send(session_id, "followup", first, None, None)
        return {}

    async def load(self, session_id: str) -> Agent:
        """The live agent of ``session_id``, resumed from the store when unloaded."""
        return await self.sessions.load(session_id)

    def status(self, session_id: str) -> str:
        return self.sessions.status(session_id)

    async def status_of(self, session_id: str) -> str:
        return self.status(session_id)

    async def describe(self, session_id: str) -> dict[str, Any]:
        """The body of ``GET /v1/sessions/{id}``."""
        await self.require(session_id)
        profile, _version = await self.sessions.stored_profile(session_id)
        status = self.status(session_id)
        owner = None
        if status != "unloaded":
            owner = {"worker_id": self.worker_id, "host": socket.gethostname(), "pid": os.getpid()}
        return {
            "session_id": session_id,
            "profile": profile,
            "status": status,
            "last_seq": await self.last_seq(session_id),
            "owner": owner,
            "pending_approvals": [
                approval_json(r) for r in await self.pending_approvals(session_id)
            ],
            "pending_inputs": [input_json(r) for r in await self.pending_inputs(session_id)],
        } | shared_fields(await self.log_events(session_id))

    async def listing(self) -> list[dict[str, Any]]:
        store = self.rt.sessions.persistence
        ids = set(self.loaded())
        if store is not None:
            ids.update(await store.list())
        rows = []
        for session_id in sorted(ids):
            updated = None
            if store is not None and await store.exists(session_id):
                updated = (await store.info(session_id)).last_time
            rows.append(
                {
                    "session_id": session_id,
                    "status": self.status(session_id),
                    "last_seq": await self.last_seq(session_id),
                    "updated_at": updated,
                }
            )
        return rows

    # --- commands -------------------------------------------------------------------------

    async def send(
        self,
        session_id: str,
        kind: Literal["followup", "steer", "inject", "cancel"],
        content: str | tuple[Block, ...],
        message_id: str | None,
        key: str | None,
        *,
        keep_inbox: bool = False,
        trace: Mapping[str, str] | None = None,
        source: Mapping[str, Any] | None = None,
    ) -> dict[str, Any]:
        """Apply one command in the session's order; its answer once it is durable.
        ``source``: extras of the message's source (an expanded MCP prompt's).
        ``content`` is text, or blocks (images and files with their bytes: the session's
        writer stores them with the message).

        Raises:
            ApiError: 422 for text that is not text, 429 past ``max_unconsumed``, 409 for a
                reused key (another request) or message id, 503 while shutting down.
        """
        if isinstance(content, str):
            check_text(content, "content")
        check_text(message_id, "message_id")
        check_text(key, "idempotency_key")
        command: Command
        if kind == "cancel":
            command = Cancel(keep_inbox=keep_inbox)
        else:
            message = {"followup": Followup, "steer": Steer, "inject": Inject}[kind]
            command = message(content=content, message_id=message_id, trace=trace, source=source)
        return await self.commands.submit(session_id, Queued(command=command, key=key))

    async def _durable_through(self, session_id: str, agent: Agent, seq: int) -> None:
        await self._durable.through(session_id, agent.session, seq)

    async def command(
        self,
        session_id: str,
        kind: Literal["client_tools", "client_result", "state"],
        body: Mapping[str, Any],
    ) -> dict[str, Any]:
        """Apply one AG-UI command (``_agui_input``) in the session's order; its answer once
        it is durable."""
        command = agui_command(kind, body)
        return await self.commands.submit(session_id, Queued(command=command))

    async def log_events(self, session_id: str) -> tuple[SessionEvent, ...]:
        """The session's log: the live agent's, else the store's."""
        return await self.sessions.log_events(session_id)

    # --- approvals ------------------------------------------------------------------------

    async def pending_approvals(self, session_id: str) -> tuple[ApprovalRequested, ...]:
        """The session's calls waiting for a decision: the live agent's, or the stored
        log's fold when it is not loaded here."""
        return await self.sessions.pending_approvals(session_id)

    async def submit_approval(
        self, session_id: str, call_id: str, decision: Literal["allow", "deny"], reason: str | None
    ) -> dict[str, Any]:
        """Accept a decision for a pending call as the session's next command.

        The session is loaded first (a crashed one is repaired, which answers its pending
        calls), so what is accepted is pending in the live agent.

        Raises:
            ApiError: 404 when the call is not waiting (or never asked about), 409
                ``ALREADY_DECIDED`` when it was decided (by this or a concurrent request).
        """
        agent = await self.load(session_id)
        if not any(r.call_id == call_id for r in agent.pending_approvals):
            raise not_waiting(session_id, call_id, approval_state(agent.session.events, call_id))
        command = Decide(call_id=call_id, decision=decision, reason=reason or None)
        return await self.commands.submit(session_id, Queued(command=command))

    # --- input requests -------------------------------------------------------------------

    async def pending_inputs(self, session_id: str) -> tuple[InputRequest, ...]:
        """The session's input requests waiting for an answer: the live agent's, or the
        stored log's fold when it is not loaded here."""
        return await self.sessions.pending_inputs(session_id)

    async def submit_input(
        self,
        session_id: str,
        input_id: str,
        action: InputAction,
        content: Mapping[str, Any] | None,
    ) -> dict[str, Any]:
        """Accept an answer to a pending input request as the session's next command.

        The session is loaded first (a crashed one is repaired), so what is accepted is
        pending in the live agent; the content is checked against the requested schema
        before it is queued.

        Raises:
            ApiError: 404 when the input is not pending, 409 ``ALREADY_DECIDED`` when it
                was answered (by this or a concurrent request), 422 ``invalid_answer``.
        """
        agent = await self.load(session_id)
        checked = checked_answer(
            session_id, agent.session.events, agent.pending_inputs, input_id, action, content
        )
        answer = Answer(id=input_id, action=action, content=checked)
        return await self.commands.submit(session_id, Queued(command=answer))

    def unconsumed(self, session_id: str) -> int:
        return self.commands.unconsumed(session_id)

    # --- idle unload ----------------------------------------------------------------------

    async def unload(self, session_id: str) -> None:
        await self.sessions.unload(session_id)

    def _forget(self, session_id: str) -> None:
        """What the host keeps beside the agent of a session being unloaded goes with it."""
        self._durable.forget(session_id)
        self.commands.forget(session_id)
        self._feeds.drop_unread(session_id)

    # --- the feed -------------------------------------------------------------------------

    def release_feed(self, session_id: str) -> None:
        """A reader leaves; the feed goes when it has no readers and no live agent."""
        self._feeds.release(session_id)

    def _on_event(self, payload: SessionEventPayload) -> None:
        session_id = payload.session.id
        self.sessions.touch(session_id)
        self._feeds.on_event(session_id, payload.event.seq)

    def _on_frame(self, payload: StreamFramePayload) -> None:
        agent = payload.agent
        if agent.id in self._handles:
            self._feeds.on_frame(agent.id, agent.session.next_seq - 1, frame_json(payload.frame))

    async def events_after(self, session_id: str, after: int, limit: int) -> list[dict[str, Any]]:
        """Durable events with seq > ``after`` in their stored JSON form (at most ``limit``).

        A live session's events are served once flushed, so a reader never sees an event
        the store could still lose."""
        handle = self._handles.get(session_id)
        if handle is not None:
            session = handle.agent.session
            mark = session.next_seq - 1
            if mark <= after:
                return []
            try:
                await self._durable.through(session_id, session, mark)
            except Exception:
                log.debug("session %s: flush for a reader failed", session_id, exc_info=True)
            else:
                events = session.events[after : min(mark, after + limit)]
                return [event.to_json() for event in events]
        store = self.rt.sessions.persistence
        if store is None:
            return []
        try:
            return list(await store.load_after(session_id, after, limit))
        except SessionPersistenceNotFoundError:
            return []

    def subscribe(self, session_id: str) -> LocalReader:
        """A feed reader of ``session_id`` (``FeedSource``), registered now."""
        feed = self._feeds.get(session_id, reader=True)
        return LocalReader(
            feed,
            functools.partial(self.events_after, session_id),
            functools.partial(self.release_feed, session_id),
        )

    async def last_seq(self, session_id: str) -> int:
        return await self.sessions.last_seq(session_id)
