"""The persisted JSON form of the log: lossless decode, strict validation (G-7, C7.4-20)."""

from __future__ import annotations

import asyncio
import gc
import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from steerloop import CancelCause, Runtime, SessionCorruptError, user_message
from steerloop.llm import LlmFailure
from steerloop.llm._types import TokenUsage
from steerloop.llm.chunks import (
    BlockEnd,
    BlockStart,
    Finish,
    FinishReason,
    ReasoningDelta,
    TextDelta,
    ToolCallDelta,
    UsageChunk,
)
from steerloop.messages import (
    AssistantMessage,
    MessageSource,
    ReasoningBlock,
    SystemMessage,
    TextBlock,
    ToolCallBlock,
    ToolResultMessage,
    UserMessage,
)
from steerloop.session import Replace, Session, SessionEvent, _codec
from steerloop.session._codec import (
    KNOWN_TYPES,
    ValidatedLog,
    checked_inbox,
    decode_log,
    event_from_json,
    validate_log,
)
from steerloop.session._events import (
    ApprovalDecided,
    ApprovalRequested,
    AssistantAttempt,
    AssistantMessageEvent,
    ContextCompacted,
    InboxSpliced,
    RequestContext,
    RequestHeader,
    SessionEndSeed,
    StateChanged,
    StepEnd,
    StepStart,
    StreamRecord,
    SystemMessageEvent,
    ToolCallEvent,
    ToolDeferred,
    ToolErrorInfo,
    ToolResultEvent,
    TurnEnd,
    TurnEndReason,
    TurnOutput,
    TurnStart,
)
from steerloop.session._input_events import (
    InputAnswered,
    InputRequest,
    MCPResourceUpdated,
    MCPSampled,
    MCPTaskCreated,
)
from steerloop.testing import (
    HANG,
    error_response,
    max_tokens_response,
    reasoning_response,
    tool_call_response,
)

from ..conftest import Harness, settle, within
from ..support import Bench


def through_json(event: SessionEvent) -> SessionEvent:
    """Encode, serialise, parse and decode one event."""
    return event_from_json(json.loads(json.dumps(event.to_json())))


def reload(events: Any) -> tuple[SessionEvent, ...]:
    return decode_log([json.loads(json.dumps(e.to_json())) for e in events])


# --- a real run covers every type the loop writes ----------------------------------------


async def run_everything() -> tuple[Runtime, Any]:
    """One session whose log holds every event type the loop and the Session write."""
    rt = await Runtime.open(store="memory://", persona="be brief")
    h = Harness(rt)
    bench = Bench()
    rt.tools.register(bench.tool("t"))
    agent = await h.agent(
        tool_call_response("c1", "t", {"x": [1, 2.5, None, "é"]}, text="calling"),
        reasoning_response("think", "done"),
        error_response("rate_limited", "slow down", retryable=True, retry_after_ms=10),
        max_tokens_response("cut", tool_calls=[("c9", "t", '{"x":')]),
        tool_call_response("c8", "final_result", {"response": [1, "é", None]}),
        HANG,
    )
    agent.inject(user_message("ctx", source={"kind": "plugin", "plugin": "p"}))
    agent.followup(user_message("u1"))
    await settle(agent)
    for text in ("u2", "u3"):
        agent.followup(user_message(text))
        await settle(agent)
    await within(agent.run("structured", output_type=list[int | str | None]))  # turn/output
    streaming = asyncio.Event()

    def on_frame(payload: Any) -> None:
        if payload.frame.kind == "chunk":
            streaming.set()

    rt.hooks.on("agent/assistant-stream", on_frame)
    agent.followup(user_message("u4"))
    await within(streaming.wait())
    agent.cancel(CancelCause.hook("stop it"))
    await settle(agent)
    return rt, agent


