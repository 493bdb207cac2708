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
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Literal

from .._cancel import CancelCause
from .._hooks import Disposer, HookScope
from .._signal import AbortController
from ..errors import AbortedError, SessionPersistenceNotFoundError
from ..tools._define import Tool
from ._agent import Agent
from ._decisions import AgentPayload, SessionStartPayload
from ._options import AgentOptions
from ._registry import LiveAgents, current_initiator, without_initiator

if TYPE_CHECKING:
    from .._runtime import Runtime

__all__ = ["AgentHandle", "AgentRegistry", "AgentScope"]

Setup = Callable[["AgentScope"], Any]


class _ScopedTools:
    def __init__(self, scope: AgentScope) -> None:
        self._scope = scope

    def register(self, tool: Tool) -> Disposer:
        """Register a tool visible to this agent only, undone at dispose."""
        return self._scope._keep(self._scope._rt.tools.register(tool, owner=self._scope.agent.id))


class _ScopedPrompt:
    def __init__(self, scope: AgentScope) -> None:
        self._scope = scope

    def add_section(self, name: str, render: Any, *, order: int = 0) -> Disposer:
        scope = self._scope
        return scope._keep(
            scope._rt.system_prompt.add_section(name, render, order=order, owner=scope.agent.id)
        )

    def add_context_section(self, name: str, render: Any, *, order: int = 0) -> Disposer:
        scope = self._scope
        return scope._keep(
            scope._rt.system_prompt.add_context_section(
                name, render, order=order, owner=scope.agent.id
            )
        )


class AgentScope:
    """Registrations owned by one agent; ``setup(scope)`` composes through it."""

    def __init__(self, runtime: Runtime, agent: Agent) -> None:
        self._rt = runtime
        self.agent = agent
        self._disposers: list[Disposer] = []
        self.tools = _ScopedTools(self)
        self.hooks = HookScope(runtime.hooks, agent.id, self._disposers)
        self.system_prompt = _ScopedPrompt(self)

    def _keep(self, disposer: Disposer) -> Disposer:
        self._disposers.append(disposer)
        return disposer

    def undo(self) -> list[BaseException]:
        """Undo every registration, newest first; returns the failures."""
        errors: list[BaseException] = []
        while self._disposers:
            try:
                self._disposers.pop()()
            except Exception as exc:
                errors.append(exc)
        return errors


class AgentHandle:
    """What ``create`` returns: the agent and its memoized ``dispose``."""

    def __init__(self, registry: AgentRegistry, agent: Agent) -> None:
        self._registry = registry
        self.agent = agent

    async def dispose(self) -> None:
        """Tear the agent down (once; every caller awaits the same outcome)."""
        await self._registry._dispose(self.agent)


class _Lifecycle:
    __slots__ = ("agent", "published", "scope", "teardown")

    def __init__(self, agent: Agent, scope: AgentScope) -> None:
        self.agent = agent
        self.scope = scope
        self.published: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.teardown: asyncio.Future[None] | None = None


