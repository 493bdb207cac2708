"""Creation transaction and teardown (§7.1–7.2), and ``rt.agents``.

Creation: validate → setup(scope) (unpublished) → commit re-check → register session →
register agent → ``agent/created`` (awaited, under maintenance) → ``agent/session-start``
→ driver unlocked (a latched wake replays once) → handle returned. Any failure rolls the
whole thing back. Teardown: wait for publication → cancel(disposed) → ``when_idle`` →
undo the scope → close the write handle → unregister the agent (``agent/disposed``) →
unregister the session → drop bookkeeping; every failure is collected.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Literal, TypeVar, overload

from .._cancel import CancelCause
from .._hooks import (
    Disposer,
    EmitHook,
    EmitListener,
    HookName,
    SerialHook,
    SerialListener,
    WaterfallHook,
    WaterfallListener,
)
from .._signal import AbortController
from ..errors import AbortedError, SessionConflictError, SessionPersistenceNotFoundError
from ..messages import UserMessage
from ..session._codec import checked_inbox
from ..session._repair import plan_restore
from ..session._session import Session
from ..session._store import BufferedWriter
from ..tools._define import Tool
from ._agent import Agent
from ._decisions import AgentPayload, SessionStartPayload
from ._handles import AGENT_CREATED, AGENT_DISPOSED, SESSION_START
from ._options import AgentOptions
from ._reconcile import close_seed_reconciled, is_unknown
from ._registry import LiveAgents, current_initiator, without_initiator

if TYPE_CHECKING:
    from ..session._registry import SessionRegistry
    from ..session._store import SessionStore
    from ._services import LoopServices

__all__ = ["AgentHandle", "AgentRegistry", "AgentScope", "check_timeout"]

_log = logging.getLogger("steerloop")
P = TypeVar("P")
R = TypeVar("R")

Setup = Callable[["AgentScope"], Any]
Pending = dict[str, list[UserMessage]]  # the inbox queues folded from a seed


class _ScopedTools:
    def __init__(self, scope: AgentScope) -> None:
        self._scope = scope

    def register(self, tool: Tool) -> Disposer:
        """Register a tool visible to this agent only, undone at dispose."""
        return self._scope._keep(
            self._scope._services.tools.register(tool, owner=self._scope.agent.id)
        )


class _ScopedPrompt:
    def __init__(self, scope: AgentScope) -> None:
        self._scope = scope

    def add_section(self, name: str, render: Any, *, order: int = 0) -> Disposer:
        scope = self._scope
        return scope._keep(
            scope._services.prompt.add_section(name, render, order=order, owner=scope.agent.id)
        )

    def add_context_section(self, name: str, render: Any, *, order: int = 0) -> Disposer:
        scope = self._scope
        return scope._keep(
            scope._services.prompt.add_context_section(
                name, render, order=order, owner=scope.agent.id
            )
        )


class _ScopedHooks:
    def __init__(self, scope: AgentScope) -> None:
        self._scope = scope

    @overload
    def on(self, name: EmitHook[P], listener: EmitListener[P]) -> Disposer: ...
    @overload
    def on(self, name: SerialHook[P, R], listener: SerialListener[P, R]) -> Disposer: ...
    @overload
    def on(self, name: WaterfallHook[P, R], listener: WaterfallListener[P, R]) -> Disposer: ...
    @overload
    def on(self, name: str, listener: Callable[..., Any]) -> Disposer: ...
    def on(self, name: HookName, listener: Callable[..., Any]) -> Disposer:
        """Register a listener that only receives this agent's payloads."""
        scope = self._scope
        return scope._keep(scope._services.hooks.on(str(name), listener, owner=scope.agent.id))


class AgentScope:
    """Registrations owned by one agent; ``setup(scope)`` composes through it."""

    def __init__(self, services: LoopServices, agent: Agent) -> None:
        self._services = services
        self.agent = agent
        self._disposers: list[Disposer] = []
        self._closed = False

    # Made per use, not kept: a part stored here would refer back to the scope, and the cycle
    # would keep the disposed agent and its log alive until a full collection.
    @property
    def tools(self) -> _ScopedTools:
        return _ScopedTools(self)

    @property
    def hooks(self) -> _ScopedHooks:
        return _ScopedHooks(self)

    @property
    def system_prompt(self) -> _ScopedPrompt:
        return _ScopedPrompt(self)

    def _keep(self, disposer: Disposer) -> Disposer:
        # A closed scope (rolled back or disposed) takes no new registrations: an abandoned
        # setup or a stray task must not leave anything behind.
        if self._closed:
            disposer()
            raise RuntimeError(f"the scope of agent {self.agent.id!r} is closed")
        self._disposers.append(disposer)
        return disposer

    def undo(self) -> list[Exception]:
        """Undo every registration, newest first; returns the failures."""
        errors: list[Exception] = []
        while self._disposers:
            try:
                self._disposers.pop()()
            except Exception as exc:
                errors.append(exc)
        return errors

    def _close(self) -> list[Exception]:
        """Refuse further registrations and undo the existing ones; returns the failures."""
        self._closed = True
        return self.undo()


