"""The persisted JSON form of the log: lossless decode and whole-log validation (G-7).

Encoding is ``SessionEvent.to_json()``; ``event_from_json`` is its inverse for every type
of EVENTS.md §2, so ``event_from_json(e.to_json()) == e``. Decoding is strict: a malformed
envelope or payload raises ``SessionCorruptError`` naming the seq, never a half-typed event.

Unknown types: a *required* unknown type (including the legacy ``assistant/chunk``) makes
the log unreadable. An *ignorable* unknown type is kept, not skipped: its payload stays the
raw JSON value (``data`` is a ``dict``/``list``/scalar) so seqs stay contiguous, the event
re-encodes byte-for-byte, and a resumed session never reuses its seq. It is log-only: it
never carries surface metadata and never reaches ``derive_messages()``.
"""

from __future__ import annotations

import contextlib
import gc
import math
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, NoReturn

from .._cancel import CancelCause
from .._model import (
    BlockEnd,
    BlockStart,
    Finish,
    FinishReason,
    LlmFailure,
    ReasoningDelta,
    StreamChunk,
    TextDelta,
    TokenUsage,
    ToolCallDelta,
    UsageChunk,
)
from .._records import fast_init
from ..errors import SessionCorruptError
from ..messages import (
    AssistantMessage,
    Message,
    SystemMessage,
    ToolResultMessage,
    UserMessage,
    block_from_json,
    message_from_json,
)
from ._events import (
    RECORD_TYPES,
    SURFACE_TYPES,
    ApprovalDecided,
    ApprovalRequested,
    AssistantAttempt,
    AssistantMessageEvent,
    ContextCompacted,
    InboxSpliced,
    Replace,
    RequestContext,
    RequestHeader,
    SessionEndSeed,
    SessionEvent,
    StateChanged,
    StepBoundary,
    StepEnd,
    StepStart,
    StreamRecord,
    SurfaceOp,
    SystemMessageEvent,
    ToolCallEvent,
    ToolDeferred,
    ToolErrorInfo,
    ToolResultEvent,
    TurnEnd,
    TurnEndReason,
    TurnOutput,
    TurnStart,
    compaction_op_ok,
    install_chunk_decoder,
)
from ._inbox_fold import fold_inbox
from ._input_events import (
    InputAnswered,
    InputRequest,
    MCPResourceUpdated,
    MCPSampled,
    MCPTaskCreated,
)
from ._state import StatePatchError, check_patch

# Faster constructors for the records built on every append and every decoded row: the
# records declare plain frozen dataclasses; the speed trick (``fast_init``) is applied here,
# behind the codec boundary, once, when the session package is imported.
for _record in (
    Replace,
    SessionEvent,
    StepBoundary,
    TurnEndReason,
    ToolErrorInfo,
    *RECORD_TYPES,
):
    if _record is not UserMessage:  # a message record: the messages module owns its init
        fast_init(_record)

__all__ = [
    "KNOWN_TYPES",
    "ValidatedLog",
    "bulk_decoding",
    "check_approvals",
    "checked_inbox",
    "chunk_from_json",
    "decode_log",
    "event_from_json",
    "event_to_json",
    "validate_log",
]

Json = Any


class _Malformed(Exception):
    """Internal: what is wrong with a payload; wrapped into ``SessionCorruptError``."""


def _fail(message: str) -> NoReturn:
    raise _Malformed(message)


# --- scalar readers --------------------------------------------------------------------


def _obj(value: Json, what: str) -> Mapping[str, Json]:
    if not isinstance(value, dict):
        _fail(f"{what} must be an object")
    return value


def _int(data: Mapping[str, Json], key: str, *, minimum: int | None = None) -> int:
    value = data.get(key)
    if type(value) is int and (minimum is None or value >= minimum):
        return value  # the common case, checked first (bool is not ``type(...) is int``)
    if isinstance(value, bool) or not isinstance(value, int):
        _fail(f"{key!r} must be an integer")
    if minimum is not None and value < minimum:
        _fail(f"{key!r} must be >= {minimum}")
    return value


