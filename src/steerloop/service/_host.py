"""The in-process host of a ``--role all`` service: loads agents from profiles, applies the
commands the API accepts in their per-session order, feeds SSE readers and unloads idle
sessions.

Commands go through ``_commands.LocalCommands``: applied in order per session and answered
once what they wrote is durable, recognised after a restart from the log alone.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
import unicodedata
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal

from .. import Runtime
from ..agent import Agent, AgentHandle
from ..errors import SessionPersistenceNotFoundError
from ..hooks import (
    ASSISTANT_STREAM,
    SESSION_EVENT,
    SessionEventPayload,
    StreamFrame,
    StreamFramePayload,
)
from ..llm.chunks import chunk_to_json
from ..messages import Block
from ..session import (
    InputAction,
    InputRequest,
    Session,
    approval_state,
    fold_state,
    pending_approvals,
    pending_deferred,
    pending_inputs,
)
from ..session.events import ApprovalRequested, SessionEvent
from ._commands import APPROVAL_BY, Command, CommandKind, LocalCommands, not_waiting
from ._errors import ApiError
from ._inputs_api import checked_answer, input_json
from ._profile import ORIGIN_KIND, Profile, origin_setup
from ._source import Wakeup
from ._text import check_text, check_texts

__all__ = [
    "APPROVAL_BY",
    "MAX_SESSION_ID",
    "ApiError",
    "ServiceHost",
    "check_session_id",
    "choose_profile",
    "frame_json",
    "require_found",
    "shared_fields",
]

log = logging.getLogger("steerloop.service")

_MAX_FRAMES = 4096
"""Live frames kept per open step; older ones are dropped (the committed
``assistant/message`` supersedes them), so a slow reader never makes the host buffer more."""


MAX_SESSION_ID = 128
"""The longest session id a service creates (characters)."""


def check_session_id(session_id: str) -> None:
    """Refuse, before anything is written, a session id the routes could not address:
    ``/`` (a path segment ends there), ``.`` and ``..`` (clients collapse dot segments),
    control or surrogate characters, and more than ``MAX_SESSION_ID`` characters.

    Raises:
        ApiError: 422 ``invalid_session_id`` naming what is wrong.
    """
    problem = None
    if not session_id or len(session_id) > MAX_SESSION_ID:
        problem = f"must be 1 to {MAX_SESSION_ID} characters (got {len(session_id)})"
    elif "/" in session_id:
        problem = "must not contain '/'"
    elif session_id in (".", ".."):
        problem = "must not be '.' or '..'"
    elif any(unicodedata.category(c) in ("Cc", "Cs") for c in session_id):
        problem = "must not contain control characters"
    if problem is not None:
        shown = session_id if len(session_id) <= 40 else session_id[:40] + "…"
        raise ApiError(422, "invalid_session_id", f"session id {shown!r} {problem}")


def choose_profile(profiles: Mapping[str, Profile], name: str | None) -> Profile:
    """The profile ``name`` (``"default"`` when ``None``); 422 naming the served ones."""
    name = "default" if name is None else name
    profile = profiles.get(name)
    if profile is None:
        known = ", ".join(sorted(profiles)) or "none"
        raise ApiError(422, "unknown_profile", f"no profile {name!r} (served: {known})")
    return profile


def require_found(session_id: str, found: bool) -> None:
    """404 for a session neither host nor store knows."""
    if not found:
        raise ApiError(404, "session_not_found", f"no session {session_id!r}")


class _Feed(Wakeup):
    """Wakes SSE readers of one session; holds the live frames of its open step.

    A durable event in the middle of a stream (a steer's splice) starts a new numbering
    (``seq:n`` after it). The frames numbered after the previous seq stay readable (``prev``)
    until frames under another seq replace them: a reader that had not yet read the last of
    them when the event landed reads them first (``_pages``), so it loses no word.
    """

    __slots__ = ("after_seq", "first_n", "frames", "prev", "readers")

    def __init__(self) -> None:
        super().__init__()
        self.readers = 0
        self.after_seq = 0
        self.first_n = 1
        self.frames: deque[dict[str, Any]] = deque(maxlen=_MAX_FRAMES)
        self.prev: tuple[int, int, deque[dict[str, Any]]] | None = None

    def restart(self, after_seq: int) -> None:
        """Number the next frames after ``after_seq``; the current ones become ``prev``."""
        if self.frames:
            self.prev = (self.after_seq, self.first_n, self.frames)
            self.frames = deque(maxlen=_MAX_FRAMES)
        self.after_seq = after_seq
        self.first_n = 1

    def frames_after(self, seq: int, n: int) -> list[tuple[int, dict[str, Any]]]:
        """Live frames ``(n, frame)`` numbered after ``seq`` with a number > ``n``."""
        if seq == self.after_seq:
            first, frames = self.first_n, self.frames
        elif self.prev is not None and seq == self.prev[0]:
            _, first, frames = self.prev
        else:
            return []
        return [(i, frame) for i, frame in enumerate(frames, start=first) if i > n]


class _Durability:
    """Makes the events readers ask for durable, for every reader of the process at once.

    Readers (SSE feeds, log pages) serve a live session's events only once they are durable.
    Each flushing on its own turned every group commit into a synced one, once per reader
    wake (measured: a third of the turn throughput with two readers per session). Here a
    reader registers what it needs and joins the next *round*: one ``flush`` per session in
    demand, all issued together (group commit syncs them in one commit); one round runs at
    a time, so the sync rate no longer grows with the number of readers.
    """

    def __init__(self) -> None:
        self.marks: dict[str, int] = {}  # durable through this seq (per session)
        self._want: dict[str, Session] = {}  # session id -> Session, for the next round
        self._next: asyncio.Future[dict[str, BaseException]] | None = None
        self._runner: asyncio.Task[None] | None = None

    async def through(self, session_id: str, session: Session, seq: int) -> None:
        """Return once ``session`` is durable through ``seq``; raise its flush's error."""
        while self.marks.get(session_id, 0) < seq:
            self._want[session_id] = session
            if self._next is None:
                self._next = asyncio.get_running_loop().create_future()
            round_ = self._next
            if self._runner is None or self._runner.done():
                self._runner = asyncio.get_running_loop().create_task(self._run())
            errors = await asyncio.shield(round_)
            if session_id in errors:
                raise errors[session_id]

    def forget(self, session_id: str) -> None:
        self.marks.pop(session_id, None)

    async def _run(self) -> None:
        while self._want:
            want, self._want = self._want, {}
            round_, self._next = self._next, None
            marks = {sid: session.next_seq - 1 for sid, session in want.items()}
            results = await asyncio.gather(
                *(session.flush() for session in want.values()), return_exceptions=True
            )
            errors: dict[str, BaseException] = {}
            for (sid, mark), result in zip(marks.items(), results, strict=True):
                if isinstance(result, BaseException):
                    errors[sid] = result
                else:
                    self.marks[sid] = max(mark, self.marks.get(sid, 0))
            if round_ is not None and not round_.done():
                round_.set_result(errors)


class ServiceHost:
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
        self._clock = clock
        self._handles: dict[str, AgentHandle] = {}
        self._profile_of: dict[str, str] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        self._feeds: dict[str, _Feed] = {}
        self._idle_since: dict[str, float] = {}
        self._durable = _Durability()
        self.commands = LocalCommands(
            self.load, self._durable_through, max_unconsumed=max_unconsumed
        )
        self._closed = False
        self._stop = asyncio.Event()
        self._unloader: asyncio.Task[None] | None = None
        self._disposers = [
            rt.hooks.on(SESSION_EVENT, self._on_event),
            rt.hooks.on(ASSISTANT_STREAM, self._on_frame),
        ]

    # --- lifecycle ------------------------------------------------------------------------

    def start(self) -> None:
        if self.idle_unload is not None and self._unloader is None:
            self._unloader = asyncio.get_running_loop().create_task(self._unload_idle())

    async def close(self) -> None:
        """Stop accepting, let the drains and the unloader see it, then dispose every agent
        (their turns end aborted, cause disposed)."""
        self._closed = True
        self._stop.set()
        for dispose in self._disposers:
            dispose()
        for feed in self._feeds.values():
            feed.bump()
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
        lock = self._lock(session_id)
        async with lock:
            if await self.exists(session_id):
                raise ApiError(409, "session_exists", f"session {session_id!r} already exists")
            handle = await self.rt.agents.create(
                session_id=session_id,
                agent_options=profile.options,
                setup=origin_setup(profile, meta),
                meta=meta,
            )
            self._adopt(session_id, handle, profile)
        # Answered once stored: a 201 is a session a restart still has.
        await self._durable_through(session_id, handle.agent, handle.agent.session.next_seq - 1)
        if first is not None:
            await self.send(session_id, "followup", first, None, None)
        return {}

    def _adopt(self, session_id: str, handle: AgentHandle, profile: Profile) -> None:
        self._handles[session_id] = handle
        self._profile_of[session_id] = profile.name
        self._idle_since[session_id] = self._clock()

    def _lock(self, session_id: str) -> asyncio.Lock:
        lock = self._locks.get(session_id)
        if lock is None:
            lock = self._locks[session_id] = asyncio.Lock()
        return lock

    async def stored_profile(self, session_id: str) -> tuple[str | None, int | None]:
        if session_id in self._profile_of:
            name = self._profile_of[session_id]
            return name, self.profiles[name].version
        store = self.rt.sessions.persistence
        if store is None:
            return None, None
        try:
            header = await store.load_header(session_id)
        except SessionPersistenceNotFoundError:
            return None, None
        origin = header.get("origin")
        if not isinstance(origin, dict) or origin.get("kind") != ORIGIN_KIND:
            return None, None
        stored_name: Any = origin.get("profile")
        stored_version: Any = origin.get("profile_version")
        return (
            stored_name if isinstance(stored_name, str) else None,
            stored_version if type(stored_version) is int else None,
        )

    async def load(self, session_id: str) -> Agent:
        """The live agent of ``session_id``, resumed from the store when unloaded."""
        handle = self._handles.get(session_id)
        if handle is not None:
            return handle.agent
        async with self._lock(session_id):
            handle = self._handles.get(session_id)
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
            self._adopt(session_id, handle, profile)
            return handle.agent

    def status(self, session_id: str) -> str:
        handle = self._handles.get(session_id)
        if handle is None:
            return "unloaded"
        return str(handle.agent.status)

    async def status_of(self, session_id: str) -> str:
        return self.status(session_id)

    async def describe(self, session_id: str) -> dict[str, Any]:
        """The body of ``GET /v1/sessions/{id}``."""
        await self.require(session_id)
        profile, _version = await self.stored_profile(session_id)
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
                {"call_id": r.call_id, "name": r.name, "arguments": r.arguments, "reason": r.reason}
                for r in await self.pending_approvals(session_id)
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
        ``content`` is text, or blocks (images and files with their bytes: the session's
        writer stores them with the message). ``source``: extras of the message's source
        (an expanded MCP prompt's).

        Raises:
            ApiError: 422 for text that is not text, 429 past ``max_unconsumed``, 409 for a
                reused key (another request) or message id, 503 while shutting down.
        """
        if isinstance(content, str):
            check_text(content, "content")
        check_text(message_id, "message_id")
        check_text(key, "idempotency_key")
        command = Command(
            kind=kind,
            content=content,
            message_id=message_id,
            key=key,
            keep_inbox=keep_inbox,
            trace=trace,
            source=source,
        )
        return await self.commands.submit(session_id, command)

    async def _durable_through(self, session_id: str, agent: Agent, seq: int) -> None:
        await self._durable.through(session_id, agent.session, seq)

    async def command(
        self, session_id: str, kind: CommandKind, body: Mapping[str, Any]
    ) -> dict[str, Any]:
        """Apply one AG-UI command (``_agui_input.AGUI_COMMANDS``) in the session's order;
        its answer once it is durable."""
        return await self.commands.submit(session_id, Command(kind=kind, body=body))

    async def log_events(self, session_id: str) -> tuple[SessionEvent, ...]:
        """The session's log: the live agent's, else the store's."""
        handle = self._handles.get(session_id)
        if handle is not None:
            return tuple(handle.agent.session.events)
        store = self.rt.sessions.persistence
        if store is None:
            return ()
        try:
            return tuple(await store.load(session_id))
        except SessionPersistenceNotFoundError:
            return ()

    # --- approvals ------------------------------------------------------------------------

    async def pending_approvals(self, session_id: str) -> tuple[ApprovalRequested, ...]:
        """The session's calls waiting for a decision: the live agent's, or the stored
        log's fold when it is not loaded here."""
        handle = self._handles.get(session_id)
        if handle is not None:
            return handle.agent.pending_approvals
        store = self.rt.sessions.persistence
        if store is None:
            return ()
        try:
            return pending_approvals(await store.load(session_id))
        except SessionPersistenceNotFoundError:
            return ()

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
        command = Command(kind="approval", content=reason or "", call_id=call_id, decision=decision)
        return await self.commands.submit(session_id, command)

    # --- input requests -------------------------------------------------------------------

    async def pending_inputs(self, session_id: str) -> tuple[InputRequest, ...]:
        """The session's input requests waiting for an answer: the live agent's, or the
        stored log's fold when it is not loaded here."""
        handle = self._handles.get(session_id)
        if handle is not None:
            return handle.agent.pending_inputs
        return pending_inputs(await self.log_events(session_id))

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
        answer = {"id": input_id, "action": action, "content": checked}
        return await self.commands.submit(session_id, Command(kind="input", answer=answer))

    def unconsumed(self, session_id: str) -> int:
        return self.commands.unconsumed(session_id)

    # --- idle unload ----------------------------------------------------------------------

    async def _unload_idle(self) -> None:
        assert self.idle_unload is not None
        period = max(0.05, min(self.idle_unload / 2, 5.0))
        while not self._closed:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), period)
            if self._closed:
                return
            now = self._clock()
            for session_id, handle in list(self._handles.items()):
                idle_for = now - self._idle_since.get(session_id, now)
                if (
                    handle.agent.status == "idle"
                    and self.unconsumed(session_id) == 0
                    and idle_for >= self.idle_unload
                ):
                    await self.unload(session_id)

    async def unload(self, session_id: str) -> None:
        async with self._lock(session_id):
            handle = self._handles.get(session_id)
            if handle is None or handle.agent.status != "idle" or self.unconsumed(session_id):
                return
            del self._handles[session_id]
            self._durable.forget(session_id)
            self.commands.forget(session_id)
            feed = self._feeds.get(session_id)
            if feed is not None and feed.readers <= 0:
                del self._feeds[session_id]
            await handle.dispose()

    # --- the feed -------------------------------------------------------------------------

    def feed(self, session_id: str, reader: bool = False) -> _Feed:
        feed = self._feeds.get(session_id)
        if feed is None:
            feed = self._feeds[session_id] = _Feed()
        if reader:
            feed.readers += 1
        return feed

    def release_feed(self, session_id: str) -> None:
        """A reader leaves; the feed goes when it has no readers and no live agent."""
        feed = self._feeds.get(session_id)
        if feed is None:
            return
        feed.readers -= 1
        if feed.readers <= 0 and session_id not in self._handles:
            del self._feeds[session_id]

    def _on_event(self, payload: SessionEventPayload) -> None:
        session_id = payload.session.id
        if session_id in self._handles:
            self._idle_since[session_id] = self._clock()
        feed = self._feeds.get(session_id)
        if feed is not None:
            feed.restart(payload.event.seq)
            feed.bump()

    def _on_frame(self, payload: StreamFramePayload) -> None:
        agent = payload.agent
        if agent.id not in self._handles:
            return
        feed = self.feed(agent.id)
        after = agent.session.next_seq - 1
        if after != feed.after_seq:
            feed.restart(after)
        if len(feed.frames) == feed.frames.maxlen:
            feed.first_n += 1
        feed.frames.append(frame_json(payload.frame))
        feed.bump()

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

    def subscribe(self, session_id: str) -> _LocalReader:
        """A feed reader of ``session_id`` (``FeedSource``), registered now."""
        return _LocalReader(self, session_id, self.feed(session_id, reader=True))

    async def last_seq(self, session_id: str) -> int:
        handle = self._handles.get(session_id)
        if handle is not None:
            return handle.agent.session.next_seq - 1
        store = self.rt.sessions.persistence
        if store is None:
            return 0
        return (await store.info(session_id)).events