class AgentHandle:
    """What ``create`` returns: the agent and its memoized ``dispose``."""

    def __init__(self, registry: AgentRegistry, lifecycle: _Lifecycle) -> None:
        self._registry = registry
        self._lifecycle = lifecycle
        self.agent = lifecycle.agent

    async def dispose(self, timeout: float | None = None) -> None:
        """Tear the agent down (once; every caller awaits the same outcome).

        A tool body that ignores its abort signal cannot be killed (same process), so without
        ``timeout`` teardown waits for it. With ``timeout`` (seconds), once it elapses the
        calls still running are recorded ``TOOL_OUTCOME_UNKNOWN``, the open step and turn are
        closed (``turn/end{aborted}``), the session takes no further writes and teardown goes
        on; the stray task is left to the event loop and reported (``agent/error`` with a
        ``TimeoutError``, and a warning on the ``steerloop`` logger).

        Raises:
            ValueError: a negative or non-numeric ``timeout``.
        """
        await self._registry._dispose(self._lifecycle, check_timeout(timeout))


class _Lifecycle:
    __slots__ = ("agent", "give_up", "published", "scope", "teardown", "timeout", "timers")

    def __init__(self, agent: Agent, scope: AgentScope) -> None:
        self.agent = agent
        self.scope = scope
        loop = asyncio.get_running_loop()
        self.published: asyncio.Future[None] = loop.create_future()
        self.teardown: asyncio.Future[None] | None = None
        # Resolved when a dispose timeout elapses: teardown stops waiting for the activity.
        self.give_up: asyncio.Future[None] = loop.create_future()
        self.timeout: float | None = None
        self.timers: list[asyncio.TimerHandle] = []

    def bound(self, timeout: float) -> None:
        """Give up waiting for the agent's activity ``timeout`` seconds from now."""
        if self.timeout is None or timeout < self.timeout:
            self.timeout = timeout
        self.timers.append(asyncio.get_running_loop().call_later(timeout, self._expire))

    def _expire(self) -> None:
        if not self.give_up.done():
            self.give_up.set_result(None)

    def stop_timers(self) -> None:
        for timer in self.timers:
            timer.cancel()
        self.timers.clear()