def _opt_int(data: Mapping[str, Json], key: str, *, minimum: int | None = None) -> int | None:
    return None if data.get(key) is None else _int(data, key, minimum=minimum)


def _str(data: Mapping[str, Json], key: str) -> str:
    value = data.get(key)
    if not isinstance(value, str):
        _fail(f"{key!r} must be a string")
    return value


def _opt_str(data: Mapping[str, Json], key: str) -> str | None:
    return None if data.get(key) is None else _str(data, key)


def _bool(data: Mapping[str, Json], key: str, default: bool) -> bool:
    value = data.get(key, default)
    if not isinstance(value, bool):
        _fail(f"{key!r} must be a boolean")
    return value


def _opt_bool(data: Mapping[str, Json], key: str) -> bool | None:
    return None if data.get(key) is None else _bool(data, key, False)


def _list(data: Mapping[str, Json], key: str) -> list[Json]:
    value = data.get(key)
    if not isinstance(value, list):
        _fail(f"{key!r} must be an array")
    return value


def _json(value: Json, what: str) -> Json:
    """Check that ``value`` is plain JSON (what ``json.loads`` produces)."""
    if value is None or isinstance(value, str | bool | int):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            _fail(f"{what} holds a non-finite number")
        return value
    if isinstance(value, list):
        for item in value:
            _json(item, what)
        return value
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                _fail(f"{what} has a non-string key")
            _json(item, what)
        return value
    _fail(f"{what} is not JSON ({type(value).__name__})")


# --- nested records --------------------------------------------------------------------


def _message(value: Json, cls: type[Message], what: str) -> Any:
    data = _obj(value, what)
    if not isinstance(data.get("content"), list):
        _fail(f"{what}.content must be an array")
    if "source" in data:
        _obj(data["source"], f"{what}.source")
    if cls is ToolResultMessage and not isinstance(data.get("is_error", False), bool):
        _fail(f"{what}.is_error must be a boolean")
    try:
        message = message_from_json(data)
    except (ValueError, TypeError, AttributeError) as exc:
        _fail(f"{what}: {exc}")
    if not isinstance(message, cls):
        _fail(f"{what} must have role {cls.__name__}, not {data.get('role')!r}")
    return message


def _failure(value: Json, what: str) -> LlmFailure:
    data = _obj(value, what)
    return LlmFailure(
        message=_str(data, "message"),
        code=_str(data, "code"),
        status=_opt_int(data, "status"),
        retryable=_opt_bool(data, "retryable"),
        provider_retry_after_ms=_opt_int(data, "provider_retry_after_ms"),
        request_id=_opt_str(data, "request_id"),
    )


def _usage(value: Json) -> TokenUsage:
    data = _obj(value, "usage")
    return TokenUsage(
        input_tokens=_int(data, "input_tokens"),
        output_tokens=_int(data, "output_tokens"),
        cache_read_tokens=_opt_int(data, "cache_read_tokens"),
        cache_write_tokens=_opt_int(data, "cache_write_tokens"),
        reasoning_tokens=_opt_int(data, "reasoning_tokens"),
    )


_BLOCK_TYPES = ("text", "reasoning", "tool-call")
_FINISH_KINDS = ("stop", "tool-calls", "max-tokens", "error", "aborted")