class _LocalReader:
    """An SSE reader of the in-process feed (``FeedReader``)."""

    def __init__(self, host: ServiceHost, session_id: str, feed: _Feed) -> None:
        self._host = host
        self._session_id = session_id
        self._feed = feed
        self._open = True

    @property
    def version(self) -> int:
        return self._feed.version

    async def wait(self, seen: int, timeout: float) -> None:
        await self._feed.wait(seen, timeout)

    async def events_after(self, after: int, limit: int) -> list[dict[str, Any]]:
        return await self._host.events_after(self._session_id, after, limit)

    async def frames_after(self, seq: int, n: int) -> list[tuple[int, dict[str, Any]]]:
        return self._feed.frames_after(seq, n)

    def close(self) -> None:
        if self._open:
            self._open = False
            self._host.release_feed(self._session_id)


def shared_fields(events: Sequence[SessionEvent]) -> dict[str, Any]:
    """``state`` (the shared state document) and ``pending_client_calls`` (calls waiting
    for a client's result) of ``GET /v1/sessions/{id}``, folded from the log."""
    return {
        "state": fold_state(events),
        "pending_client_calls": [
            {"call_id": d.call_id, "name": d.name, "arguments": d.arguments}
            for d in pending_deferred(events)
        ],
    }


def frame_json(frame: StreamFrame) -> dict[str, Any]:
    """The JSON body of one live frame (``event: stream`` on the SSE feed)."""
    body: dict[str, Any] = {
        "kind": frame.kind,
        "attempt_id": frame.attempt_id,
        "revision": frame.revision,
        "turn": frame.turn,
        "step": frame.step,
    }
    if frame.chunk is not None:
        body["chunk"] = chunk_to_json(frame.chunk)
    return body