class AgentRegistry:
    """``rt.agents``: create, resume, look up and dispose agents."""

    def __init__(
        self,
        services: LoopServices,
        sessions: SessionRegistry,
        store: SessionStore | None,
        *,
        host: object = None,
    ) -> None:
        self._services = services
        self._sessions = sessions
        self._store = store
        self._host = host  # handed to each agent as ``agent.runtime``; opaque here
        self._live: LiveAgents[Agent] = LiveAgents()
        self._lifecycles: dict[str, _Lifecycle] = {}
        self._reserved: set[str] = set()
        # Each in-flight creation: its task and a future resolved once it settled.
        self._creations: dict[asyncio.Future[None], asyncio.Task[Any] | None] = {}
        self._closing = AbortController()

    # --- lookups ---------------------------------------------------------------------

    def get(self, agent_id: str) -> Agent | None:
        return self._live.agents.get(agent_id)

    def list(self) -> tuple[Agent, ...]:
        return tuple(self._live.agents.values())

    def children(self, agent: Agent) -> tuple[Agent, ...]:
        return tuple(self._live.children.get(agent.id, ()))

    def current_initiator(self) -> Agent | None:
        """The agent whose driver started the current work, or ``None``."""
        agent = current_initiator()
        # Each runtime has its own services record: it tells this registry's agents apart.
        if isinstance(agent, Agent) and agent.services is self._services:
            return agent
        return None

    def require_initiator(self) -> Agent:
        """Like ``current_initiator`` but raises ``RuntimeError`` when there is none."""
        agent = self.current_initiator()
        if agent is None:
            raise RuntimeError("no agent initiated the current work")
        return agent

    def without_initiator(self) -> contextlib.AbstractContextManager[None]:
        """Attribute the block (and tasks created in it) to no agent."""
        return without_initiator()

    # --- creation --------------------------------------------------------------------

    async def create(
        self,
        *,
        session_id: str,
        agent_options: AgentOptions,
        setup: Setup | None = None,
        meta: dict[str, Any] | None = None,
        parent: Agent | None = None,
    ) -> AgentHandle:
        """Create and publish a new agent over a new session.

        Raises:
            ValueError: invalid options or id.
            RuntimeError: the id is live, or the runtime is closing.
        """
        self._check_open()
        _validate(session_id, agent_options)
        if self._store is not None:
            await self._store.check_absent(session_id)
        return await self._build(session_id, agent_options, setup, meta, parent, "startup", ())

    async def resume(
        self,
        *,
        resume_session_id: str,
        agent_options: AgentOptions,
        setup: Setup | None = None,
        meta: dict[str, Any] | None = None,
        parent: Agent | None = None,
    ) -> AgentHandle:
        """Resume a stored session as a new live agent.

        Raises:
            SessionPersistenceNotFoundError: nothing is stored under the id (always, with no store).
            RuntimeError: the session is live in this runtime.
        """
        self._check_open()
        _validate(resume_session_id, agent_options)
        if resume_session_id in self._live.agents or resume_session_id in self._reserved:
            raise RuntimeError(f"session {resume_session_id!r} is live in this runtime")
        store = self._store
        if store is None:
            raise SessionPersistenceNotFoundError(
                f"cannot resume {resume_session_id!r}: no store is configured (in-memory runtime)"
            )
        seed = await store.load(resume_session_id)
        # Whatever the backend, an invalid log publishes nothing (C7.4-20).
        pending = checked_inbox(seed)
        # The header comes back too: a resumed child keeps its parent link and delegation depth.
        header = await store.load_header(resume_session_id)
        return await self._build(
            resume_session_id, agent_options, setup, meta, parent, "resume", seed, pending, header
        )

    async def restore_or_create(
        self,
        *,
        session_id: str,
        agent_options: AgentOptions,
        setup: Setup | None = None,
        meta: dict[str, Any] | None = None,
        parent: Agent | None = None,
    ) -> AgentHandle:
        """Resume ``session_id`` if stored, else create it; only not-found falls back."""
        self._check_open()
        _validate(session_id, agent_options)
        lifecycle = self._lifecycles.get(session_id)
        if lifecycle is not None:
            if lifecycle.teardown is None:
                raise RuntimeError(f"session {session_id!r} is live in this runtime")
            # Wait, then load what it flushed (C7.2-8); its failure is the disposer's to see.
            with contextlib.suppress(Exception):
                await asyncio.shield(lifecycle.teardown)
        try:
            return await self.resume(
                resume_session_id=session_id,
                agent_options=agent_options,
                setup=setup,
                meta=meta,
                parent=parent,
            )
        except SessionPersistenceNotFoundError:
            return await self.create(
                session_id=session_id,
                agent_options=agent_options,
                setup=setup,
                meta=meta,
                parent=parent,
            )

    def _check_open(self) -> None:
        if self._closing.signal.aborted:
            raise RuntimeError("the runtime is closing")

    async def _build(
        self,
        session_id: str,
        options: AgentOptions,
        setup: Setup | None,
        meta: dict[str, Any] | None,
        parent: Agent | None,
        source: Literal["startup", "resume"],
        seed: Any,
        pending: Pending | None = None,
        header: dict[str, Any] | None = None,
    ) -> AgentHandle:
        self._check_open()
        if session_id in self._live.agents or session_id in self._reserved:
            raise RuntimeError(f"an agent for session {session_id!r} is already live")
        self._reserved.add(session_id)
        settled: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._creations[settled] = asyncio.current_task()
        try:
            return await self._transaction(
                session_id, options, setup, meta, parent, source, seed, pending, header
            )
        finally:
            self._reserved.discard(session_id)
            del self._creations[settled]
            settled.set_result(None)

    async def _await_setup(self, awaitable: Awaitable[Any], scope: AgentScope) -> Any:
        """Await an async setup unless the runtime starts closing first (C7.2-18)."""
        pending = asyncio.ensure_future(awaitable)
        try:
            return await self._closing.signal.race(pending)
        except AbortedError:
            if pending.done():
                raise  # the setup's own failure
            # Abandoned, not cancelled (setup is user code): the rollback closes the scope,
            # and whatever the setup still registers is undone when it finishes.
            pending.add_done_callback(lambda done: _abandoned(done, scope))
            raise RuntimeError("the runtime closed during agent creation") from None

    async def _transaction(
        self,
        session_id: str,
        options: AgentOptions,
        setup: Setup | None,
        meta: dict[str, Any] | None,
        parent: Agent | None,
        source: Literal["startup", "resume"],
        seed: Any,
        pending: Pending | None,
        header: dict[str, Any] | None,
    ) -> AgentHandle:
        services = self._services
        if parent is None:
            parent = self.current_initiator()
        # A store writer buffers until ``session.publish()`` below (C7.2-19), so every
        # rollback path leaves the stored artifact as it was.
        sink = await self._store.open_writer(session_id) if self._store is not None else None
        try:
            if isinstance(sink, BufferedWriter) and sink.stored_length != len(seed):
                # Loaded before the lease was ours and someone wrote in between (C7.2-6).
                raise SessionConflictError(
                    f"session {session_id!r} changed since it was loaded ({len(seed)} events "
                    f"then, {sink.stored_length} now); resume it again"
                )
            session = Session._create(
                session_id,
                hooks=services.hooks,
                clock=services.clock,
                seed=seed,
                sink=sink,
                header=header,
                close_seed=False,
            )
            # Restore repair (C7.2-9) comes first; a call whose outcome is unknown is offered
            # to its tool's reconcile before (tools the runtime has now: setup comes later,
            # and whatever it appends must follow the repair). A turn whose open step only
            # waits durably is kept open: the agent takes it up once live (``_waits``).
            fixes, waiting = plan_restore(seed) if seed else ([], None)
            reconciling = any(is_unknown(fix.data) for fix in fixes)
            if not reconciling:
                session.close_seed(fixes)
            agent = Agent._create(
                services,
                session,
                options,
                parent=parent,
                meta=meta,
                pending=pending,
                host=self._host,
                waiting=waiting,
            )
            if reconciling:
                await close_seed_reconciled(agent, seed, fixes)
        except BaseException:
            if sink is not None:
                await sink.discard()
            raise
        scope = AgentScope(services, agent)
        lifecycle = _Lifecycle(agent, scope)
        handle = AgentHandle(self, lifecycle)
        published = False
        announced = False
        try:
            if setup is not None:
                commit = setup(scope)
                if inspect.isawaitable(commit):
                    commit = await self._await_setup(commit, scope)
                if callable(commit):
                    commit()
            self._check_open()
            self._sessions._add(session)
            self._live.add(agent)
            self._lifecycles[session_id] = lifecycle
            published = True
            agent.phase.publish()  # under maintenance while agent/created runs
            announced = True
            await services.hooks.emit_awaited(AGENT_CREATED, AgentPayload(agent))
            session.publish()
            services.hooks.emit(SESSION_START, SessionStartPayload(agent, source))
        except BaseException as exc:
            # Roll back in teardown order: scope → write handle → agent (``agent/disposed``
            # pairs a partly delivered ``agent/created``) → session.
            agent.phase.begin_dispose()
            errors = scope._close()
            with contextlib.suppress(Exception):
                await session.discard()
            agent.phase.finish_dispose()  # also releases the creation's maintenance
            if published:
                self._live.remove(agent)
                self._lifecycles.pop(session_id, None)
                if announced:
                    services.hooks.emit(AGENT_DISPOSED, AgentPayload(agent))
                self._sessions._remove(session)
            if not lifecycle.published.done():
                lifecycle.published.set_result(None)
            for error in errors:
                exc.add_note(f"undoing the scope also failed: {error!r}")
            raise
        lifecycle.published.set_result(None)
        agent.phase.converge()
        agent.take_up_waiting()
        return handle

    # --- teardown --------------------------------------------------------------------

    def _dispose(self, lifecycle: _Lifecycle, timeout: float | None = None) -> Awaitable[None]:
        """Start the lifecycle's teardown once; every caller awaits the same outcome.

        A ``timeout`` bounds the wait for the agent's activity, from now, even when an
        earlier call started the teardown without one.
        """
        if timeout is not None:
            lifecycle.bound(timeout)
        if lifecycle.teardown is None:
            lifecycle.teardown = asyncio.ensure_future(self._teardown(lifecycle))
        return asyncio.shield(lifecycle.teardown)

    async def _teardown(self, lifecycle: _Lifecycle) -> None:
        agent = lifecycle.agent
        errors: list[Exception] = []
        await asyncio.shield(lifecycle.published)
        agent.phase.begin_dispose()
        try:
            agent.cancel(CancelCause.disposed())
        except Exception as exc:
            errors.append(exc)
        try:
            # Abandoning writes the closing events: a fenced-out writer refuses them, and the
            # teardown must still unregister the agent and its session.
            await _idle_or_give_up(agent, lifecycle)
        except Exception as exc:
            errors.append(exc)
        for child in self.children(agent):
            child_lifecycle = self._lifecycles.get(child.id)
            if child_lifecycle is None or child_lifecycle.agent is not child:
                continue
            try:
                await self._dispose(child_lifecycle, lifecycle.timeout)
            except Exception as exc:
                errors.append(exc)
        errors += lifecycle.scope._close()
        agent.client_calls.withdraw()  # client tools are registered outside the scope
        try:
            await agent.session.close()
        except Exception as exc:
            errors.append(exc)
        lifecycle.stop_timers()
        self._live.remove(agent)
        agent.phase.finish_dispose()
        self._services.hooks.emit(AGENT_DISPOSED, AgentPayload(agent))
        self._sessions._remove(agent.session)
        if self._lifecycles.get(agent.id) is lifecycle:
            del self._lifecycles[agent.id]
        if len(errors) == 1:
            raise errors[0]
        if errors:
            raise ExceptionGroup(f"disposing agent {agent.id!r} failed", errors)

    def bound(self, timeout: float) -> None:
        """Bound the teardown wait of every live agent (``rt.close(timeout=...)``)."""
        for agent in list(self._live.agents.values()):
            lifecycle = self._lifecycles.get(agent.id)
            if lifecycle is not None:
                lifecycle.bound(timeout)

    async def close(self, timeout: float | None = None) -> None:
        """Stop accepting work, dispose every live agent, wait for creations to settle.

        ``timeout`` bounds each agent's teardown wait as in ``AgentHandle.dispose``.
        """
        self._closing.abort(RuntimeError("runtime closing"))
        errors: list[Exception] = []
        lifecycles = [
            lc for a in list(self._live.agents.values()) if (lc := self._lifecycles.get(a.id))
        ]
        results = await asyncio.gather(
            *(self._dispose(lc, timeout) for lc in lifecycles), return_exceptions=True
        )
        errors += [r for r in results if isinstance(r, Exception)]
        # A close() called from inside a creation (its own task) cannot wait for that one.
        current = asyncio.current_task()
        pending = [f for f, task in self._creations.items() if task is None or task is not current]
        if pending:
            await asyncio.wait(pending)
        if len(errors) == 1 and not isinstance(errors[0], ExceptionGroup):
            raise errors[0]
        if errors:
            raise ExceptionGroup("closing the runtime failed", errors)


