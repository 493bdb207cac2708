"""The composition root: ``Runtime.open()`` wires the services together."""

from __future__ import annotations

from types import TracebackType
from typing import Any

from ._hooks import HookBus
from ._ids import Clock, IdFactory, default_clock, set_id_factory
from .agent._factory import AgentRegistry
from .llm._runtime import LlmService
from .prompt import SystemPromptService
from .session._events import SessionEvent
from .session._session import EventSink, Session
from .tools._runtime import ToolPipeline, ToolRegistry

__all__ = ["Runtime", "SessionRegistry"]


class SessionRegistry:
    """``rt.sessions``: live sessions, and the store behind them (``persistence``)."""

    def __init__(self, persistence: Any = None) -> None:
        self._live: dict[str, Session] = {}
        self.persistence = persistence

    def get(self, session_id: str) -> Session | None:
        return self._live.get(session_id)

    def list(self) -> tuple[Session, ...]:
        return tuple(self._live.values())

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
        store: Any = None,
    ) -> None:
        self._max_parallel = _check_parallel(max_parallel_tool_calls)
        self.clock = clock
        self.store = store
        self.hooks = HookBus()
        self.llm = LlmService()
        self.tools = ToolRegistry()
        self.tool_pipeline = ToolPipeline(self.hooks)
        self.system_prompt = SystemPromptService(persona)
        self.sessions = SessionRegistry(store)
        self.agents = AgentRegistry(self)
        self._closed = False
        self._restore_ids: Any = None

    @classmethod
    async def open(
        cls,
        *,
        store: str | None = None,
        max_parallel_tool_calls: int = 10,
        persona: str = "",
        clock: Clock | None = None,
        ids: IdFactory | None = None,
    ) -> Runtime:
        """Open a runtime.

        Args:
            store: ``None`` for in-memory sessions (no persistence).
            max_parallel_tool_calls: bound of the rolling tool pool (1 = serial).
            persona: the first part of every system prompt.
            clock: epoch-ms clock for event times (inject for reproducible logs).
            ids: id factory ``prefix -> id`` installed process-wide (e.g. ``counting_ids()``).

        Raises:
            ValueError: an invalid option, or a store URL this build cannot open.
        """
        _check_parallel(max_parallel_tool_calls)
        if store is not None:
            raise ValueError(
                f"cannot open store {store!r}: only the in-memory runtime (store=None) is "
                "available in this build"
            )
        rt = cls(
            max_parallel_tool_calls=max_parallel_tool_calls,
            persona=persona,
            clock=clock or default_clock,
        )
        if ids is not None:
            rt._restore_ids = set_id_factory(ids)
        return rt

    @property
    def max_parallel_tool_calls(self) -> int:
        return self._max_parallel

    @max_parallel_tool_calls.setter
    def max_parallel_tool_calls(self, value: int) -> None:
        self._max_parallel = _check_parallel(value)

    def open_session(
        self, session_id: str, seed: tuple[SessionEvent, ...] = (), sink: EventSink | None = None
    ) -> Session:
        return Session(session_id, hooks=self.hooks, clock=self.clock, seed=seed, sink=sink)

    async def close(self) -> None:
        """Dispose every live agent and close the store; idempotent."""
        if self._closed:
            return
        self._closed = True
        try:
            await self.agents.close()
        finally:
            await self.hooks.drain()
            if self._restore_ids is not None:
                self._restore_ids()

    async def __aenter__(self) -> Runtime:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()
