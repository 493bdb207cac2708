"""The tool calls a connection has on their way, and the time each may still take.

A server's own requests during a call (``elicitation/create``, ``sampling/createMessage``)
belong to one of our calls: the one whose task the request names, the one whose task is
running the request (the 2026-07-28 input rounds dispatch in the caller's task, which sets
``_current``), or the only call in flight. A request that cannot be attributed to one call
is refused: asking a person of another session would leak one conversation into another.

A call's ``Deadline`` is its tool timeout, standing still while a person is asked.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

from .. import AbortController, AbortSignal
from ..tools import ToolExec

__all__ = ["RELATED_TASK", "CallContext", "Deadline", "InFlight"]

RELATED_TASK = "io.modelcontextprotocol/related-task"

_current: ContextVar[CallContext | None] = ContextVar("steerloop_mcp_call", default=None)


class Deadline:
    """Aborts ``controller`` after ``seconds`` of running time; ``paused()`` stops the clock."""

    def __init__(self, seconds: float, controller: AbortController, what: str) -> None:
        self.seconds = seconds
        self.expired = False
        self._controller = controller
        self._what = what
        self._remaining = seconds
        self._pauses = 0
        self._loop = asyncio.get_running_loop()
        self._started = self._loop.time()
        self._timer: asyncio.TimerHandle | None = self._loop.call_later(seconds, self._expire)

    def _expire(self) -> None:
        self.expired = True
        self._timer = None
        self._controller.abort(TimeoutError(f"{self._what} timed out after {self.seconds}s"))

    @contextmanager
    def paused(self) -> Iterator[None]:
        """The clock stands still inside (a person is being asked)."""
        if self._pauses == 0 and self._timer is not None:
            self._timer.cancel()
            self._timer = None
            self._remaining -= self._loop.time() - self._started
        self._pauses += 1
        try:
            yield
        finally:
            self._pauses -= 1
            if self._pauses == 0 and not self.expired and not self._controller.signal.aborted:
                self._started = self._loop.time()
                self._timer = self._loop.call_later(max(self._remaining, 0.0), self._expire)

    def cancel(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None


@dataclass(eq=False, slots=True, kw_only=True)
class CallContext:
    """One tool call on its way to a server."""

    exec: ToolExec
    signal: AbortSignal  # the call's own: the turn's, and the deadline's
    deadline: Deadline
    task_id: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)


class InFlight:
    """The calls of one connection that are on their way."""

    def __init__(self) -> None:
        self._calls: list[CallContext] = []

    @contextmanager
    def running(self, call: CallContext) -> Iterator[None]:
        """``call`` is in flight inside (and current in this task and its children)."""
        self._calls.append(call)
        token = _current.set(call)
        try:
            yield
        finally:
            _current.reset(token)
            self._calls.remove(call)

    def attribute(self, meta: Mapping[str, Any] | None) -> tuple[CallContext | None, str]:
        """The call a server's request belongs to, or ``None`` and why not."""
        current = _current.get()
        if current is not None and current in self._calls:
            return current, ""
        related = meta.get(RELATED_TASK) if meta else None
        task_id = related.get("taskId") if isinstance(related, Mapping) else None
        if isinstance(task_id, str):
            for call in self._calls:
                if call.task_id == task_id:
                    return call, ""
            return None, f"it names task {task_id!r}, which no call of ours is waiting for"
        if len(self._calls) == 1:
            return self._calls[0], ""
        if not self._calls:
            return None, "no tool call of ours is in flight"
        return None, f"{len(self._calls)} tool calls are in flight and it names none of them"