def _chunk(value: Json) -> StreamChunk:
    data = _obj(value, "chunk")
    kind = data.get("kind")
    if kind == "block-start":
        block_type = data.get("block_type")
        if block_type not in _BLOCK_TYPES:
            _fail(f"unknown block_type {block_type!r}")
        return BlockStart(index=_int(data, "index"), block_type=block_type)
    if kind == "text-delta":
        return TextDelta(index=_int(data, "index"), text=_str(data, "text"))
    if kind == "reasoning-delta":
        return ReasoningDelta(index=_int(data, "index"), text=_str(data, "text"))
    if kind == "tool-call-delta":
        return ToolCallDelta(
            index=_int(data, "index"),
            id=_str(data, "id"),
            arguments_delta=_str(data, "arguments_delta"),
            name=_opt_str(data, "name"),
        )
    if kind == "block-end":
        try:
            block = block_from_json(_obj(data.get("block"), "block"))
        except ValueError as exc:
            _fail(str(exc))
        return BlockEnd(index=_int(data, "index"), block=block)
    if kind == "usage":
        return UsageChunk(usage=_usage(data.get("usage")))
    if kind == "finish":
        reason = _obj(data.get("reason"), "finish.reason")
        finish_kind = reason.get("kind")
        if finish_kind not in _FINISH_KINDS:
            _fail(f"unknown finish reason {finish_kind!r}")
        failure = reason.get("failure")
        return Finish(
            reason=FinishReason(
                kind=finish_kind,
                failure=None if failure is None else _failure(failure, "finish.failure"),
            ),
            replay_state=_json(data.get("replay_state"), "replay_state"),
        )
    _fail(f"unknown stream chunk kind {kind!r}")


_CHUNK_KINDS = frozenset(
    (
        "block-start",
        "text-delta",
        "reasoning-delta",
        "tool-call-delta",
        "block-end",
        "usage",
        "finish",
    )
)


def _stream(data: Mapping[str, Json]) -> tuple[StreamRecord, ...]:
    """Records with their shape and chunk kind checked; each chunk decodes on first read."""
    records = []
    lazy = StreamRecord.lazy
    for item in _list(data, "stream"):
        if not isinstance(item, dict):
            _fail("stream record must be an object")
        time = item.get("time")
        chunk = item.get("chunk")
        if isinstance(time, bool) or not isinstance(time, int):
            _fail("stream record 'time' must be an integer")
        if not isinstance(chunk, dict) or chunk.get("kind") not in _CHUNK_KINDS:
            kind = chunk.get("kind") if isinstance(chunk, dict) else chunk
            _fail(f"unknown stream chunk kind {kind!r}")
        records.append(lazy(time, chunk))
    return tuple(records)


def chunk_from_json(raw: Json) -> StreamChunk:
    """Decode one stored stream chunk.

    Raises:
        SessionCorruptError: the chunk is malformed.
    """
    try:
        return _chunk(raw)
    except _Malformed as exc:
        raise SessionCorruptError(f"stream chunk: {exc}") from None


install_chunk_decoder(chunk_from_json)


# --- payloads, one decoder per type ----------------------------------------------------

_REASON_KINDS = ("completed", "blocked", "aborted", "error", "max-tokens", "interrupted")


def _turn_end(data: Mapping[str, Json]) -> TurnEnd:
    reason = _obj(data.get("reason"), "reason")
    kind = reason.get("kind")
    if kind not in _REASON_KINDS:
        _fail(f"unknown turn end reason {kind!r}")
    cause: CancelCause | None = None
    if reason.get("reason") is not None:
        raw = _obj(reason["reason"], "reason.reason")
        try:
            cause = CancelCause(_str(raw, "kind"), _opt_str(raw, "reason"))  # type: ignore[arg-type]
        except ValueError as exc:
            _fail(str(exc))
    error = None if reason.get("error") is None else _failure(reason["error"], "reason.error")
    return TurnEnd(
        turn=_int(data, "turn", minimum=1),
        reason=TurnEndReason(
            kind=kind, reason=cause, error=error, detail=_opt_str(reason, "detail")
        ),
    )


def _turn_output(data: Mapping[str, Json]) -> TurnOutput:
    return TurnOutput(
        turn=_int(data, "turn", minimum=1),
        message_seq=_int(data, "message_seq", minimum=1),
        output=_json(data.get("output"), "output"),
    )


def _step_start(data: Mapping[str, Json]) -> StepStart:
    return StepStart(turn=_int(data, "turn", minimum=1), step=_int(data, "step", minimum=1))


def _step_end(data: Mapping[str, Json]) -> StepEnd:
    return StepEnd(turn=_int(data, "turn", minimum=1), step=_int(data, "step", minimum=1))


