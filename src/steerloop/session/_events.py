"""Durable event types: the envelope and one frozen payload record per type.

Plain frozen dataclasses: the faster ``__init__``s and the per-class encoders are the
codec's business (``_codec`` and ``_encode``), not these declarations'.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Literal, TypeAlias

from .._cancel import CancelCause
from .._model import LlmFailure, StreamChunk, TokenUsage, chunk_to_json
from ..messages import (
    AssistantMessage,
    Block,
    Message,
    MessageSource,
    SystemMessage,
    ToolResultMessage,
    UserMessage,
)
from ._encode import encode
from ._input_events import (
    InputAnswered,
    InputRequest,
    MCPResourceUpdated,
    MCPSampled,
    MCPTaskCreated,
)

__all__ = [
    "COMPACTION_PLUGIN",
    "RECORD_TYPES",
    "SURFACE_TYPES",
    "ApprovalDecided",
    "ApprovalRequested",
    "AssistantAttempt",
    "AssistantMessageEvent",
    "ContextCompacted",
    "EventRecord",
    "InboxSpliced",
    "Replace",
    "RequestContext",
    "RequestHeader",
    "SessionEndSeed",
    "SessionEvent",
    "StateChanged",
    "StepBoundary",
    "StepEnd",
    "StepStart",
    "StreamRecord",
    "SurfaceOp",
    "SystemMessageEvent",
    "ToolCallEvent",
    "ToolDeferred",
    "ToolErrorInfo",
    "ToolResultEvent",
    "TurnEnd",
    "TurnEndReason",
    "TurnOutput",
    "TurnStart",
    "compaction_message",
    "compaction_op_ok",
    "encode",
]

SURFACE_TYPES = frozenset(
    {"system/message", "user/message", "assistant/message", "tool/result", "context/compacted"}
)
#: ``source.plugin`` of the summary message a ``context/compacted`` node projects to.
COMPACTION_PLUGIN = "compaction"
InboxTarget = Literal["next-turn", "next-step"]


@dataclass(frozen=True, slots=True)
class Replace:
    """Surface op substituting the contiguous surface range ``start_seq..end_seq``."""

    start_seq: int
    end_seq: int


SurfaceOp: TypeAlias = Literal["append"] | Replace


@dataclass(frozen=True, slots=True, kw_only=True)
class TurnStart:
    TYPE: ClassVar[Literal["turn/start"]] = "turn/start"

    turn: int


@dataclass(frozen=True, slots=True, kw_only=True)
class TurnEndReason:
    """``completed``, ``blocked``, ``aborted{reason}``, ``error{error}``, ``max-tokens``,
    ``interrupted``."""

    kind: Literal["completed", "blocked", "aborted", "error", "max-tokens", "interrupted"]
    reason: CancelCause | None = None
    error: LlmFailure | None = None
    detail: str | None = None  # ``blocked``: the pre-step reject's reason (a limit's name)


@dataclass(frozen=True, slots=True, kw_only=True)
class TurnEnd:
    TYPE: ClassVar[Literal["turn/end"]] = "turn/end"

    turn: int
    reason: TurnEndReason


@dataclass(frozen=True, slots=True, kw_only=True)
class TurnOutput:
    """Payload of ``turn/output`` (log-only, ignorable): a turn's validated structured output.

    ``output`` is the value's JSON form; ``message_seq`` is the ``assistant/message`` it was
    read from (its text, or its ``final_result`` tool call).
    """

    TYPE: ClassVar[Literal["turn/output"]] = "turn/output"

    turn: int
    message_seq: int
    output: Any = None


@dataclass(frozen=True, slots=True, kw_only=True)
class StepBoundary:
    """The fields of ``step/start`` and ``step/end`` (each has its own record below)."""

    turn: int
    step: int


@dataclass(frozen=True, slots=True, kw_only=True)
class StepStart(StepBoundary):
    TYPE: ClassVar[Literal["step/start"]] = "step/start"


@dataclass(frozen=True, slots=True, kw_only=True)
class StepEnd(StepBoundary):
    TYPE: ClassVar[Literal["step/end"]] = "step/end"


@dataclass(frozen=True, slots=True, kw_only=True)
class SystemMessageEvent:
    TYPE: ClassVar[Literal["system/message"]] = "system/message"

    turn: int
    step: int
    message: SystemMessage


# The chunk decoder of lazy records. The codec installs it at import (``install_chunk_decoder``)
# so that this module, below the codec, never imports it; only the codec makes lazy records.
_decode_chunk: list[Callable[[Any], StreamChunk]] = []


def install_chunk_decoder(decode: Callable[[Any], StreamChunk]) -> None:
    """Set how a lazy ``StreamRecord`` decodes its stored chunk (called once by the codec)."""
    _decode_chunk[:] = [decode]


class StreamRecord:
    """One received chunk and the epoch-ms time it arrived.

    A record loaded from a store keeps its chunk's JSON and decodes it on first access:
    streams are log-only and are most of a log's bytes, so resume does not pay for them.
    The loader has already checked each record's shape and chunk kind.
    """

    __slots__ = ("_chunk", "_raw", "_time")
    _time: int
    _chunk: StreamChunk | None
    _raw: dict[str, Any] | None

    def __init__(self, time: int, chunk: StreamChunk) -> None:
        _set(self, "_time", time)
        _set(self, "_chunk", chunk)
        _set(self, "_raw", None)

    @classmethod
    def lazy(cls, time: int, raw: dict[str, Any]) -> StreamRecord:
        """A record whose chunk is decoded from ``raw`` when first read."""
        record = object.__new__(cls)
        _set(record, "_time", time)
        _set(record, "_chunk", None)
        _set(record, "_raw", raw)
        return record

    @property
    def time(self) -> int:
        return self._time

    @property
    def chunk(self) -> StreamChunk:
        chunk = self._chunk
        if chunk is None:
            chunk = _decode_chunk[0](self._raw)
            _set(self, "_chunk", chunk)
            _set(self, "_raw", None)
        return chunk

    def to_json(self) -> dict[str, Any]:
        raw = self._raw
        return {"time": self.time, "chunk": raw if raw is not None else chunk_to_json(self.chunk)}

    def __setattr__(self, name: str, value: Any) -> None:
        raise dataclasses.FrozenInstanceError(f"cannot assign to field {name!r}")

    def __delattr__(self, name: str) -> None:
        raise dataclasses.FrozenInstanceError(f"cannot delete field {name!r}")

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, StreamRecord):
            return NotImplemented
        return self.time == other.time and self.chunk == other.chunk

    def __hash__(self) -> int:
        return hash((self.time, self.chunk))

    def __repr__(self) -> str:
        return f"StreamRecord(time={self.time!r}, chunk={self.chunk!r})"

    def __reduce__(self) -> tuple[Any, ...]:
        return (StreamRecord, (self.time, self.chunk))


_set = object.__setattr__


@dataclass(frozen=True, slots=True, kw_only=True)
class AssistantMessageEvent:
    TYPE: ClassVar[Literal["assistant/message"]] = "assistant/message"

    turn: int
    step: int
    message: AssistantMessage
    stream: tuple[StreamRecord, ...]
    usage: TokenUsage | None = None
    interrupted: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class AssistantAttempt:
    TYPE: ClassVar[Literal["assistant/attempt"]] = "assistant/attempt"

    turn: int
    step: int
    stream: tuple[StreamRecord, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolCallEvent:
    TYPE: ClassVar[Literal["tool/call"]] = "tool/call"

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
    TYPE: ClassVar[Literal["tool/result"]] = "tool/result"

    turn: int
    step: int
    message: ToolResultMessage
    error: ToolErrorInfo | None = None
    meta: Any = None
    reconciled: bool | None = None
    """``True`` on a result a tool's ``reconcile`` supplied at recovery for a call whose
    outcome was unknown (left out otherwise)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ApprovalRequested:
    """Payload of ``tool/approval-requested``: a pre-execute policy asked a person about a
    call (written after the call's ``tool/call``; log-only)."""

    TYPE: ClassVar[Literal["tool/approval-requested"]] = "tool/approval-requested"

    turn: int
    step: int
    call_id: str
    name: str
    arguments: str
    reason: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ApprovalDecided:
    """Payload of ``tool/approval-decided``: the one answer to a pending request
    (``by`` says who answered; log-only)."""

    TYPE: ClassVar[Literal["tool/approval-decided"]] = "tool/approval-decided"

    call_id: str
    decision: Literal["allow", "deny"]
    reason: str | None = None
    by: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolDeferred:
    """Payload of ``tool/deferred``: a started call waits for its result from outside the
    process (a client tool: the AG-UI client runs it); written after the call's
    ``tool/call``, before its ``tool/result`` (log-only)."""

    TYPE: ClassVar[Literal["tool/deferred"]] = "tool/deferred"

    turn: int
    step: int
    call_id: str
    name: str
    arguments: str