async def test_every_event_of_a_real_run_round_trips() -> None:
    """G-7: decode(encode(e)) == e for every event of a run that writes every type; the
    reloaded log derives the same messages as the live one."""
    rt, agent = await run_everything()
    try:
        live = agent.session
        await live.flush()
        written = {e.type for e in live.events}
        # context/compacted is a plugin's (round trip: tests/context/test_compaction.py);
        # the approval events need a policy (round trip: tests/agent/test_approvals.py);
        # the state and client-call events are written through agent.update_state and a
        # client tool (round trips: tests/agent/test_state.py, test_client_calls.py).
        # The input and MCP events are the MCP client's (tests/mcp; generated ones below).
        plugin = {
            "session/end-seed",
            "context/compacted",
            "tool/approval-requested",
            "tool/approval-decided",
            "input/requested",
            "input/answered",
            "mcp/task-created",
            "mcp/resource-updated",
            "mcp/sampled",
            "state/changed",
            "tool/deferred",
        }
        assert written >= KNOWN_TYPES - plugin, KNOWN_TYPES - written
        for event in live.events:
            again = through_json(event)
            assert again == event
            assert again.to_json() == event.to_json()
        events = reload(live.events)
        assert events == tuple(live.events)
        seeded = Session._create("copy", seed=events, repair=False)
        assert seeded.derive_messages() == live.derive_messages()
        assert seeded.surface_seqs() == live.surface_seqs()
        # The store's own load decodes the stored JSON text to the same log.
        assert await rt.sessions.persistence.load(live.id) == tuple(live.events)  # type: ignore[union-attr]
    finally:
        await rt.close()


# --- hypothesis: generated events and generated logs -------------------------------------

texts = st.text(max_size=12)
ids = st.text(alphabet="abcxyz0123-_", min_size=1, max_size=6)
opt_texts = st.none() | texts
small = st.integers(min_value=0, max_value=2**53 - 1)
json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**53), max_value=2**53)
    | st.floats(allow_nan=False, allow_infinity=False)
    | texts,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(texts, inner, max_size=3),
    max_leaves=6,
)
json_objects = st.dictionaries(texts, json_values, max_size=3)
_SOURCE_FIELDS = {"kind", "plugin", "call_id", "provider", "model", "replay_state"}

blocks = st.one_of(
    st.builds(TextBlock, texts),
    st.builds(ReasoningBlock, texts, json_values),
    st.builds(ToolCallBlock, ids, ids, texts),
)
contents = st.lists(blocks, max_size=3).map(tuple)
sources = st.builds(
    MessageSource,
    kind=ids,
    plugin=opt_texts,
    call_id=opt_texts,
    provider=opt_texts,
    model=opt_texts,
    replay_state=json_values,
    extra=st.none()
    | st.dictionaries(ids.filter(lambda k: k not in _SOURCE_FIELDS), json_values, min_size=1),
)
user_messages = st.builds(UserMessage, id=ids, content=contents, source=sources)
system_messages = st.builds(SystemMessage, id=ids, content=contents, source=sources)
assistant_messages = st.builds(AssistantMessage, id=ids, content=contents, source=sources)
tool_messages = st.builds(
    ToolResultMessage, id=ids, call_id=ids, content=contents, is_error=st.booleans()
)
failures = st.builds(
    LlmFailure,
    message=texts,
    code=ids,
    status=st.none() | small,
    retryable=st.none() | st.booleans(),
    provider_retry_after_ms=st.none() | small,
    request_id=opt_texts,
)
usages = st.builds(
    TokenUsage,
    input_tokens=small,
    output_tokens=small,
    cache_read_tokens=st.none() | small,
    cache_write_tokens=st.none() | small,
    reasoning_tokens=st.none() | small,
)
chunks = st.one_of(
    st.builds(
        BlockStart, index=small, block_type=st.sampled_from(["text", "reasoning", "tool-call"])
    ),
    st.builds(TextDelta, index=small, text=texts),
    st.builds(ReasoningDelta, index=small, text=texts),
    st.builds(ToolCallDelta, index=small, id=ids, arguments_delta=texts, name=opt_texts),
    st.builds(BlockEnd, index=small, block=blocks),
    st.builds(UsageChunk, usage=usages),
    st.builds(
        Finish,
        reason=st.builds(
            FinishReason,
            kind=st.sampled_from(["stop", "tool-calls", "max-tokens", "error", "aborted"]),
            failure=st.none() | failures,
        ),
        replay_state=json_values,
    ),
)
streams = st.lists(st.builds(StreamRecord, small, chunks), max_size=4).map(tuple)
causes = st.one_of(
    st.just(CancelCause.user()),
    st.just(CancelCause.parent()),
    st.just(CancelCause.disposed()),
    texts.map(CancelCause.hook),
)
reasons = st.one_of(
    st.builds(
        TurnEndReason,
        kind=st.sampled_from(["completed", "blocked", "max-tokens", "interrupted"]),
    ),
    st.builds(TurnEndReason, kind=st.just("blocked"), detail=texts),
    st.builds(TurnEndReason, kind=st.just("aborted"), reason=causes),
    st.builds(TurnEndReason, kind=st.just("error"), error=failures),
)
turns = st.integers(min_value=1, max_value=99)
headers = st.fixed_dictionaries(
    {"config": json_objects}, optional={"tools": st.lists(json_objects, max_size=2)}
)