def _system(data: Mapping[str, Json]) -> SystemMessageEvent:
    return SystemMessageEvent(
        turn=_int(data, "turn", minimum=0),
        step=_int(data, "step", minimum=0),
        message=_message(data.get("message"), SystemMessage, "message"),
    )


def _assistant(data: Mapping[str, Json]) -> AssistantMessageEvent:
    usage = data.get("usage")
    return AssistantMessageEvent(
        turn=_int(data, "turn", minimum=1),
        step=_int(data, "step", minimum=1),
        message=_message(data.get("message"), AssistantMessage, "message"),
        stream=_stream(data),
        usage=None if usage is None else _usage(usage),
        interrupted=_bool(data, "interrupted", False),
    )


def _attempt(data: Mapping[str, Json]) -> AssistantAttempt:
    return AssistantAttempt(
        turn=_int(data, "turn", minimum=1), step=_int(data, "step", minimum=1), stream=_stream(data)
    )


def _tool_call(data: Mapping[str, Json]) -> ToolCallEvent:
    return ToolCallEvent(
        turn=_int(data, "turn", minimum=1),
        step=_int(data, "step", minimum=1),
        call_id=_str(data, "call_id"),
        name=_str(data, "name"),
        arguments=_str(data, "arguments"),
    )


def _tool_result(data: Mapping[str, Json]) -> ToolResultEvent:
    raw_error = data.get("error")
    error = None
    if raw_error is not None:
        err = _obj(raw_error, "error")
        error = ToolErrorInfo(code=_str(err, "code"), name=_opt_str(err, "name"))
    return ToolResultEvent(
        turn=_int(data, "turn", minimum=1),
        step=_int(data, "step", minimum=1),
        message=_message(data.get("message"), ToolResultMessage, "message"),
        error=error,
        meta=_json(data.get("meta"), "meta"),
        reconciled=_opt_bool(data, "reconciled"),
    )


def _spliced(data: Mapping[str, Json]) -> InboxSpliced:
    target = data.get("target")
    if target not in ("next-turn", "next-step"):
        _fail(f"unknown inbox target {target!r}")
    outcome = data.get("outcome")
    if outcome not in (None, "canceled"):
        _fail(f"unknown splice outcome {outcome!r}")
    raw_inserted = data.get("inserted", [])
    if not isinstance(raw_inserted, list):
        _fail("'inserted' must be an array")
    inserted = tuple(_message(m, UserMessage, "inserted message") for m in raw_inserted)
    return InboxSpliced(
        target=target,
        start=_int(data, "start", minimum=0),
        removed_count=_int(data, "removed_count", minimum=0) if "removed_count" in data else 0,
        inserted=inserted,
        outcome=outcome,
    )


def _header(data: Mapping[str, Json]) -> RequestHeader:
    header = _json(_obj(data.get("header"), "header"), "header")
    if not isinstance(header.get("config"), dict):
        _fail("header.config must be an object")
    reason = data.get("reason")
    if reason not in ("initial", "resume", "change", "series"):
        _fail(f"unknown header reason {reason!r}")
    return RequestHeader(
        header=header, reason=reason, starts_series=_bool(data, "starts_series", False)
    )


def _context(data: Mapping[str, Json]) -> RequestContext:
    update = data.get("system_prompt_update")
    if update not in (None, "in-history"):
        _fail(f"unknown system_prompt_update {update!r}")
    return RequestContext(
        provider=_str(data, "provider"),
        model=_str(data, "model"),
        context_window=_opt_int(data, "context_window"),
        system_prompt_update=update,
    )


def _compacted(data: Mapping[str, Json]) -> ContextCompacted:
    strategy = _str(data, "strategy")
    if not strategy:
        _fail("'strategy' must be a non-empty string")
    summary = []
    for raw in _list(data, "summary"):
        try:
            summary.append(block_from_json(_obj(raw, "summary block")))
        except (ValueError, TypeError, AttributeError) as exc:
            _fail(f"summary block: {exc}")
    usage = data.get("usage")
    return ContextCompacted(
        upto_seq=_int(data, "upto_seq", minimum=1),
        summary=tuple(summary),
        strategy=strategy,
        tokens_before=_opt_int(data, "tokens_before", minimum=0),
        tokens_after=_opt_int(data, "tokens_after", minimum=0),
        usage=None if usage is None else _usage(usage),
    )