class AgentRegistry:
    """``rt.agents``: create, resume, look up and dispose agents."""

    def __init__(self, runtime: Runtime) -> None:
        self._rt = runtime
        self._live = LiveAgents()
        self._lifecycles: dict[str, _Lifecycle] = {}
        self._reserved: set[str] = set()
        self._creations: set[asyncio.Future[Any]] = set()
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
        return agent if agent is not None and agent.runtime is self._rt else None

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
        if self._rt.store is not None:
            await self._rt.store.check_absent(session_id)
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
        store = self._rt.store
        if store is None:
            raise SessionPersistenceNotFoundError(
                f"cannot resume {resume_session_id!r}: no store is configured (in-memory runtime)"
            )
        seed = await store.load(resume_session_id)
        return await self._build(
            resume_session_id, agent_options, setup, meta, parent, "resume", seed
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
    ) -> AgentHandle:
        if session_id in self._live.agents or session_id in self._reserved:
            raise RuntimeError(f"an agent for session {session_id!r} is already live")
        self._reserved.add(session_id)
        current = asyncio.current_task()
        if current is not None:
            self._creations.add(current)
        try:
            return await self._transaction(session_id, options, setup, meta, parent, source, seed)
        finally:
            self._reserved.discard(session_id)
            if current is not None:
                self._creations.discard(current)

    async def _transaction(
        self,
        session_id: str,
        options: AgentOptions,
        setup: Setup | None,
        meta: dict[str, Any] | None,
        parent: Agent | None,
        source: Literal["startup", "resume"],
        seed: Any,
    ) -> AgentHandle:
        rt = self._rt
        if parent is None:
            parent = self.current_initiator()
        sink = rt.store.open_writer(session_id) if rt.store is not None else None
        session = rt.open_session(session_id, seed, sink)
        agent = Agent(rt, session, options, parent=parent, meta=meta)
        scope = AgentScope(rt, agent)
        lifecycle = _Lifecycle(agent, scope)
        handle = AgentHandle(self, agent)
        published = False
        try:
            if setup is not None:
                commit = setup(scope)
                if inspect.isawaitable(commit):
                    commit = await self._closing.signal.race(_as_future(commit))
                if callable(commit):
                    commit()
            self._check_open()
            rt.sessions._add(session)
            self._live.add(agent)
            self._lifecycles[session_id] = lifecycle
            published = True
            agent._published = True
            agent._begin_maintenance()
            try:
                await rt.hooks.emit_awaited("agent/created", AgentPayload(agent))
            except BaseException:
                rt.hooks.emit("agent/disposed", AgentPayload(agent))
                raise
            rt.hooks.emit("agent/session-start", SessionStartPayload(agent, source))
        except BaseException as exc:
            agent._disposing = True
            agent._disposed = True
            if published:
                self._live.remove(agent)
                self._lifecycles.pop(session_id, None)
                rt.sessions._remove(session)
            errors = scope.undo()
            with contextlib.suppress(Exception):
                await session.discard()
            if not lifecycle.published.done():
                lifecycle.published.set_result(None)
            if agent._activity is not None and not agent._activity.done.done():
                agent._activity.done.set_result(None)
            if isinstance(exc, AbortedError):
                raise RuntimeError("the runtime closed during agent creation") from exc
            for error in errors:
                exc.add_note(f"undoing the scope also failed: {error!r}")
            raise
        lifecycle.published.set_result(None)
        agent._converge()
        return handle

    # --- teardown --------------------------------------------------------------------

    def _dispose(self, agent: Agent) -> Awaitable[None]:
        lifecycle = self._lifecycles.get(agent.id)
        if lifecycle is None or lifecycle.agent is not agent:
            done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            done.set_result(None)
            return done
        if lifecycle.teardown is None:
            lifecycle.teardown = asyncio.ensure_future(self._teardown(lifecycle))
        return asyncio.shield(lifecycle.teardown)

    async def _teardown(self, lifecycle: _Lifecycle) -> None:
        agent = lifecycle.agent
        errors: list[BaseException] = []
        await asyncio.shield(lifecycle.published)
        agent._disposing = True
        try:
            agent.cancel(CancelCause.disposed())
        except Exception as exc:
            errors.append(exc)
        await agent.when_idle()
        for child in self.children(agent):
            try:
                await self._dispose(child)
            except Exception as exc:
                errors.append(exc)
        errors += lifecycle.scope.undo()
        try:
            await agent.session.close()
        except Exception as exc:
            errors.append(exc)
        self._live.remove(agent)
        agent._disposed = True
        self._rt.hooks.emit("agent/disposed", AgentPayload(agent))
        self._rt.sessions._remove(agent.session)
        if self._lifecycles.get(agent.id) is lifecycle:
            del self._lifecycles[agent.id]
        if len(errors) == 1:
            raise errors[0]
        if errors:
            raise ExceptionGroup(f"disposing agent {agent.id!r} failed", errors)

    async def close(self) -> None:
        """Stop accepting work, dispose every live agent, wait for creations to settle."""
        self._closing.abort(RuntimeError("runtime closing"))
        errors: list[BaseException] = []
        results = await asyncio.gather(
            *(self._dispose(a) for a in list(self._live.agents.values())), return_exceptions=True
        )
        errors += [r for r in results if isinstance(r, BaseException)]
        pending = [t for t in self._creations if t is not asyncio.current_task()]
        if pending:
            await asyncio.wait(pending)
        if len(errors) == 1 and not isinstance(errors[0], BaseExceptionGroup):
            raise errors[0]
        if errors:
            raise ExceptionGroup("closing the runtime failed", errors)


def _validate(session_id: object, options: object) -> None:
    if not isinstance(session_id, str) or not session_id:
        raise ValueError("session_id must be a non-empty string")
    if not isinstance(options, AgentOptions):
        raise ValueError("agent_options must be an AgentOptions")
    options.validate()


async def _as_future(awaitable: Awaitable[Any]) -> Any:
    return await awaitable
