"""Durable event types: the envelope and one frozen payload record per type."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, TypeAlias

from .._cancel import CancelCause
from ..llm._types import LlmFailure, TokenUsage
from ..llm.chunks import StreamChunk, chunk_to_json
from ..messages import (
    AssistantMessage,
    Message,
    SystemMessage,
    ToolResultMessage,
    UserMessage,
    message_to_json,
)

__all__ = [
    "SURFACE_TYPES",
    "AssistantAttempt",
    "AssistantMessageEvent",
    "InboxSpliced",
    "Replace",
    "RequestContext",
    "RequestHeader",
    "SessionEndSeed",
    "SessionEvent",
    "StepBoundary",
    "StreamRecord",
    "SurfaceOp",
    "SystemMessageEvent",
    "ToolCallEvent",
    "ToolErrorInfo",
    "ToolResultEvent",
    "TurnEnd",
    "TurnEndReason",
    "TurnStart",
    "encode",
]

SURFACE_TYPES = frozenset({"system/message", "user/message", "assistant/message", "tool/result"})
InboxTarget = Literal["next-turn", "next-step"]


@dataclass(frozen=True, slots=True)
class Replace:
    """Surface op substituting the contiguous surface range ``start_seq..end_seq``."""

    start_seq: int
    end_seq: int


SurfaceOp: TypeAlias = Literal["append"] | Replace


@dataclass(frozen=True, slots=True, kw_only=True)
class TurnStart:
    turn: int


@dataclass(frozen=True, slots=True, kw_only=True)
class TurnEndReason:
    """``completed``, ``blocked``, ``aborted{reason}``, ``error{error}``, ``max-tokens``,
    ``interrupted``."""

    kind: Literal["completed", "blocked", "aborted", "error", "max-tokens", "interrupted"]
    reason: CancelCause | None = None
    error: LlmFailure | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class TurnEnd:
    turn: int
    reason: TurnEndReason


@dataclass(frozen=True, slots=True, kw_only=True)
class StepBoundary:
    """Payload of ``step/start`` and ``step/end``."""

    turn: int
    step: int


@dataclass(frozen=True, slots=True, kw_only=True)
class SystemMessageEvent:
    turn: int
    step: int
    message: SystemMessage


@dataclass(frozen=True, slots=True)
class StreamRecord:
    """One received chunk and the epoch-ms time it arrived."""

    time: int
    chunk: StreamChunk

    def to_json(self) -> dict[str, Any]:
        return {"time": self.time, "chunk": chunk_to_json(self.chunk)}


@dataclass(frozen=True, slots=True, kw_only=True)
class AssistantMessageEvent:
    turn: int
    step: int
    message: AssistantMessage
    stream: tuple[StreamRecord, ...]
    usage: TokenUsage | None = None
    interrupted: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class AssistantAttempt:
    turn: int
    step: int
    stream: tuple[StreamRecord, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolCallEvent:
    turn: int
    step: int
    call_id: str
    name: str
    arguments: str


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolErrorInfo:
    code: str
    name: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolResultEvent:
    turn: int
    step: int
    message: ToolResultMessage
    error: ToolErrorInfo | None = None
    meta: Any = None


@dataclass(frozen=True, slots=True, kw_only=True)
class InboxSpliced:
    target: InboxTarget
    start: int
    removed_count: int = 0
    inserted: tuple[UserMessage, ...] = ()
    outcome: Literal["canceled"] | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class RequestHeader:
    header: Mapping[str, Any]
    reason: Literal["initial", "resume", "change", "series"]
    starts_series: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class RequestContext:
    provider: str
    model: str
    context_window: int | None = None
    system_prompt_update: Literal["in-history"] | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class SessionEndSeed:
    inherited: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class SessionEvent:
    """One entry of the append-only log."""

    seq: int
    time: int
    type: str
    data: Any
    ignorable: bool = False
    surface_op: SurfaceOp | None = None
    source_event_seqs: tuple[int, ...] | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "seq": self.seq,
            "time": self.time,
            "type": self.type,
            "data": encode(self.data),
        }
        if self.ignorable:
            out["ignorable"] = True
        if self.surface_op is not None:
            op = self.surface_op
            out["surface_op"] = (
                op if isinstance(op, str) else {"start_seq": op.start_seq, "end_seq": op.end_seq}
            )
        if self.source_event_seqs is not None:
            out["source_event_seqs"] = list(self.source_event_seqs)
        return out


def surface_message(event: SessionEvent) -> Message | None:
    """The message a surface event projects to (``None`` when dormant/empty)."""
    data = event.data
    if isinstance(data, UserMessage):
        return data
    if isinstance(data, SystemMessageEvent | AssistantMessageEvent):
        return data.message if data.message.content else None
    if isinstance(data, ToolResultEvent):
        return data.message
    return None


def encode(value: Any) -> Any:
    """The lossless JSON form of a payload value."""
    if value is None or isinstance(value, str | int | float | bool):
        return value
    if isinstance(value, UserMessage | SystemMessage | AssistantMessage | ToolResultMessage):
        return message_to_json(value)
    to_json = getattr(type(value), "to_json", None)
    if to_json is not None:
        return to_json(value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        out = {}
        for f in dataclasses.fields(value):
            item = getattr(value, f.name)
            if item is not None:
                out[f.name] = encode(item)
        return out
    if isinstance(value, list | tuple):
        return [encode(v) for v in value]
    if isinstance(value, Mapping):
        return {str(k): encode(v) for k, v in value.items()}
    raise ValueError(f"{type(value).__name__} has no JSON form")