def _approval_requested(data: Mapping[str, Json]) -> ApprovalRequested:
    return ApprovalRequested(
        turn=_int(data, "turn", minimum=1),
        step=_int(data, "step", minimum=1),
        call_id=_str(data, "call_id"),
        name=_str(data, "name"),
        arguments=_str(data, "arguments"),
        reason=_opt_str(data, "reason"),
    )


def _approval_decided(data: Mapping[str, Json]) -> ApprovalDecided:
    decision = data.get("decision")
    if decision not in ("allow", "deny"):
        _fail(f"unknown approval decision {decision!r}")
    return ApprovalDecided(
        call_id=_str(data, "call_id"),
        decision=decision,
        reason=_opt_str(data, "reason"),
        by=_opt_str(data, "by"),
    )


_INPUT_KINDS = ("elicitation", "sampling")
_INPUT_ACTIONS = ("accept", "decline", "cancel")
_SAMPLED_OUTCOMES = ("answered", "denied", "failed")


def _one_of(data: Mapping[str, Json], key: str, allowed: tuple[str, ...], default: Any) -> Any:
    value = data.get(key, default)
    if value not in allowed:
        _fail(f"{key} must be one of {', '.join(allowed)}, not {value!r}")
    return value


def _opt_obj(data: Mapping[str, Json], key: str) -> dict[str, Json] | None:
    value = data.get(key)
    return None if value is None else dict(_obj(_json(value, key), key))


def _input_requested(data: Mapping[str, Json]) -> InputRequest:
    return InputRequest(
        id=_str(data, "id"),
        server=_str(data, "server"),
        message=_str(data, "message"),
        schema=_opt_obj(data, "schema"),
        url=_opt_str(data, "url"),
        kind=_one_of(data, "kind", _INPUT_KINDS, "elicitation"),
        call_id=_opt_str(data, "call_id"),
        turn=_opt_int(data, "turn", minimum=1),
        resume=_json(data.get("resume"), "resume"),
    )


def _input_answered(data: Mapping[str, Json]) -> InputAnswered:
    return InputAnswered(
        id=_str(data, "id"),
        action=_one_of(data, "action", _INPUT_ACTIONS, None),
        content=_opt_obj(data, "content"),
        by=_opt_str(data, "by"),
    )


def _task_created(data: Mapping[str, Json]) -> MCPTaskCreated:
    return MCPTaskCreated(
        call_id=_str(data, "call_id"),
        server=_str(data, "server"),
        task_id=_str(data, "task_id"),
        ttl_ms=_opt_int(data, "ttl_ms", minimum=0),
        poll_ms=_opt_int(data, "poll_ms", minimum=0),
    )


def _sampled(data: Mapping[str, Json]) -> MCPSampled:
    usage = data.get("usage")
    return MCPSampled(
        server=_str(data, "server"),
        outcome=_one_of(data, "outcome", _SAMPLED_OUTCOMES, None),
        call_id=_opt_str(data, "call_id"),
        provider=_opt_str(data, "provider"),
        model=_opt_str(data, "model"),
        usage=None if usage is None else _usage(usage),
        stop_reason=_opt_str(data, "stop_reason"),
        text=_opt_str(data, "text"),
        detail=_opt_str(data, "detail"),
    )


def _tool_deferred(data: Mapping[str, Json]) -> ToolDeferred:
    return ToolDeferred(
        turn=_int(data, "turn", minimum=1),
        step=_int(data, "step", minimum=1),
        call_id=_str(data, "call_id"),
        name=_str(data, "name"),
        arguments=_str(data, "arguments"),
    )


def _state_changed(data: Mapping[str, Json]) -> StateChanged:
    patch = _list(data, "patch")
    for op in patch:
        _json(op, "patch operation")
    try:
        return StateChanged(patch=check_patch(patch))
    except StatePatchError as exc:
        _fail(str(exc))