LOG_ONLY: dict[str, st.SearchStrategy[Any]] = {
    "turn/start": st.builds(TurnStart, turn=turns),
    "turn/end": st.builds(TurnEnd, turn=turns, reason=reasons),
    "step/start": st.builds(StepStart, turn=turns, step=turns),
    "step/end": st.builds(StepEnd, turn=turns, step=turns),
    "assistant/attempt": st.builds(AssistantAttempt, turn=turns, step=turns, stream=streams),
    "tool/call": st.builds(
        ToolCallEvent, turn=turns, step=turns, call_id=ids, name=ids, arguments=texts
    ),
    "agent/inbox/spliced": st.builds(
        InboxSpliced,
        target=st.sampled_from(["next-turn", "next-step"]),
        start=small,
        removed_count=small,
        inserted=st.lists(user_messages, max_size=2).map(tuple),
        outcome=st.sampled_from([None, "canceled"]),
    ),
    "request/header": st.builds(
        RequestHeader,
        header=headers,
        reason=st.sampled_from(["initial", "resume", "change", "series"]),
        starts_series=st.booleans(),
    ),
    "request/context": st.builds(
        RequestContext,
        provider=ids,
        model=ids,
        context_window=st.none() | small,
        system_prompt_update=st.sampled_from([None, "in-history"]),
    ),
    "session/end-seed": st.builds(SessionEndSeed, inherited=st.booleans()),
    "turn/output": st.builds(
        TurnOutput,
        turn=turns,
        message_seq=turns,
        output=st.none() | small | texts | st.dictionaries(texts, small, max_size=2),
    ),
    "tool/approval-requested": st.builds(
        ApprovalRequested,
        turn=turns,
        step=turns,
        call_id=ids,
        name=ids,
        arguments=texts,
        reason=opt_texts,
    ),
    "tool/approval-decided": st.builds(
        ApprovalDecided,
        call_id=ids,
        decision=st.sampled_from(["allow", "deny"]),
        reason=opt_texts,
        by=opt_texts,
    ),
    "input/requested": st.builds(
        InputRequest,
        id=ids,
        server=ids,
        message=texts,
        schema=st.none() | json_objects,
        url=opt_texts,
        kind=st.sampled_from(["elicitation", "sampling"]),
        call_id=st.none() | ids,
        turn=st.none() | turns,
        resume=json_values,
    ),
    "input/answered": st.builds(
        InputAnswered,
        id=ids,
        action=st.sampled_from(["accept", "decline", "cancel"]),
        content=st.none() | json_objects,
        by=opt_texts,
    ),
    "mcp/task-created": st.builds(
        MCPTaskCreated,
        call_id=ids,
        server=ids,
        task_id=ids,
        ttl_ms=st.none() | small,
        poll_ms=st.none() | small,
    ),
    "mcp/resource-updated": st.builds(MCPResourceUpdated, server=ids, uri=texts),
    "mcp/sampled": st.builds(
        MCPSampled,
        server=ids,
        outcome=st.sampled_from(["answered", "denied", "failed"]),
        call_id=st.none() | ids,
        provider=opt_texts,
        model=opt_texts,
        usage=st.none() | usages,
        stop_reason=opt_texts,
        text=opt_texts,
        detail=opt_texts,
    ),
    "tool/deferred": st.builds(
        ToolDeferred, turn=turns, step=turns, call_id=ids, name=ids, arguments=texts
    ),
    "state/changed": st.builds(
        StateChanged,
        patch=st.lists(
            st.one_of(
                st.builds(lambda p, v: {"op": "add", "path": "/" + p, "value": v}, ids, small),
                st.builds(lambda p: {"op": "remove", "path": "/" + p}, ids),
                st.builds(lambda f, p: {"op": "move", "from": "/" + f, "path": "/" + p}, ids, ids),
            ),
            max_size=3,
        ).map(tuple),
    ),
}
# Pairing rules of their own (check_approvals): not drawn into the generated whole logs.
APPROVALS = {"tool/approval-requested", "tool/approval-decided"}
SURFACE: dict[str, st.SearchStrategy[Any]] = {
    "user/message": user_messages,
    "system/message": st.builds(
        SystemMessageEvent, turn=turns, step=turns, message=system_messages
    ),
    "assistant/message": st.builds(
        AssistantMessageEvent,
        turn=turns,
        step=turns,
        message=assistant_messages,
        stream=streams,
        usage=st.none() | usages,
        interrupted=st.booleans(),
    ),
    "tool/result": st.builds(
        ToolResultEvent,
        turn=turns,
        step=turns,
        message=tool_messages,
        error=st.none() | st.builds(ToolErrorInfo, code=ids, name=opt_texts),
        meta=json_values,
    ),
}


