"""The composition root: ``Runtime.open()`` wires the services together."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine, Generator, Mapping, Sequence
from types import TracebackType
from typing import Any

from ._hooks import HookBus
from ._ids import Clock, IdFactory, default_clock, new_id, set_id_factory
from .agent._config import start_configured_agents, validate_agent_entries
from .agent._factory import AgentRegistry, check_timeout
from .agent._services import LoopLimits, LoopServices
from .llm._runtime import LlmService
from .prompt import SystemPromptService
from .session._events import SessionEvent
from .session._session import EventSink, Session
from .session._store import SessionStore, open_store
from .tools._runtime import ToolPipeline, ToolRegistry

__all__ = ["Runtime", "SessionRegistry"]

_log = logging.getLogger("steerloop")


class SessionRegistry:
    """``rt.sessions``: live sessions, and the store behind them (``persistence``)."""

    def __init__(
        self, persistence: SessionStore | None = None, *, clock: Clock = default_clock
    ) -> None:
        self._live: dict[str, Session] = {}
        self.persistence = persistence
        self._clock = clock

    def get(self, session_id: str) -> Session | None:
        return self._live.get(session_id)

    def list(self) -> tuple[Session, ...]:
        return tuple(self._live.values())

    async def fork(self, session_id: str, at_seq: int, new_session_id: str) -> Session:
        """Store a new session seeded with ``session_id``'s events up to ``at_seq``.

        The child gets the parent's prefix verbatim, restore repair for an unbalanced tail
        (C7.2-9), then ``session/end-seed{inherited: true}`` at the cut (C7.10-9). The
        parent's log is never modified. The parent may be live (its in-memory log is used)
        or only stored. Returns a detached snapshot of the stored child; drive it with
        ``rt.agents.resume(resume_session_id=new_session_id, ...)``.

        Raises:
            RuntimeError: no store is configured, or ``new_session_id`` is live.
            ValueError: ``at_seq`` is not a seq of the parent, or a bad id.
            SessionPersistenceNotFoundError: the parent is neither live nor stored.
            SessionConflictError: ``new_session_id`` is already stored or being written.
        """
        store = self.persistence
        if store is None:
            raise RuntimeError("fork() needs a store: open the runtime with store=... ")
        if not isinstance(new_session_id, str) or not new_session_id:
            raise ValueError("new_session_id must be a non-empty string")
        if new_session_id in self._live:
            raise RuntimeError(f"session {new_session_id!r} is live in this runtime")
        parent = self._live.get(session_id)
        events = tuple(parent.events) if parent is not None else await store.load(session_id)
        if isinstance(at_seq, bool) or not isinstance(at_seq, int):
            raise ValueError(f"at_seq must be an integer, not {at_seq!r}")
        if not 1 <= at_seq <= len(events):
            raise ValueError(f"at_seq {at_seq} is outside {session_id!r} (1..{len(events)})")
        await store.check_absent(new_session_id)
        prefix = events[:at_seq]
        writer = await store.open_writer(new_session_id)
        try:
            for event in prefix:
                writer.write(event)
            child = Session._create(
                new_session_id,
                clock=self._clock,
                seed=prefix,
                sink=writer,
                header={"parent_session": session_id, "is_seeded": True},
                inherited_seed=True,
            )
            child.publish()
        except BaseException:
            await writer.discard()
            raise
        await writer.close()
        return child

    def _add(self, session: Session) -> None:
        self._live[session.id] = session

    def _remove(self, session: Session) -> None:
        if self._live.get(session.id) is session:
            del self._live[session.id]


def _check_parallel(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"max_parallel_tool_calls must be a positive integer, not {value!r}")
    return value


class Runtime:
    """Owns the hook bus, the LLM seam, tools, prompts, sessions and agents."""

    def __init__(
        self,
        *,
        max_parallel_tool_calls: int = 10,
        persona: str = "",
        clock: Clock = default_clock,
        store: SessionStore | None = None,
    ) -> None:
        self._limits = LoopLimits(_check_parallel(max_parallel_tool_calls))
        self.clock = clock
        self.store = store
        self.hooks = HookBus()
        self.llm = LlmService()
        self.tools = ToolRegistry()
        self.tool_pipeline = ToolPipeline(self.hooks)
        self.system_prompt = SystemPromptService(persona)
        # What the loop receives instead of this runtime (built once; the limits stay live).
        self.loop_services = LoopServices(
            hooks=self.hooks,
            llm=self.llm,
            tools=self.tools,
            pipeline=self.tool_pipeline,
            prompt=self.system_prompt,
            clock=clock,
            ids=new_id,
            limits=self._limits,
        )
        self.sessions = SessionRegistry(store, clock=clock)
        self._owns_store = False
        self.agents = AgentRegistry(self)
        self._closing: asyncio.Future[None] | None = None
        self._restore_ids: Any = None

    @classmethod
    def open(
        cls,
        *,
        store: str | SessionStore | None = None,
        max_parallel_tool_calls: int = 10,
        persona: str = "",
        clock: Clock | None = None,
        ids: IdFactory | None = None,
        agents: Sequence[Mapping[str, Any]] | None = None,
    ) -> _Opening:
        """Open a runtime: ``rt = await Runtime.open(...)``, or ``async with Runtime.open(...)
        as rt`` (closed on exit).

        Args:
            store: ``None`` for in-memory sessions (no persistence); ``"memory://"`` for a
                ``MemoryStore`` (persistence within this process); or a ``SessionStore``
                instance, which the caller keeps owning (``close()`` does not close it).
            max_parallel_tool_calls: bound of the rolling tool pool (1 = serial).
            persona: the first part of every system prompt.
            clock: epoch-ms clock for event times (inject for reproducible logs).
            ids: id factory ``prefix -> id`` installed process-wide (e.g. ``counting_ids()``).
            agents: agents to start with the runtime, in order: mappings with exactly one of
                ``session_id`` (create) or ``resume_session_id`` (resume), ``agent_options``
                and optionally ``setup`` and ``meta``. All are validated before anything
                is opened (C7.2-4); if one fails to start, the runtime closes again.

        Raises:
            ValueError: an invalid option or agent entry, or a store URL this build cannot
                open.
        """
        return _Opening(
            lambda: cls._open(
                store=store,
                max_parallel_tool_calls=max_parallel_tool_calls,
                persona=persona,
                clock=clock,
                ids=ids,
                agents=agents,
            )
        )

    @classmethod
    async def _open(
        cls,
        *,
        store: str | SessionStore | None,
        max_parallel_tool_calls: int,
        persona: str,
        clock: Clock | None,
        ids: IdFactory | None,
        agents: Sequence[Mapping[str, Any]] | None,
    ) -> Runtime:
        _check_parallel(max_parallel_tool_calls)
        if agents is not None:
            validate_agent_entries(agents)
        backend = open_store(store) if store is not None else None
        rt = cls(
            max_parallel_tool_calls=max_parallel_tool_calls,
            persona=persona,
            clock=clock or default_clock,
            store=backend,
        )
        rt._owns_store = isinstance(store, str)
        if ids is not None:
            rt._restore_ids = set_id_factory(ids)
        if agents:
            try:
                await start_configured_agents(rt, agents)
            except BaseException:
                await rt.close()
                raise
        return rt

    @property
    def max_parallel_tool_calls(self) -> int:
        return self._limits.max_parallel_tool_calls

    @max_parallel_tool_calls.setter
    def max_parallel_tool_calls(self, value: int) -> None:
        self._limits.max_parallel_tool_calls = _check_parallel(value)

    def open_session(
        self,
        session_id: str,
        seed: tuple[SessionEvent, ...] = (),
        sink: EventSink | None = None,
        header: dict[str, Any] | None = None,
    ) -> Session:
        return Session._create(
            session_id, hooks=self.hooks, clock=self.clock, seed=seed, sink=sink, header=header
        )

    async def close(self, timeout: float | None = None) -> None:
        """Dispose every live agent and close the store.

        Memoised: every caller, concurrent or later, awaits the same completion and sees
        the same outcome (C7.2-27). A tool that ignores its abort signal keeps its agent's
        teardown waiting; ``timeout`` (seconds, per agent, from this call) bounds that wait:
        afterwards the calls still running are recorded ``TOOL_OUTCOME_UNKNOWN``, their turn
        is closed and the stray task is left to the event loop and reported (see
        ``AgentHandle.dispose``). A later call's ``timeout`` also bounds a close under way.

        Raises:
            ValueError: a negative or non-numeric ``timeout``.
        """
        bound = check_timeout(timeout)
        if self._closing is None:
            self._closing = asyncio.ensure_future(self._close(bound))
        elif bound is not None:
            self.agents.bound(bound)
        await asyncio.shield(self._closing)

    async def _close(self, timeout: float | None) -> None:
        try:
            await self.agents.close(timeout)
        finally:
            try:
                await self.hooks.emit_awaited("runtime/closing", self)
            except Exception:
                _log.exception("a runtime/closing listener raised")
            await self.hooks.drain()
            if self._restore_ids is not None:
                self._restore_ids()
            await self.llm.aclose()  # the registered adapters' HTTP clients
            if self._owns_store and self.store is not None:
                await self.store.close()

    async def __aenter__(self) -> Runtime:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()


class _Opening:
    """What ``Runtime.open()`` returns: awaitable once for the runtime, or an async context
    manager that opens it on entry and closes it on exit. Nothing starts until one of the two
    is used, so an unused value leaves no coroutine behind."""

    __slots__ = ("_rt", "_start")

    def __init__(self, start: Callable[[], Coroutine[Any, Any, Runtime]]) -> None:
        self._start = start
        self._rt: Runtime | None = None

    def __await__(self) -> Generator[Any, None, Runtime]:
        return self._start().__await__()

    async def __aenter__(self) -> Runtime:
        self._rt = await self._start()
        return self._rt

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._rt is not None:
            await self._rt.close()
