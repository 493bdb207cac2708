"""Settlement of one attempt: the event that ends it, its live frames, its typed outcome.

An attempt ends in exactly one settling event — ``assistant/message`` (possibly
``interrupted``) or ``assistant/attempt`` — and one outcome: ``Settled`` (a message, with
the tool calls to run), ``Retry`` (a request-error listener asked for another attempt) or
``Aborted`` (the turn's signal fired; the step raises ``AbortedError``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from .._media import MODALITIES
from ..llm._assembler import BlockAssembler
from ..llm._runtime import PreparedCall
from ..llm._types import LlmFailure
from ..messages import AssistantMessage, MessageSource, ToolCallBlock
from ..session._events import AssistantAttempt, AssistantMessageEvent, StreamRecord
from ._decisions import StreamFrame, StreamFramePayload
from ._handles import ASSISTANT_STREAM

if TYPE_CHECKING:
    from ..session._session import Session
    from ._loop_agent import LoopAgent as Agent

__all__ = [
    "Aborted",
    "AttemptOutcome",
    "LiveFrames",
    "Retry",
    "Settled",
    "failure_of_finish",
    "settle_aborted",
    "settle_failed",
    "settle_message",
]


@dataclass(frozen=True, slots=True)
class Settled:
    """The attempt settled as an ``assistant/message``; ``calls`` are the tools to run."""

    kind: Literal["completed", "max-tokens"]
    calls: tuple[ToolCallBlock, ...] = ()
    input_modalities: frozenset[str] = MODALITIES
    """What the model that asked for ``calls`` accepts (their results are fitted to it)."""


@dataclass(frozen=True, slots=True)
class Retry:
    """A ``agent/request-error`` listener asked for another attempt of the step."""


@dataclass(frozen=True, slots=True)
class Aborted:
    """The turn's signal fired during the attempt; what streamed is settled."""


AttemptOutcome = Settled | Retry | Aborted


class LiveFrames:
    """Emits ``agent/assistant-stream`` frames; a no-op without listeners."""

    __slots__ = ("agent", "attempt_id", "hooks", "ids", "index", "on", "revisions")

    def __init__(self, agent: Agent) -> None:
        self.agent = agent
        self.hooks = agent.services.hooks
        self.revisions = agent.services.revisions
        self.ids = agent.services.ids
        self.attempt_id = self.ids("att")
        self.on = self.hooks.has(ASSISTANT_STREAM)
        self.index = 0

    def _emit(self, frame: StreamFrame) -> None:
        self.hooks.emit(ASSISTANT_STREAM, StreamFramePayload(self.agent, frame))

    def start(self, turn: int, step: int) -> None:
        if self.on:
            self._emit(
                StreamFrame(
                    kind="start",
                    attempt_id=self.attempt_id,
                    revision=next(self.revisions),
                    turn=turn,
                    step=step,
                )
            )

    def chunk(self, record: StreamRecord) -> None:
        if self.on:
            self._emit(
                StreamFrame(
                    kind="chunk",
                    attempt_id=self.attempt_id,
                    revision=next(self.revisions),
                    index=self.index,
                    time=record.time,
                    chunk=record.chunk,
                )
            )
        self.index += 1

    def end(self, event_type: str | None, seq: int | None) -> None:
        if self.on:
            outcome: dict[str, Any] = (
                {"kind": "committed", "event_type": event_type, "seq": seq}
                if seq is not None
                else {"kind": "abandoned"}
            )
            self._emit(
                StreamFrame(
                    kind="end",
                    attempt_id=self.attempt_id,
                    revision=next(self.revisions),
                    index=self.index,
                    outcome=outcome,
                )
            )


def _settle(
    session: Session, live: LiveFrames, type: str, data: Any, *, surface: bool = False
) -> None:
    """Append the settling event of an attempt and close its live frames."""
    try:
        event = session.append(type, data, surface_op="append" if surface else None)
    except BaseException:
        live.end(None, None)
        raise
    live.end(event.type, event.seq)


def _assistant(
    blocks: tuple[Any, ...], assembler: BlockAssembler, prepared: PreparedCall, live: LiveFrames
) -> AssistantMessage:
    return AssistantMessage(
        id=live.ids("msg"),
        content=blocks,
        source=MessageSource(
            kind="model",
            provider=prepared.provider,
            model=prepared.model,
            replay_state=assembler.replay_state,
        ),
    )


def settle_message(
    session: Session,
    turn: int,
    step: int,
    prepared: PreparedCall,
    live: LiveFrames,
    assembler: BlockAssembler,
    records: list[StreamRecord],
) -> Settled:
    """A finished stream: ``assistant/message`` (max-tokens drops its partial tool calls)."""
    kind = assembler.reason.kind
    blocks = assembler.blocks()
    if kind == "max-tokens":
        blocks = tuple(b for b in blocks if not isinstance(b, ToolCallBlock))
    message = _assistant(blocks, assembler, prepared, live)
    _settle(
        session,
        live,
        "assistant/message",
        AssistantMessageEvent(
            turn=turn, step=step, message=message, stream=tuple(records), usage=assembler.usage
        ),
        surface=True,
    )
    if kind == "max-tokens":
        return Settled("max-tokens")
    return Settled("completed", message.tool_calls, prepared.input_modalities)


def settle_aborted(
    session: Session,
    turn: int,
    step: int,
    prepared: PreparedCall,
    live: LiveFrames,
    assembler: BlockAssembler,
    records: list[StreamRecord],
) -> Aborted:
    """An aborted stream: its safe prefix as an interrupted message, else an attempt."""
    prefix = assembler.safe_prefix()
    if prefix:
        _settle(
            session,
            live,
            "assistant/message",
            AssistantMessageEvent(
                turn=turn,
                step=step,
                message=_assistant(prefix, assembler, prepared, live),
                stream=tuple(records),
                usage=assembler.usage,
                interrupted=True,
            ),
            surface=True,
        )
    else:
        _settle(
            session,
            live,
            "assistant/attempt",
            AssistantAttempt(turn=turn, step=step, stream=tuple(records)),
        )
    return Aborted()


def settle_failed(
    session: Session,
    turn: int,
    step: int,
    live: LiveFrames,
    records: list[StreamRecord],
    original: Exception,
) -> None:
    """Settle a failed stream as ``assistant/attempt`` (C7.7-12 when that fails too)."""
    try:
        _settle(
            session,
            live,
            "assistant/attempt",
            AssistantAttempt(turn=turn, step=step, stream=tuple(records)),
        )
    except Exception as append_exc:
        raise ExceptionGroup("settling the failed attempt failed", [original, append_exc]) from None


def failure_of_finish(failure: LlmFailure | None, kind: str) -> LlmFailure:
    """The failure of a stream that finished ``error`` or ``aborted``."""
    if failure is not None:
        return failure
    return LlmFailure(
        message=f"the provider ended the stream with {kind}",
        code="ABORTED" if kind == "aborted" else "UNKNOWN",
    )