@dataclass(frozen=True, slots=True, kw_only=True)
class StateChanged:
    """Payload of ``state/changed``: an RFC 6902 patch of the session's shared state
    document (a JSON object, ``{}`` before the first change; log-only)."""

    TYPE: ClassVar[Literal["state/changed"]] = "state/changed"

    patch: tuple[Mapping[str, Any], ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class InboxSpliced:
    TYPE: ClassVar[Literal["agent/inbox/spliced"]] = "agent/inbox/spliced"

    target: InboxTarget
    start: int
    removed_count: int = 0
    inserted: tuple[UserMessage, ...] = ()
    outcome: Literal["canceled"] | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class RequestHeader:
    TYPE: ClassVar[Literal["request/header"]] = "request/header"

    header: Mapping[str, Any]
    reason: Literal["initial", "resume", "change", "series"]
    starts_series: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class RequestContext:
    TYPE: ClassVar[Literal["request/context"]] = "request/context"

    provider: str
    model: str
    context_window: int | None = None
    system_prompt_update: Literal["in-history"] | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ContextCompacted:
    """Payload of ``context/compacted``: the surface up to ``upto_seq`` became ``summary``.

    The event is a surface ``Replace`` whose range ends at ``upto_seq``; it projects to one
    user message (source kind ``plugin``, plugin ``compaction``). ``usage`` is the summary
    request's (strategy ``summarize``), which is not itself a session event.
    """

    TYPE: ClassVar[Literal["context/compacted"]] = "context/compacted"

    upto_seq: int
    summary: tuple[Block, ...]
    strategy: str
    tokens_before: int | None = None
    tokens_after: int | None = None
    usage: TokenUsage | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class SessionEndSeed:
    TYPE: ClassVar[Literal["session/end-seed"]] = "session/end-seed"

    inherited: bool = False


EventRecord: TypeAlias = (
    TurnStart
    | TurnEnd
    | TurnOutput
    | StepStart
    | StepEnd
    | UserMessage
    | SystemMessageEvent
    | AssistantMessageEvent
    | AssistantAttempt
    | ToolCallEvent
    | ToolResultEvent
    | InboxSpliced
    | RequestHeader
    | RequestContext
    | SessionEndSeed
    | ContextCompacted
    | ApprovalRequested
    | ApprovalDecided
    | InputRequest
    | InputAnswered
    | MCPTaskCreated
    | MCPResourceUpdated
    | MCPSampled
    | ToolDeferred
    | StateChanged
)
"""The payload record of a durable event type; each names its type in ``TYPE``."""

RECORD_TYPES: tuple[type[EventRecord], ...] = (
    TurnStart,
    TurnEnd,
    TurnOutput,
    StepStart,
    StepEnd,
    UserMessage,
    SystemMessageEvent,
    AssistantMessageEvent,
    AssistantAttempt,
    ToolCallEvent,
    ToolResultEvent,
    InboxSpliced,
    RequestHeader,
    RequestContext,
    SessionEndSeed,
    ContextCompacted,
    ApprovalRequested,
    ApprovalDecided,
    InputRequest,
    InputAnswered,
    MCPTaskCreated,
    MCPResourceUpdated,
    MCPSampled,
    ToolDeferred,
    StateChanged,
)


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
    if isinstance(data, ContextCompacted):
        return compaction_message(event.seq, data)
    return None


def compaction_op_ok(data: Any, op: SurfaceOp | None) -> bool:
    """A ``context/compacted`` is a ``Replace`` ending at its ``upto_seq``."""
    return (
        isinstance(data, ContextCompacted)
        and isinstance(op, Replace)
        and op.end_seq == data.upto_seq
    )


_COMPACTION_SOURCE = MessageSource(kind="plugin", plugin=COMPACTION_PLUGIN)


def compaction_message(seq: int, data: ContextCompacted) -> UserMessage:
    """The summary message of the ``context/compacted`` at ``seq`` (its id follows the seq,
    so equal logs derive equal messages)."""
    return UserMessage(id=f"compaction-{seq}", content=data.summary, source=_COMPACTION_SOURCE)