def test_strategies_cover_every_known_type() -> None:
    """The generated events below span every type the codec knows."""
    assert set(LOG_ONLY) | set(SURFACE) | {"context/compacted"} == KNOWN_TYPES


@st.composite
def single_events(draw: st.DrawFn) -> SessionEvent:
    seq = draw(st.integers(min_value=1, max_value=10_000))
    kind = draw(st.sampled_from([*sorted(KNOWN_TYPES), "plugin/note"]))
    earlier = st.integers(min_value=1, max_value=max(seq - 1, 1))
    surface_op: Any = None
    sources: tuple[int, ...] | None = None
    ignorable = draw(st.booleans())
    if kind == "plugin/note":
        data: Any = draw(json_values)
        ignorable = True
    elif kind == "context/compacted":
        # A Replace of earlier seqs ending at upto_seq, always (the codec refuses anything else).
        seq = max(seq, 2)
        earlier = st.integers(min_value=1, max_value=seq - 1)
        start, end = sorted(draw(st.tuples(earlier, earlier)))
        data = ContextCompacted(
            upto_seq=end,
            summary=draw(st.lists(blocks, max_size=2).map(tuple)),
            strategy=draw(st.sampled_from(["window", "drop-tool-results", "summarize"])),
            tokens_before=draw(st.none() | small),
            tokens_after=draw(st.none() | small),
            usage=draw(st.none() | usages),
        )
        surface_op = Replace(start, end)
        sources = tuple(range(start, end + 1))
    elif kind in SURFACE:
        data = draw(SURFACE[kind])
        if seq > 1 and draw(st.booleans()):
            start, end = sorted(draw(st.tuples(earlier, earlier)))
            surface_op = Replace(start, end)
            sources = tuple(sorted(set(draw(st.lists(earlier, min_size=1, max_size=3)))))
        else:
            surface_op = "append"
            if seq > 1 and draw(st.booleans()):
                sources = (draw(earlier),)
    else:
        data = draw(LOG_ONLY[kind])
    return SessionEvent(
        seq=seq,
        time=draw(small),
        type=kind,
        data=data,
        ignorable=ignorable,
        surface_op=surface_op,
        source_event_seqs=sources,
    )