_DECODERS: dict[str, Callable[[Mapping[str, Json]], Any]] = {
    "turn/start": lambda d: TurnStart(turn=_int(d, "turn", minimum=1)),
    "turn/end": _turn_end,
    "turn/output": _turn_output,
    "step/start": _step_start,
    "step/end": _step_end,
    "user/message": lambda d: _message(d, UserMessage, "user/message"),
    "system/message": _system,
    "assistant/message": _assistant,
    "assistant/attempt": _attempt,
    "tool/call": _tool_call,
    "tool/result": _tool_result,
    "agent/inbox/spliced": _spliced,
    "request/header": _header,
    "request/context": _context,
    "session/end-seed": lambda d: SessionEndSeed(inherited=_bool(d, "inherited", False)),
    "context/compacted": _compacted,
    "tool/approval-requested": _approval_requested,
    "tool/approval-decided": _approval_decided,
    "input/requested": _input_requested,
    "input/answered": _input_answered,
    "mcp/task-created": _task_created,
    "mcp/resource-updated": lambda d: MCPResourceUpdated(
        server=_str(d, "server"), uri=_str(d, "uri")
    ),
    "mcp/sampled": _sampled,
    "tool/deferred": _tool_deferred,
    "state/changed": _state_changed,
}

KNOWN_TYPES: frozenset[str] = frozenset(_DECODERS)


# --- envelope --------------------------------------------------------------------------


def event_to_json(event: SessionEvent) -> dict[str, Json]:
    """The persisted JSON form of one event (``SessionEvent.to_json()``)."""
    return event.to_json()


def event_from_json(raw: Json) -> SessionEvent:
    """Decode one persisted event, validating its envelope and its payload.

    Raises:
        SessionCorruptError: a malformed envelope or payload, or an unknown required type;
            the message names the seq (or says the seq itself is unreadable).
    """
    if not isinstance(raw, dict):
        raise SessionCorruptError(f"event is not a JSON object: {raw!r:.80}")
    seq = raw.get("seq")
    if isinstance(seq, bool) or not isinstance(seq, int) or seq < 1:
        raise SessionCorruptError(f"event has an invalid seq {seq!r}")
    try:
        return _decode(raw, seq)
    except _Malformed as exc:
        raise SessionCorruptError(f"seq {seq}: {exc}") from None
    except RecursionError:  # a payload nested deeper than its checks can walk
        raise SessionCorruptError(f"seq {seq}: the payload is nested too deeply") from None


def _decode(raw: Mapping[str, Json], seq: int) -> SessionEvent:
    # Every check has a fast path for the well-formed case; the helpers it falls back to
    # raise the precise message.
    type_ = raw.get("type")
    if type(type_) is not str or not type_:
        _fail("type must be a non-empty string")
    time = raw.get("time")
    if type(time) is not int or time < 0:
        time = _int(raw, "time", minimum=0)
    ignorable = raw.get("ignorable", False)
    if ignorable is not False and ignorable is not True:
        ignorable = _bool(raw, "ignorable", False)
    if "data" not in raw:
        _fail("the event has no data")
    surface_op = raw.get("surface_op")
    if surface_op is not None and surface_op != "append":
        surface_op = _surface_op(surface_op)
    sources = raw.get("source_event_seqs")
    if sources is not None:
        sources = _sources(sources, seq)
    decoder = _DECODERS.get(type_)
    data = raw["data"]
    if decoder is None:
        if not ignorable:
            _fail(f"unknown required event type {type_!r}")
        data = _json(data, "data")
        is_surface = False
    else:
        if type(data) is not dict:
            _fail(f"{type_} payload must be an object")
        data = decoder(data)
        is_surface = type_ in SURFACE_TYPES
    if is_surface and surface_op is None:
        _fail(f"{type_} is a surface event and has no surface_op")
    if not is_surface and (surface_op is not None or sources is not None):
        _fail(f"{type_} is log-only but carries surface metadata")
    if type_ == "context/compacted" and not compaction_op_ok(data, surface_op):
        _fail("context/compacted must be a Replace whose range ends at its upto_seq")
    return _event(seq, time, type_, data, ignorable, surface_op, sources)


