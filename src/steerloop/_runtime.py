"""The composition root: ``Runtime.open()`` wires the services together."""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Callable, Coroutine, Generator, Mapping, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any

from ._hooks import AnyHook, EmitHook, HookBus
from ._ids import Clock, IdFactory, default_clock, new_id, set_id_factory
from ._media import DEFAULT_LIMITS, AttachmentLimits
from .agent._config import start_configured_agents, validate_agent_entries
from .agent._factory import AgentRegistry, check_timeout
from .agent._handles import LOOP_HANDLES
from .agent._services import LoopLimits, LoopServices
from .llm._runtime import LlmService
from .prompt import SystemPromptService
from .session._events import SessionEvent
from .session._registry import SessionRegistry
from .session._session import EventSink, Session
from .session._store import SessionStore, open_store
from .tools._runtime import ToolPipeline, ToolRegistry

__all__ = [
    "HANDLES",
    "RUNTIME_CLOSING",
    "Runtime",
    "RuntimeClosing",
    "SessionRegistry",
]

_log = logging.getLogger("steerloop")


def _check_parallel(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"max_parallel_tool_calls must be a positive integer, not {value!r}")
    return value


@dataclass(frozen=True, slots=True)
class RuntimeClosing:
    """Payload of ``runtime/closing``: ``runtime`` is closing; it belongs to no agent."""

    runtime: Runtime

    @property
    def owner(self) -> None:
        """No agent's (``HookPayload``): only unscoped listeners receive it."""
        return None


RUNTIME_CLOSING: EmitHook[RuntimeClosing] = EmitHook("runtime/closing")
HANDLES: tuple[AnyHook, ...] = (*LOOP_HANDLES, RUNTIME_CLOSING)
"""Every hook of the runtime, one handle each: the hooks its bus knows from the start."""


class Runtime:
    """Owns the hook bus, the LLM seam, tools, prompts, sessions and agents."""

    def __init__(
        self,
        *,
        max_parallel_tool_calls: int = 10,
        persona: str = "",
        clock: Clock = default_clock,
        store: SessionStore | None = None,
        ids: IdFactory = new_id,
        attachments: AttachmentLimits = DEFAULT_LIMITS,
    ) -> None:
        self._limits = LoopLimits(_check_parallel(max_parallel_tool_calls), attachments=attachments)
        self.clock = clock
        self.store = store
        self.hooks = HookBus(HANDLES)
        self.llm = LlmService()
        self.tools = ToolRegistry()
        self.tool_pipeline = ToolPipeline(self.hooks)
        self.tool_pipeline.attachment_limits = attachments
        self.system_prompt = SystemPromptService(persona)
        # What the loop receives instead of this runtime (built once; the limits stay live).
        self.loop_services = LoopServices(
            hooks=self.hooks,
            llm=self.llm,
            tools=self.tools,
            pipeline=self.tool_pipeline,
            prompt=self.system_prompt,
            clock=clock,
            ids=ids,
            limits=self._limits,
            revisions=itertools.count(1),
        )
        self.sessions = SessionRegistry(store, clock=clock)
        self._owns_store = False
        self.agents = AgentRegistry(self.loop_services, self.sessions, store, host=self)
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
        max_attachment_bytes: int = DEFAULT_LIMITS.block_bytes,
        max_message_attachment_bytes: int = DEFAULT_LIMITS.message_bytes,
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
            max_attachment_bytes: the cap on one image or file block (10 MiB by default); a
                larger one is refused when sent (``ValueError``) and replaced by a note in a
                tool result.
            max_message_attachment_bytes: the cap on all the image and file blocks of one
                message (20 MiB by default).

        Raises:
            ValueError: an invalid option or agent entry, or a store URL this build cannot
                open.
        """
        attachments = AttachmentLimits(max_attachment_bytes, max_message_attachment_bytes)
        return _Opening(
            lambda: cls._open(
                store=store,
                max_parallel_tool_calls=max_parallel_tool_calls,
                persona=persona,
                clock=clock,
                ids=ids,
                agents=agents,
                attachments=attachments,
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
        attachments: AttachmentLimits = DEFAULT_LIMITS,
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
            ids=ids or new_id,
            attachments=attachments,
        )
        rt._owns_store = isinstance(store, str)
        if ids is not None:
            rt._restore_ids = set_id_factory(ids)
        if agents:
            try:
                await start_configured_agents(rt.agents, agents)
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

    @property
    def attachment_limits(self) -> AttachmentLimits:
        """The caps on image and file blocks: ``block_bytes`` each, ``message_bytes`` per
        message (set with ``Runtime.open(max_attachment_bytes=...,
        max_message_attachment_bytes=...)``)."""
        return self._limits.attachments

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
                await self.hooks.emit_awaited(RUNTIME_CLOSING, RuntimeClosing(self))
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
