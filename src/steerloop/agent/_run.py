"""The one-call API: ``agent.run`` and ``agent.stream``, built on the inbox.

``run(message)`` is a ``followup`` plus a wait for the turn that claims *that* message, so
it composes with everything else the inbox does: a ``steer`` sent while it waits lands in
the same turn; several ``run`` calls queue one turn each; a message removed before any turn
claims it (``cancel()`` clears the inbox, ``inbox.remove``) resolves as ``aborted`` with
``turn=None``. Everything is observed through public hooks (``agent/inbox/claimed``,
``agent/inbox/discarded``, ``session/event``, ``agent/assistant-stream``); the loop is not
touched. A turn that claims the message is answered by its own ``turn/end``; when a
blocked or error turn stops the driver with the message still queued, the run waits for the
next waking send, whose turn claims the oldest queued message first (C7.5-18a).
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, Literal, TypeVar

from ..llm._types import LlmFailure, TokenUsage
from ..messages import UserMessage, user_message
from ..session._events import AssistantMessageEvent, SessionEvent, TurnEnd, TurnOutput
from . import _handles as h
from ._decisions import (
    AgentPayload,
    ClaimedPayload,
    InboxMessagePayload,
    StreamFrame,
    StreamFramePayload,
)
from ._output import OutputController, OutputSpec, answer_text

if TYPE_CHECKING:
    from ..session._session import Session, SessionEventPayload
    from ._loop_agent import LoopAgent as Agent

__all__ = ["TurnResult", "TurnStream", "run", "stream", "sum_usage"]

T = TypeVar("T")
W = TypeVar("W", bound="_TurnWatch")
TurnKind = Literal["completed", "blocked", "aborted", "error", "max-tokens", "interrupted"]
DEFAULT_OUTPUT_RETRIES = 1
DEFAULT_STREAM_BUFFER = 1024


@dataclass(frozen=True, slots=True, kw_only=True)
class TurnResult(Generic[T]):
    """What one turn came to: its end kind, last text, usage, failure and output.

    ``start_seq``/``end_seq`` are the seqs of its ``turn/start`` and ``turn/end``. A message
    removed before any turn claimed it gives ``kind="aborted"``, ``turn=None``.
    """

    kind: TurnKind
    text: str = ""
    turn: int | None = None
    usage: TokenUsage = field(default_factory=TokenUsage)
    error: LlmFailure | None = None
    output: T | None = None
    start_seq: int | None = None
    end_seq: int | None = None

    @classmethod
    def from_session(cls, session: Session, turn: int, output_type: Any = None) -> TurnResult[Any]:
        """The result of ``turn`` read from ``session``'s log (also after resume or replay).

        ``output`` is the turn's ``turn/output`` validated as ``output_type`` (its raw JSON
        when ``output_type`` is ``None``).

        Raises:
            ValueError: the log has no closed ``turn``.
        """
        return _result_of(session.events, turn, OutputSpec(output_type) if output_type else None)


def _result_of(
    events: Sequence[SessionEvent], turn: int, spec: OutputSpec[Any] | None, *, end: int = 0
) -> TurnResult[Any]:
    """Read a closed turn back from the log; ``end`` is its ``turn/end`` seq when known."""
    if not end:
        end = next(
            (e.seq for e in reversed(events) if e.type == "turn/end" and e.data.turn == turn), 0
        )
        if not end:
            raise ValueError(f"the log has no closed turn {turn}")
    text, usages, output, start = "", [], None, end
    for index in range(end - 1, -1, -1):
        event = events[index]
        if event.type == "turn/start":
            start = event.seq
            break
        data = event.data
        if isinstance(data, AssistantMessageEvent):
            if data.usage is not None:
                usages.append(data.usage)
            if not text:
                text = answer_text(data.message)
        elif isinstance(data, TurnOutput) and output is None:
            output = data.output if spec is None else spec.from_json(data.output)
    reason = events[end - 1].data.reason
    return TurnResult(
        kind=reason.kind,
        text=text,
        turn=turn,
        usage=sum_usage(usages),
        error=reason.error,
        output=output,
        start_seq=start,
        end_seq=end,
    )


def sum_usage(usages: Sequence[TokenUsage]) -> TokenUsage:
    """Disjoint counts added up; an optional count stays ``None`` when no usage had it."""

    def total(name: str) -> int | None:
        values = [getattr(u, name) for u in usages if getattr(u, name) is not None]
        return sum(values) if values else None

    return TokenUsage(
        input_tokens=sum(u.input_tokens for u in usages),
        output_tokens=sum(u.output_tokens for u in usages),
        cache_read_tokens=total("cache_read_tokens"),
        cache_write_tokens=total("cache_write_tokens"),
        reasoning_tokens=total("reasoning_tokens"),
    )


class _TurnWatch:
    """Follows one message through the inbox to the end of the turn that claims it.

    The listeners are registered before the message is sent: on an idle agent the send
    opens the turn and claims the message synchronously.
    """

    def __init__(
        self, agent: Agent, message: UserMessage, controller: OutputController[Any] | None
    ) -> None:
        self.agent = agent
        self.message_id = message.id
        self.controller = controller
        self.turn: int | None = None
        self.future: asyncio.Future[TurnResult[Any]] = asyncio.get_running_loop().create_future()
        hooks, owner = agent.services.hooks, agent.id
        self._disposers = [
            hooks.on(h.INBOX_CLAIMED, self._claimed, owner=owner),
            hooks.on(h.INBOX_DISCARDED, self._discarded, owner=owner),
            hooks.on(h.SESSION_EVENT, self._event, owner=owner),
            hooks.on(h.AGENT_DISPOSED, self._disposed, owner=owner),
        ]

    def close(self) -> None:
        for dispose in self._disposers:
            dispose()
        self._disposers.clear()
        if self.controller is not None:
            self.controller.close()

    def _claimed(self, payload: ClaimedPayload) -> None:
        if payload.message.id == self.message_id and self.turn is None:
            self.turn = payload.turn
            if self.controller is not None:
                self.controller.turn = payload.turn
            self.on_claimed()

    def on_claimed(self) -> None:
        """Hook for ``TurnStream``."""

    def _discarded(self, payload: InboxMessagePayload) -> None:
        # ``replace`` keeping the id discards the old copy and inserts the new one.
        if (
            self.turn is None
            and payload.message.id == self.message_id
            and self.message_id not in self.agent.inbox.pending_ids()
        ):
            self._resolve(TurnResult(kind="aborted"))

    def _disposed(self, payload: AgentPayload) -> None:
        # Disposal closes every turn first; this only settles a watch nothing else settled.
        self._resolve(TurnResult(kind="aborted", turn=self.turn))

    def _event(self, payload: SessionEventPayload) -> None:
        event = payload.event
        self.on_event(event)
        data = event.data
        if self.turn is not None and isinstance(data, TurnEnd) and data.turn == self.turn:
            result = _result_of(payload.session.events, self.turn, None, end=event.seq)
            controller = self.controller
            if controller is not None:
                result = dataclasses.replace(
                    result, output=controller.value if controller.recorded else None
                )
            self._resolve(result)

    def on_event(self, event: SessionEvent) -> None:
        """Hook for ``TurnStream``."""

    def _resolve(self, result: TurnResult[Any]) -> None:
        self.close()
        if not self.future.done():
            self.future.set_result(result)
        self.on_done()

    def on_done(self) -> None:
        """Hook for ``TurnStream``."""


def _send(
    agent: Agent,
    message: str | UserMessage,
    output_type: Any,
    output_retries: int,
    make: Callable[[Agent, UserMessage, OutputController[Any] | None], W],
) -> W:
    msg = user_message(message) if isinstance(message, str) else message
    if not isinstance(msg, UserMessage):
        raise ValueError(f"run() takes a str or a UserMessage, not {type(message).__name__}")
    controller: OutputController[Any] | None = None
    if output_type is not None:
        if isinstance(output_retries, bool) or not isinstance(output_retries, int):
            raise ValueError("output_retries must be an int")
        if output_retries < 0:
            raise ValueError("output_retries must be >= 0")
        controller = OutputController(agent, OutputSpec(output_type), output_retries)
    watch = make(agent, msg, controller)
    try:
        agent.followup(msg)  # RuntimeError on a disposed (or unpublished) agent
    except BaseException:
        watch.close()
        raise
    return watch


async def run(
    agent: Agent,
    message: str | UserMessage,
    *,
    output_type: Any = None,
    output_retries: int = DEFAULT_OUTPUT_RETRIES,
) -> TurnResult[Any]:
    """Send ``message`` as a followup and wait for the turn that claims it (see the module)."""
    watch = _send(agent, message, output_type, output_retries, _TurnWatch)
    # Cancelling the awaiting task stops the wait only: the turn goes on (agent.cancel()
    # stops it), and so does the watch, which validates a structured turn's output and
    # removes its listeners once the turn has ended.
    return await asyncio.shield(watch.future)


class TurnStream(_TurnWatch):
    """An async iterator over one turn's live frames and durable events, in order.

    Yields ``StreamFrame`` (``agent/assistant-stream``) and ``SessionEvent`` items from the
    turn's ``turn/start`` to its ``turn/end`` inclusive, then stops (at once, when the message
    was removed before any turn claimed it). It never blocks the agent: the buffer holds at
    most ``max_buffer`` items, and when it is full new live frames are dropped (counted in
    ``dropped_frames``) while durable events are always kept (the session holds them in
    memory anyway). Stopping early does not cancel the turn (``agent.cancel()`` does):
    ``aclose()`` (or ``contextlib.aclosing``) stops the buffering at once; the remaining
    listeners go when the turn ends. ``await stream.result()`` gives the ``TurnResult``.
    """

    def __init__(
        self,
        agent: Agent,
        message: UserMessage,
        controller: OutputController[Any] | None,
        max_buffer: int = DEFAULT_STREAM_BUFFER,
    ) -> None:
        self.max_buffer = max_buffer
        self.dropped_frames = 0
        self._items: deque[StreamFrame | SessionEvent] = deque()
        self._pending: list[StreamFrame | SessionEvent] = []  # since the latest turn/start
        self._done = False
        self._closed = False
        self._ready = asyncio.Event()
        super().__init__(agent, message, controller)
        self._frames = agent.services.hooks.on(h.ASSISTANT_STREAM, self._frame, owner=agent.id)
        self._disposers.append(self._frames)

    def on_event(self, event: SessionEvent) -> None:
        if self._done or self._closed:
            return
        if self.turn is None:
            if event.type == "turn/start":
                self._pending = [event]
            elif self._pending:
                self._pending.append(event)
            return
        self._put(event)

    def _frame(self, payload: StreamFramePayload) -> None:
        if self._done or self._closed:
            return
        if self.turn is None:
            if self._pending:
                self._pending.append(payload.frame)
            return
        self._put(payload.frame)

    def on_claimed(self) -> None:
        pending, self._pending = self._pending, []
        for item in pending:
            self._put(item)

    def on_done(self) -> None:
        self._done = True
        self._ready.set()

    def _put(self, item: StreamFrame | SessionEvent) -> None:
        if isinstance(item, StreamFrame) and len(self._items) >= self.max_buffer:
            self.dropped_frames += 1
            return
        self._items.append(item)
        self._ready.set()

    def __aiter__(self) -> TurnStream:
        return self

    async def __anext__(self) -> StreamFrame | SessionEvent:
        while not self._items:
            if self._done or self._closed:
                raise StopAsyncIteration
            self._ready.clear()
            await self._ready.wait()
        return self._items.popleft()

    async def aclose(self) -> None:
        """Stop yielding and drop what is buffered; the turn goes on, ``result()`` still
        resolves when it ends."""
        self._closed = True
        self._frames()
        self._items.clear()
        self._pending.clear()
        self._ready.set()

    async def result(self) -> TurnResult[Any]:
        """The turn's result, once its ``turn/end`` is written (also after ``aclose()``)."""
        return await asyncio.shield(self.future)


def stream(
    agent: Agent,
    message: str | UserMessage,
    *,
    output_type: Any = None,
    output_retries: int = DEFAULT_OUTPUT_RETRIES,
    max_buffer: int = DEFAULT_STREAM_BUFFER,
) -> TurnStream:
    """Send ``message`` as a followup and stream the turn that claims it (``TurnStream``)."""
    if isinstance(max_buffer, bool) or not isinstance(max_buffer, int) or max_buffer < 1:
        raise ValueError("max_buffer must be a positive int")

    def make(
        agent: Agent, msg: UserMessage, controller: OutputController[Any] | None
    ) -> TurnStream:
        return TurnStream(agent, msg, controller, max_buffer)

    return _send(agent, message, output_type, output_retries, make)