@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow])
@given(single_events())
def test_decode_inverts_encode(event: SessionEvent) -> None:
    """G-7: encode → JSON text → decode is the identity for every event type (an unknown
    ignorable type keeps its raw JSON payload)."""
    again = through_json(event)
    assert again == event
    assert again.to_json() == event.to_json()


@st.composite
def logs(draw: st.DrawFn) -> Session:
    """A valid log built through ``Session.append``: surface appends and replaces, inbox
    splices that stay in range, boundaries, and ignorable plugin events."""
    session = Session._create("gen", clock=lambda: 7)
    queues: dict[str, list[str]] = {"next-turn": [], "next-step": []}
    counter = 0
    for _ in range(draw(st.integers(min_value=0, max_value=25))):
        action = draw(st.sampled_from(["surface", "replace", "splice", "log", "plugin"]))
        if action == "surface":
            kind = draw(st.sampled_from(sorted(SURFACE)))
            session.append(kind, draw(SURFACE[kind]), surface_op="append")
        elif action == "replace" and session.surface_seqs():
            nodes = session.surface_seqs()
            i = draw(st.integers(min_value=0, max_value=len(nodes) - 1))
            j = draw(st.integers(min_value=i, max_value=len(nodes) - 1))
            kind = draw(st.sampled_from(["system/message", "user/message"]))
            session.append(
                kind,
                draw(SURFACE[kind]),
                surface_op=Replace(nodes[i], nodes[j]),
                source_event_seqs=nodes[i : j + 1],
            )
        elif action == "splice":
            target = draw(st.sampled_from(["next-turn", "next-step"]))
            queue = queues[target]
            start = draw(st.integers(min_value=0, max_value=len(queue)))
            removed = draw(st.integers(min_value=0, max_value=len(queue) - start))
            inserted = []
            for _ in range(draw(st.integers(min_value=0, max_value=2))):
                counter += 1
                inserted.append(UserMessage(id=f"m{counter}", content=(TextBlock(f"t{counter}"),)))
            if not removed and not inserted:
                continue
            session.append(
                InboxSpliced(
                    target=target,  # type: ignore[arg-type]
                    start=start,
                    removed_count=removed,
                    inserted=tuple(inserted),
                    outcome=draw(st.sampled_from([None, "canceled"])) if removed else None,
                ),
            )
            queue[start : start + removed] = [m.id for m in inserted]
        elif action == "log":
            kind = draw(
                st.sampled_from(sorted(set(LOG_ONLY) - {"agent/inbox/spliced"} - APPROVALS))
            )
            session.append(kind, draw(LOG_ONLY[kind]))
        else:
            session.append("plugin/note", draw(json_objects), ignorable=True)
    return session


# 150 generated logs take ~10 s alone; a loaded machine can take minutes, which is no failure.
@pytest.mark.timeout(600)
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(logs())
def test_reloaded_log_equals_live_log(live: Session) -> None:
    """G-7: a generated log survives encode → decode → validate unchanged, and a session
    seeded with the reloaded log derives exactly the live messages and surface."""
    events = reload(live.events)
    assert events == tuple(live.events)
    seeded = Session._create("reloaded", seed=events, repair=False)
    assert seeded.derive_messages() == live.derive_messages()
    assert seeded.surface_seqs() == live.surface_seqs()


# --- unknown types -------------------------------------------------------------------------


def raw_event(seq: int, type: str, data: Any, **extra: Any) -> dict[str, Any]:
    return {"seq": seq, "time": 1, "type": type, "data": data, **extra}


def test_unknown_required_type_is_refused_naming_the_seq() -> None:
    """G-7 / EVENTS §1: an unknown required type makes the loader refuse the log."""
    with pytest.raises(SessionCorruptError, match=r"seq 3: unknown required event type 'x/y'"):
        event_from_json(raw_event(3, "x/y", {}))