def _event(
    seq: int,
    time: int,
    type_: str,
    data: Any,
    ignorable: bool,
    surface_op: SurfaceOp | None,
    sources: tuple[int, ...] | None,
) -> SessionEvent:
    """A ``SessionEvent`` from checked fields, without keyword-argument binding."""
    event = object.__new__(SessionEvent)
    _set(event, "seq", seq)
    _set(event, "time", time)
    _set(event, "type", type_)
    _set(event, "data", data)
    _set(event, "ignorable", ignorable)
    _set(event, "surface_op", surface_op)
    _set(event, "source_event_seqs", sources)
    return event


_set = object.__setattr__


def _surface_op(value: Json) -> SurfaceOp | None:
    if value is None or value == "append":
        return value  # type: ignore[no-any-return]
    if isinstance(value, dict):
        return Replace(_int(value, "start_seq", minimum=1), _int(value, "end_seq", minimum=1))
    _fail(f"invalid surface_op {value!r}")


def _sources(value: Json, seq: int) -> tuple[int, ...] | None:
    if value is None:
        return None
    if not isinstance(value, list):
        _fail("source_event_seqs must be an array")
    for item in value:
        if isinstance(item, bool) or not isinstance(item, int) or not 1 <= item < seq:
            _fail(f"source_event_seqs entry {item!r} is not an earlier seq")
    if len(set(value)) != len(value):
        _fail("source_event_seqs has duplicates")
    return tuple(value)


# --- whole log -------------------------------------------------------------------------


def validate_log(events: Sequence[SessionEvent]) -> dict[str, list[UserMessage]]:
    """Check the invariants a single event cannot show; returns the folded inbox.

    Seqs run 1, 2, 3 … without gaps; every ``Replace`` names a contiguous range of the
    current surface and cites each node it shadows; the ``agent/inbox/spliced`` events
    fold to a valid inbox (C7.4-20); approvals pair up (``check_approvals``).

    Raises:
        SessionCorruptError: naming the first offending seq.
    """
    surface: list[int] = []
    approvals = False
    for expected, event in enumerate(events, start=1):
        if event.seq != expected:
            raise SessionCorruptError(
                f"seq {event.seq}: expected seq {expected} (the log has a gap or is out of order)"
            )
        op = event.surface_op
        if op == "append":
            surface.append(event.seq)
        elif op is None:
            approvals = approvals or event.type in _APPROVAL_TYPES
        elif isinstance(op, Replace):
            try:
                start = surface.index(op.start_seq)
                end = surface.index(op.end_seq)
            except ValueError:
                raise SessionCorruptError(
                    f"seq {event.seq}: replace range {op.start_seq}..{op.end_seq} is not on "
                    "the surface"
                ) from None
            if start > end:
                raise SessionCorruptError(f"seq {event.seq}: replace range starts after it ends")
            if not set(surface[start : end + 1]) <= set(event.source_event_seqs or ()):
                raise SessionCorruptError(f"seq {event.seq}: replace does not cite what it shadows")
            surface[start : end + 1] = [event.seq]
    if approvals:  # most logs have none: one flag instead of a second pass
        check_approvals(events)
    return fold_inbox(events)


_APPROVAL_TYPES = frozenset(("tool/approval-requested", "tool/approval-decided"))


