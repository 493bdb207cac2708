"""Durable event types: the envelope and one frozen payload record per type."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, TypeAlias

from .._cancel import CancelCause
from .._records import fast_init
from ..llm._types import LlmFailure, TokenUsage
from ..llm.chunks import StreamChunk, chunk_to_json
from ..messages import (
    AssistantMessage,
    Block,
    Message,
    MessageSource,
    SystemMessage,
    ToolResultMessage,
    UserMessage,
    message_to_json,
)

__all__ = [
    "COMPACTION_PLUGIN",
    "SURFACE_TYPES",
    "AssistantAttempt",
    "AssistantMessageEvent",
    "ContextCompacted",
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


@fast_init
@dataclass(frozen=True, slots=True)
class Replace:
    """Surface op substituting the contiguous surface range ``start_seq..end_seq``."""

    start_seq: int
    end_seq: int


SurfaceOp: TypeAlias = Literal["append"] | Replace


@fast_init
@dataclass(frozen=True, slots=True, kw_only=True)
class TurnStart:
    turn: int


@fast_init
@dataclass(frozen=True, slots=True, kw_only=True)
class TurnEndReason:
    """``completed``, ``blocked``, ``aborted{reason}``, ``error{error}``, ``max-tokens``,
    ``interrupted``."""

    kind: Literal["completed", "blocked", "aborted", "error", "max-tokens", "interrupted"]
    reason: CancelCause | None = None
    error: LlmFailure | None = None
    detail: str | None = None  # ``blocked``: the pre-step reject's reason (a limit's name)


@fast_init
@dataclass(frozen=True, slots=True, kw_only=True)
class TurnEnd:
    turn: int
    reason: TurnEndReason


@fast_init
@dataclass(frozen=True, slots=True, kw_only=True)
class StepBoundary:
    """Payload of ``step/start`` and ``step/end``."""

    turn: int
    step: int


@fast_init
@dataclass(frozen=True, slots=True, kw_only=True)
class SystemMessageEvent:
    turn: int
    step: int
    message: SystemMessage


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
            from ._codec import chunk_from_json

            chunk = chunk_from_json(self._raw)
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


@fast_init
@dataclass(frozen=True, slots=True, kw_only=True)
class AssistantMessageEvent:
    turn: int
    step: int
    message: AssistantMessage
    stream: tuple[StreamRecord, ...]
    usage: TokenUsage | None = None
    interrupted: bool = False


@fast_init
@dataclass(frozen=True, slots=True, kw_only=True)
class AssistantAttempt:
    turn: int
    step: int
    stream: tuple[StreamRecord, ...]


@fast_init
@dataclass(frozen=True, slots=True, kw_only=True)
class ToolCallEvent:
    turn: int
    step: int
    call_id: str
    name: str
    arguments: str


@fast_init
@dataclass(frozen=True, slots=True, kw_only=True)
class ToolErrorInfo:
    code: str
    name: str | None = None


@fast_init
@dataclass(frozen=True, slots=True, kw_only=True)
class ToolResultEvent:
    turn: int
    step: int
    message: ToolResultMessage
    error: ToolErrorInfo | None = None
    meta: Any = None


@fast_init
@dataclass(frozen=True, slots=True, kw_only=True)
class InboxSpliced:
    target: InboxTarget
    start: int
    removed_count: int = 0
    inserted: tuple[UserMessage, ...] = ()
    outcome: Literal["canceled"] | None = None


@fast_init
@dataclass(frozen=True, slots=True, kw_only=True)
class RequestHeader:
    header: Mapping[str, Any]
    reason: Literal["initial", "resume", "change", "series"]
    starts_series: bool = False


@fast_init
@dataclass(frozen=True, slots=True, kw_only=True)
class RequestContext:
    provider: str
    model: str
    context_window: int | None = None
    system_prompt_update: Literal["in-history"] | None = None


@fast_init
@dataclass(frozen=True, slots=True, kw_only=True)
class ContextCompacted:
    """Payload of ``context/compacted``: the surface up to ``upto_seq`` became ``summary``.

    The event is a surface ``Replace`` whose range ends at ``upto_seq``; it projects to one
    user message (source kind ``plugin``, plugin ``compaction``). ``usage`` is the summary
    request's (strategy ``summarize``), which is not itself a session event.
    """

    upto_seq: int
    summary: tuple[Block, ...]
    strategy: str
    tokens_before: int | None = None
    tokens_after: int | None = None
    usage: TokenUsage | None = None


@fast_init
@dataclass(frozen=True, slots=True, kw_only=True)
class SessionEndSeed:
    inherited: bool = False


@fast_init
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


_SCALARS = (str, int, float, bool)
_MESSAGES = (UserMessage, SystemMessage, AssistantMessage, ToolResultMessage)
_encoders: dict[type, Callable[[Any], Any]] = {}


def encode(value: Any) -> Any:
    """The lossless JSON form of a payload value."""
    if value is None or isinstance(value, _SCALARS):
        return value
    cls = type(value)
    encoder = _encoders.get(cls)
    if encoder is None:
        encoder = _encoders[cls] = _encoder_for(cls)
    return encoder(value)


def _encoder_for(cls: type) -> Callable[[Any], Any]:
    """One encoder per class, chosen once: the hot path is a dict lookup and a call."""
    if issubclass(cls, _MESSAGES):
        return message_to_json
    to_json = getattr(cls, "to_json", None)
    if to_json is not None:
        return to_json  # type: ignore[no-any-return]
    if dataclasses.is_dataclass(cls):
        return _fields_encoder(cls)
    if issubclass(cls, list | tuple):
        return lambda value: [encode(v) for v in value]
    if issubclass(cls, Mapping):
        return lambda value: {str(k): encode(v) for k, v in value.items()}

    def refuse(value: Any) -> Any:
        raise ValueError(f"{type(value).__name__} has no JSON form")

    return refuse


_PLAIN = frozenset((str, int, float, bool))


def _fields_encoder(cls: type) -> Callable[[Any], dict[str, Any]]:
    """An encoder written out for one dataclass: a field holding a plain scalar is copied
    without a call, ``None`` fields are left out, anything else goes through ``encode``.

    Every event is encoded once on its way to the store; the generic loop over the
    fields (``getattr`` and an ``encode`` call per field) was half of ``Session.append``.
    """
    lines = ["def encode_fields(value):", "    out = {}"]
    for f in dataclasses.fields(cls):
        if not f.name.isidentifier():  # pragma: no cover - dataclass fields always are
            raise TypeError(f"{cls.__name__}.{f.name} is not an identifier")
        lines += [
            f"    item = value.{f.name}",
            "    if item is not None:",
            f"        out[{f.name!r}] = item if item.__class__ in plain else encode(item)",
        ]
    lines.append("    return out")
    namespace: dict[str, Any] = {"plain": _PLAIN, "encode": encode}
    exec("\n".join(lines), namespace)
    function: Callable[[Any], dict[str, Any]] = namespace["encode_fields"]
    function.__qualname__ = f"encode_fields[{cls.__qualname__}]"
    return function