def test_legacy_assistant_chunk_is_unknown_required() -> None:
    """EVENTS §2.3: ``assistant/chunk`` from older logs is treated as unknown-required."""
    with pytest.raises(SessionCorruptError, match=r"seq 5: .*'assistant/chunk'"):
        event_from_json(raw_event(5, "assistant/chunk", {"index": 0, "text": "a"}))


def test_unknown_ignorable_type_is_kept_as_raw_json() -> None:
    """An ignorable unknown event is kept with its raw payload, so seqs stay contiguous
    and the event re-encodes unchanged; it never reaches the surface."""
    raw = [
        raw_event(
            1,
            "user/message",
            {"id": "a", "role": "user", "content": [], "source": {"kind": "user"}},
            surface_op="append",
        ),
        raw_event(2, "plugin/stats", {"n": [1, 2], "ok": True}, ignorable=True),
        raw_event(3, "turn/start", {"turn": 1}),
    ]
    events = decode_log(raw)
    assert [e.seq for e in events] == [1, 2, 3]
    assert events[1].data == {"n": [1, 2], "ok": True}
    assert events[1].ignorable
    assert [e.to_json() for e in events] == raw
    session = Session._create("s", seed=events, repair=False)
    assert [m.id for m in session.derive_messages()] == ["a"]
    assert [e.type for e in session.events][2:] == ["turn/start", "session/end-seed"]
    end = session.append(TurnEnd(turn=1, reason=TurnEndReason(kind="completed")))
    assert end.seq == 5


def test_unknown_ignorable_type_cannot_claim_the_surface() -> None:
    """Only the four surface types may carry surface metadata."""
    with pytest.raises(SessionCorruptError, match=r"seq 2: .*log-only"):
        event_from_json(raw_event(2, "plugin/x", {}, ignorable=True, surface_op="append"))


# --- malformed envelopes and payloads -------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "match"),
    [
        ([1, 2], "not a JSON object"),
        ({"time": 1, "type": "turn/start", "data": {"turn": 1}}, "invalid seq None"),
        (raw_event(0, "turn/start", {"turn": 1}), "invalid seq 0"),
        ({**raw_event(1, "turn/start", {"turn": 1}), "seq": True}, "invalid seq True"),
        ({**raw_event(4, "turn/start", {"turn": 1}), "type": 7}, "seq 4: type"),
        ({**raw_event(4, "turn/start", {"turn": 1}), "time": "now"}, "seq 4: 'time'"),
        ({"seq": 4, "time": 1, "type": "turn/start"}, "seq 4: the event has no data"),
        (raw_event(4, "turn/start", {"turn": "1"}), "seq 4: 'turn'"),
        (raw_event(4, "turn/start", {"turn": 0}), "seq 4: 'turn' must be >= 1"),
        (raw_event(4, "turn/end", {"turn": 1, "reason": {"kind": "weird"}}), "seq 4: unknown"),
        (
            raw_event(
                4, "turn/end", {"turn": 1, "reason": {"kind": "aborted", "reason": {"kind": "x"}}}
            ),
            "seq 4: unknown cancel cause",
        ),
        (raw_event(4, "step/end", {"turn": 1}), "seq 4: 'step'"),
        (
            raw_event(4, "user/message", {"id": "a", "role": "user", "content": []}),
            "seq 4: .*no surface_op",
        ),
        (
            raw_event(
                4,
                "user/message",
                {"id": "a", "role": "tool", "content": [], "call_id": "c"},
                surface_op="append",
            ),
            "seq 4: .*role",
        ),
        (
            raw_event(
                4,
                "user/message",
                {"id": "a", "role": "user", "content": [{"type": "img"}]},
                surface_op="append",
            ),
            "seq 4: .*unknown block type",
        ),
        (
            raw_event(
                4, "user/message", {"id": "a", "role": "user", "content": []}, surface_op="prepend"
            ),
            "seq 4: invalid surface_op",
        ),
        (
            raw_event(
                4,
                "user/message",
                {"id": "a", "role": "user", "content": []},
                surface_op="append",
                source_event_seqs=[4],
            ),
            "seq 4: source_event_seqs entry 4",
        ),
        (
            raw_event(
                4,
                "user/message",
                {"id": "a", "role": "user", "content": []},
                surface_op="append",
                source_event_seqs=[1, 1],
            ),
            "seq 4: .*duplicates",
        ),
        (raw_event(4, "turn/start", {"turn": 1}, surface_op="append"), "seq 4: .*log-only"),
        (raw_event(4, "turn/start", {"turn": 1}, ignorable="yes"), "seq 4: 'ignorable'"),
        (
            raw_event(
                4,
                "assistant/attempt",
                {"turn": 1, "step": 1, "stream": [{"time": 1, "chunk": {"kind": "boom"}}]},
            ),
            "seq 4: unknown stream chunk kind",
        ),
        (
            raw_event(4, "tool/call", {"turn": 1, "step": 1, "call_id": "c", "name": "t"}),
            "seq 4: 'arguments'",
        ),
        (
            raw_event(4, "agent/inbox/spliced", {"target": "later", "start": 0}),
            "seq 4: unknown inbox target",
        ),
        (
            raw_event(4, "agent/inbox/spliced", {"target": "next-turn", "start": -1}),
            "seq 4: 'start'",
        ),
        (
            raw_event(4, "request/header", {"header": {}, "reason": "initial"}),
            "seq 4: header.config",
        ),
        (
            raw_event(4, "request/header", {"header": {"config": {}}, "reason": "why"}),
            "seq 4: unknown header reason",
        ),
        (raw_event(4, "session/end-seed", {"inherited": 1}), "seq 4: 'inherited'"),
        (raw_event(4, "session/end-seed", []), "seq 4: session/end-seed payload must be an object"),
    ],
)
def test_malformed_event_is_corrupt_and_names_the_seq(raw: Any, match: str) -> None:
    """A malformed envelope or payload raises SessionCorruptError naming the seq."""
    with pytest.raises(SessionCorruptError, match=match):
        event_from_json(raw)