def check_approvals(events: Sequence[SessionEvent]) -> None:
    """Approval events pair up with their call (EVENTS.md §2.4a).

    A ``tool/approval-requested`` follows its call's ``tool/call`` and comes before that
    call's ``tool/result``, once per call; a ``tool/approval-decided`` answers an open request
    (requested, not yet decided, no result yet), so there is at most one per request. A
    request may close without a decision only through its call's result: a cancel while it
    waits (``ABORTED_BEFORE_DISPATCH``) or a crash repaired to ``TOOL_NOT_STARTED``.

    Raises:
        SessionCorruptError: naming the first offending seq.
    """
    called: set[str] = set()  # calls with a tool/call and no tool/result yet
    open_requests: set[str] = set()
    decided: set[str] = set()

    def corrupt(event: SessionEvent, what: str) -> SessionCorruptError:
        return SessionCorruptError(f"seq {event.seq} ({event.type}): {what}")

    for event in events:
        data = event.data
        if isinstance(data, ToolCallEvent):
            called.add(data.call_id)
            decided.discard(data.call_id)
        elif isinstance(data, ToolResultEvent):
            call_id = data.message.call_id
            called.discard(call_id)
            open_requests.discard(call_id)
            decided.discard(call_id)
        elif isinstance(data, ApprovalRequested):
            if data.call_id not in called:
                raise corrupt(event, f"call {data.call_id!r} has no open tool/call")
            if data.call_id in open_requests or data.call_id in decided:
                raise corrupt(event, f"call {data.call_id!r} was already asked about")
            open_requests.add(data.call_id)
        elif isinstance(data, ApprovalDecided):
            if data.call_id in decided:
                raise corrupt(event, f"call {data.call_id!r} was already decided")
            if data.call_id not in open_requests:
                raise corrupt(event, f"call {data.call_id!r} has no pending approval request")
            open_requests.discard(data.call_id)
            decided.add(data.call_id)


class ValidatedLog(tuple[SessionEvent, ...]):
    """A log ``decode_log`` produced: already validated, with its folded inbox.

    Resume takes the inbox from here instead of folding the whole log a second time; a
    store of another kind returns a plain tuple and gets validated by the caller.
    """

    pending: dict[str, list[UserMessage]]

    def __new__(cls, events: Iterable[SessionEvent]) -> ValidatedLog:
        log = super().__new__(cls, events)
        log.pending = validate_log(log)
        return log

    def inbox(self) -> dict[str, list[UserMessage]]:
        """A fresh copy of the folded inbox queues."""
        return {target: list(queue) for target, queue in self.pending.items()}


def checked_inbox(events: Sequence[SessionEvent]) -> dict[str, list[UserMessage]]:
    """The folded inbox of ``events``, validating the log unless ``decode_log`` did.

    Raises:
        SessionCorruptError: naming the offending seq.
    """
    if isinstance(events, ValidatedLog):
        return events.inbox()
    return validate_log(events)


def decode_log(raw: Iterable[Json]) -> tuple[SessionEvent, ...]:
    """Decode and validate a whole persisted log (the body of every store's ``load``).

    Raises:
        SessionCorruptError: naming the offending seq.
    """
    with bulk_decoding():
        return ValidatedLog(event_from_json(item) for item in raw)


# Young objects after a bulk decode worth promoting at once (~2k events). Left young, a
# log is walked by the next young and middle collections and then counts towards the next
# full one: a service reloading 5k-event logs ran a full collection (80-120 ms with ~150k
# tracked objects) every few reloads. Below it the walks are cheap, and promotion's side
# effect (young cyclic garbage then waits for a full collection) is not worth it.
_BULK = 10_000


@contextlib.contextmanager
def bulk_decoding() -> Iterator[None]:
    """Pause the cyclic garbage collector while a whole log is parsed and decoded.

    Parsing allocates millions of small acyclic objects; with the collector running, every
    threshold crossing walks the whole growing heap again (measured: 60k events parse in
    3.9 s cold with it, 0.5 s without). Nothing decoded here forms a cycle.

    On exit after a large decode, every tracked object moves to the oldest generation, so
    the young collections that follow do not walk the log (a side effect on the process:
    cyclic garbage that was young at that moment waits for the next full collection).
    """
    collecting = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if collecting:
            if gc.get_count()[0] > _BULK and gc.get_freeze_count() == 0:
                # A decoded log lives as long as its session. Left in the youngest
                # generation, the collector walks all of it again at each of the next
                # promotions (measured after 100k events: 0.6-0.9 s); freeze + unfreeze
                # moves every tracked object to the oldest generation without a walk.
                # Skipped when the application keeps its own frozen objects.
                gc.freeze()
                gc.unfreeze()
            gc.enable()