def check_timeout(timeout: object) -> float | None:
    """``None`` or a finite number of seconds ≥ 0."""
    if timeout is None:
        return None
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not timeout >= 0:
        raise ValueError(f"timeout must be None or a number of seconds >= 0, not {timeout!r}")
    return float(timeout)


async def _idle_or_give_up(agent: Agent, lifecycle: _Lifecycle) -> None:
    """Wait until ``agent`` is idle, or until the lifecycle gives up; then abandon what runs."""
    while (activity := agent.phase.activity) is not None:
        # Plain futures: nothing is wrapped in a task, nothing is cancelled.
        await asyncio.wait((activity.done, lifecycle.give_up), return_when="FIRST_COMPLETED")
        if lifecycle.give_up.done() and agent.phase.activity is not None:
            agent.abandon(lifecycle.timeout)
            return


def _validate(session_id: object, options: object) -> None:
    if not isinstance(session_id, str) or not session_id:
        raise ValueError("session_id must be a non-empty string")
    if not isinstance(options, AgentOptions):
        raise ValueError("agent_options must be an AgentOptions")
    options.validate()


def _abandoned(setup: asyncio.Future[Any], scope: AgentScope) -> None:
    """An abandoned setup finished: consume its outcome, undo what it registered late."""
    if not setup.cancelled():
        setup.exception()
    for error in scope.undo():
        _log.error("undoing the scope of an abandoned setup failed", exc_info=error)