# --- whole-log validation -------------------------------------------------------------------


def boundary_log() -> list[SessionEvent]:
    return [
        SessionEvent(seq=1, time=1, type="turn/start", data=TurnStart(turn=1)),
        SessionEvent(seq=2, time=1, type="step/start", data=StepStart(turn=1, step=1)),
        SessionEvent(seq=3, time=1, type="step/end", data=StepEnd(turn=1, step=1)),
    ]


def test_validate_log_refuses_a_gap_naming_the_seq() -> None:
    """Seqs must run 1, 2, 3 … (EVENTS §1)."""
    events = boundary_log()
    gap = [
        events[0],
        events[1],
        SessionEvent(seq=4, time=1, type="turn/start", data=TurnStart(turn=2)),
    ]
    with pytest.raises(SessionCorruptError, match="seq 4: expected seq 3"):
        validate_log(gap)
    with pytest.raises(SessionCorruptError, match="seq 2: expected seq 1"):
        validate_log(events[1:])
    with pytest.raises(SessionCorruptError, match="seq 2: expected seq 3"):
        validate_log([events[0], events[1], events[1]])
    validate_log(events)


def test_validate_log_refuses_a_replace_off_the_surface() -> None:
    """A Replace must name current surface nodes and cite what it shadows."""
    msg = UserMessage(id="a", content=())
    first = SessionEvent(seq=1, time=1, type="user/message", data=msg, surface_op="append")
    off = SessionEvent(
        seq=2,
        time=1,
        type="user/message",
        data=msg,
        surface_op=Replace(5, 5),
        source_event_seqs=(1,),
    )
    uncited = SessionEvent(seq=2, time=1, type="user/message", data=msg, surface_op=Replace(1, 1))
    with pytest.raises(SessionCorruptError, match=r"seq 2: replace range 5\.\.5 is not on"):
        validate_log([first, off])
    with pytest.raises(SessionCorruptError, match="seq 2: replace does not cite"):
        validate_log([first, uncited])


def splice(seq: int, target: str, start: int, removed: int, *inserted: str) -> SessionEvent:
    return SessionEvent(
        seq=seq,
        time=1,
        type="agent/inbox/spliced",
        data=InboxSpliced(
            target=target,  # type: ignore[arg-type]
            start=start,
            removed_count=removed,
            inserted=tuple(UserMessage(id=i, content=(TextBlock(i),)) for i in inserted),
        ),
    )


def test_validate_log_refuses_impossible_splices() -> None:
    """C7.4-20: a splice outside the queue, or a duplicate pending id, is corrupt."""
    with pytest.raises(SessionCorruptError, match="seq 2: splice start=0 removed=2"):
        validate_log([splice(1, "next-turn", 0, 0, "a"), splice(2, "next-turn", 0, 2)])
    with pytest.raises(SessionCorruptError, match="seq 2: splice start=3"):
        validate_log([splice(1, "next-step", 0, 0, "a"), splice(2, "next-step", 3, 0, "b")])
    with pytest.raises(SessionCorruptError, match="seq 2: a pending message id appears twice"):
        validate_log([splice(1, "next-turn", 0, 0, "a"), splice(2, "next-step", 0, 0, "a")])
    validate_log(
        [
            splice(1, "next-turn", 0, 0, "a"),
            splice(2, "next-turn", 0, 1),
            splice(3, "next-step", 0, 0, "a"),
        ]
    )


def test_decode_log_hands_its_inbox_to_resume_and_a_plain_log_is_validated() -> None:
    """C7.4-20: a log from ``decode_log`` carries the inbox its validation folded (resume
    does not fold twice, and gets a copy); any other sequence is validated on the spot."""
    events = [splice(1, "next-turn", 0, 0, "a", "b"), splice(2, "next-turn", 0, 1)]
    log = decode_log([e.to_json() for e in events])
    assert isinstance(log, ValidatedLog) and isinstance(log, tuple)
    assert log == tuple(events)
    inbox = checked_inbox(log)
    assert [m.id for m in inbox["next-turn"]] == ["b"] and inbox["next-step"] == []
    inbox["next-turn"].clear()
    assert [m.id for m in checked_inbox(log)["next-turn"]] == ["b"]
    assert checked_inbox(tuple(events)) == checked_inbox(log)
    bad = (splice(1, "next-turn", 0, 0, "a"), splice(2, "next-step", 0, 0, "a"))
    with pytest.raises(SessionCorruptError, match="seq 2: a pending message id appears twice"):
        checked_inbox(bad)
    with pytest.raises(SessionCorruptError, match="seq 2: a pending message id appears twice"):
        decode_log([e.to_json() for e in bad])


def test_bulk_decoding_promotes_what_it_decoded_and_restores_the_collector(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A large decode leaves the collector enabled, nothing frozen, and its objects in the
    oldest generation (no walk of them at the next young collections); a small one leaves
    them young; an application's own frozen objects are left alone."""
    raw = [splice(n, "next-turn", 0, 0, f"m{n}").to_json() for n in range(1, 3001)]
    gc.collect()
    assert gc.isenabled()
    small = decode_log(raw[:50])
    assert id(small[0]) not in {id(o) for o in gc.get_objects(generation=2)}

    assert _codec._BULK < 15_000  # 3000 events make ~15k tracked objects: over the bar
    gc.collect()
    log = decode_log(raw)
    assert gc.isenabled() and gc.get_freeze_count() == 0
    oldest = {id(o) for o in gc.get_objects(generation=2)}
    assert all(id(e) in oldest for e in (log[0], log[-1]))  # moved there without a walk

    gc.disable()  # a caller that runs with the collector off keeps it off
    try:
        decode_log(raw)
        assert not gc.isenabled()
    finally:
        gc.enable()

    keep = [object() for _ in range(10)], {"app": "state"}
    gc.freeze()
    try:
        frozen = gc.get_freeze_count()
        decode_log(raw)
        assert gc.get_freeze_count() == frozen  # the application's freeze is untouched
        assert gc.isenabled()
    finally:
        gc.unfreeze()
    del keep
