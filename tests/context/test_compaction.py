"""Compaction as a durable event: projection, codec, resume, fork, manual and failed runs."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from steerloop import (
    AgentOptions,
    CancelCause,
    LlmError,
    Runtime,
    TextBlock,
    UserMessage,
    user_message,
)
from steerloop.context import (
    COMPACTION_PLUGIN,
    ContextCompacted,
    estimate_tokens,
    install_compaction,
)
from steerloop.llm._types import ModelInfo
from steerloop.session import Replace, Session
from steerloop.session._codec import decode_log, event_from_json
from steerloop.session._events import surface_message
from steerloop.testing import HANG, error_response, text_response

from ..conftest import settle, within
from ..logcheck import assert_well_formed, derived_problems
from ._model import fetch_tool, is_summary_request, make_model, request_tokens, simulated

OPTIONS = AgentOptions(provider="mock", model="m")


async def _turns(agent: Any, n: int, start: int = 1) -> None:
    for turn in range(start, start + n):
        agent.followup(user_message(f"question {turn}"))
        await settle(agent)


def _compactions(session: Any) -> list[Any]:
    return [e for e in session.events if e.type == "context/compacted"]


async def test_manual_compact_writes_one_event_that_projects_to_the_summary() -> None:
    """``agent.compact()`` on an idle agent writes exactly one ``context/compacted``: a
    ``Replace`` of the non-system nodes up to ``upto_seq`` citing each, projecting to one user
    message (plugin ``compaction``); ``derive_messages()`` is system, summary, then every
    message after ``upto_seq``; the next request equals ``derive_messages()`` (C7.6-10)."""
    rt = await Runtime.open(persona="be brief")
    try:
        adapter = simulated(rt, 10)
        install_compaction(rt, max_context_tokens=100_000, keep_recent_tokens=700,
                           strategy="drop-tool-results")  # fmt: skip
        agent = (await rt.agents.create(session_id="m", agent_options=OPTIONS)).agent
        await _turns(agent, 4)
        session = agent.session
        before = session.derive_messages()
        surface = session.surface_seqs()
        count = len(session.events)
        estimated = estimate_tokens(session)
        event = await within(agent.compact())
        assert len(session.events) == count + 1 and session.events[-1] is event
        data = event.data
        assert isinstance(data, ContextCompacted) and data.strategy == "drop-tool-results"
        assert isinstance(event.surface_op, Replace)
        assert event.surface_op == Replace(surface[1], data.upto_seq)
        shadowed = surface[1 : surface.index(data.upto_seq) + 1]
        assert event.source_event_seqs == tuple(shadowed)
        after = session.derive_messages()
        later = surface[surface.index(data.upto_seq) + 1 :]
        kept = [m for m in (surface_message(session.event(s)) for s in later) if m is not None]
        assert after[0] == before[0] and after[0].role == "system"
        assert isinstance(after[1], UserMessage)
        assert after[1].source.kind == "plugin" and after[1].source.plugin == COMPACTION_PLUGIN
        assert after[1].content == data.summary
        assert after[2:] == kept and before[-len(kept) :] == kept
        assert derived_problems(after) == []
        first = data.summary[0]
        assert isinstance(first, TextBlock)
        text = first.text
        assert "User: question 1" in text
        assert "[result of fetch, call id c1: 2048 characters, omitted]" in text
        assert data.tokens_before == estimated
        assert data.tokens_after is not None and data.tokens_after < data.tokens_before
        # Nothing old enough left: a second compact writes nothing.
        assert await within(agent.compact()) is None
        assert len(session.events) == count + 1
        await _turns(agent, 1, start=5)
        request = adapter.requests[-2]
        assert list(request.messages[:-1]) == after
        assert_well_formed(session)
    finally:
        await rt.close()


async def test_compact_refuses_a_running_agent_and_needs_a_policy(h: Any) -> None:
    """``agent.compact()`` raises ``RuntimeError`` without ``install_compaction`` and while a
    turn runs; nothing is written either way."""
    agent = await h.agent(HANG)
    with pytest.raises(RuntimeError, match="install_compaction"):
        await agent.compact()
    install_compaction(h.rt, max_context_tokens=1_000, strategy="window")
    agent.followup(user_message("hi"))
    count = len(agent.session.events)
    with pytest.raises(RuntimeError, match="not idle"):
        await agent.compact()
    assert len(agent.session.events) == count
    agent.cancel(CancelCause.user())
    await settle(agent)
    assert not _compactions(agent.session)


@pytest.mark.parametrize("fork_after", [False, True])
async def test_codec_resume_and_fork_keep_the_compaction(tmp_path: Path, fork_after: bool) -> None:
    """On a SQLite file: every event round-trips through JSON; a resumed session derives the
    same messages as the live one; a fork at a seq before the compaction derives the parent's
    messages at that seq (no summary), one after it derives them with the summary; both go on
    with provider-valid requests."""
    store = f"sqlite:///{tmp_path / 'log.db'}"
    rt = await Runtime.open(store=store, persona="be brief")
    try:
        simulated(rt, 20)
        install_compaction(rt, max_context_tokens=1_500, keep_recent_tokens=700,
                           strategy="window")  # fmt: skip
        handle = await rt.agents.create(session_id="p", agent_options=OPTIONS)
        await _turns(handle.agent, 6)
        live = handle.agent.session
        compacted = _compactions(live)
        assert compacted
        for event in live.events:
            assert event_from_json(json.loads(json.dumps(event.to_json()))) == event
        derived = live.derive_messages()
        await handle.dispose()
        resumed = await rt.agents.resume(resume_session_id="p", agent_options=OPTIONS)
        assert resumed.agent.session.derive_messages() == derived
        cut = compacted[0].seq + (1 if fork_after else -1)
        expected = Session._create("x", seed=live.events[:cut], repair=False).derive_messages()
        has_summary = any(
            m.role == "user" and m.source.plugin == COMPACTION_PLUGIN for m in expected
        )
        assert has_summary == fork_after
        await resumed.agent.session.flush()
        child = await rt.sessions.fork("p", cut, "child")
        assert child.derive_messages() == expected
        forked = await rt.agents.resume(resume_session_id="child", agent_options=OPTIONS)
        await _turns(forked.agent, 2, start=100)
        assert_well_formed(forked.agent.session)
        stored = await rt.sessions.persistence.load("child")  # type: ignore[union-attr]
        assert decode_log([e.to_json() for e in stored])
    finally:
        await rt.close()


async def test_a_failed_summary_leaves_the_history_and_is_reported(h: Any) -> None:
    """A summary request that fails writes no ``context/compacted``: the history is unchanged,
    ``context/compaction-failed`` reports it, the turn's request goes out anyway; a manual
    ``compact()`` raises the failure."""
    failures: list[Any] = []
    install_compaction(h.rt, max_context_tokens=1_200, keep_recent_tokens=600,
                       strategy="summarize")  # fmt: skip
    h.rt.hooks.on("context/compaction-failed", failures.append)
    model = make_model()
    h.rt.tools.register(fetch_tool())

    def flaky(request: Any) -> Any:
        if is_summary_request(request):
            return error_response("overloaded", "try later")
        return model(request)

    agent = await h.agent(*[flaky] * 40)
    await _turns(agent, 3)
    assert failures and isinstance(failures[0].error, LlmError)
    assert failures[0].strategy == "summarize"
    assert not _compactions(agent.session)
    assert all(e.type != "turn/end" or e.data.reason.kind == "completed"
               for e in agent.session.events)  # fmt: skip
    before = agent.session.derive_messages()
    with pytest.raises(LlmError, match="try later"):
        await agent.compact()
    assert agent.session.derive_messages() == before
    assert not _compactions(agent.session)


async def test_a_cancel_during_the_summary_aborts_the_turn_and_writes_nothing(h: Any) -> None:
    """The summary request has its own signal linked to the turn's: a cancel while it streams
    ends the turn ``aborted`` with no ``context/compacted`` and no ``step/start``."""
    install_compaction(h.rt, max_context_tokens=1_200, keep_recent_tokens=600,
                       strategy="summarize")  # fmt: skip
    h.rt.tools.register(fetch_tool())
    model = make_model()
    summarizing = asyncio.Event()

    def entry(request: Any) -> Any:
        if is_summary_request(request):
            summarizing.set()
            return HANG
        return model(request)

    agent = await h.agent(*[entry] * 40)
    for _ in range(10):
        agent.followup(user_message("q"))
        idle = asyncio.ensure_future(agent.when_idle())
        summary = asyncio.ensure_future(summarizing.wait())
        await within(asyncio.wait([idle, summary], return_when=asyncio.FIRST_COMPLETED))
        idle.cancel()
        summary.cancel()
        if summarizing.is_set():
            break
    assert summarizing.is_set()
    assert agent.status == "running"
    agent.cancel(CancelCause.user())
    await settle(agent)
    last_end = [e for e in agent.session.events if e.type == "turn/end"][-1]
    assert last_end.data.reason.kind == "aborted"
    assert not _compactions(agent.session)
    assert agent.session.events[-2].type != "step/start"


def test_bad_input_is_refused_at_install() -> None:
    """``keep_recent_tokens >= max_context_tokens``, non-positive values and unknown
    strategies are ``ValueError`` at install."""
    rt: Any = type("R", (), {})()
    for kwargs in (
        {"max_context_tokens": 1_000, "keep_recent_tokens": 1_000},
        {"max_context_tokens": 1_000, "keep_recent_tokens": 5_000},
        {"max_context_tokens": 0},
        {"max_context_tokens": -5},
        {"keep_recent_tokens": 0},
        {"max_context_tokens": True},
        {"max_context_tokens": 1_000, "strategy": "forget"},
    ):
        with pytest.raises(ValueError):
            install_compaction(rt, **kwargs)


async def test_an_unknown_context_window_needs_max_context_tokens(h: Any) -> None:
    """Without ``max_context_tokens`` the model's window is the bound; a model whose window is
    unknown ends the turn ``error`` naming the fix, and no request is sent."""
    install_compaction(h.rt, strategy="window")
    agent = await h.agent(text_response("hi"))
    agent.followup(user_message("hello"))
    await settle(agent)
    end = agent.session.events[-1]
    assert end.type == "turn/end" and end.data.reason.kind == "error"
    assert "pass max_context_tokens" in end.data.reason.error.message
    assert h.adapter.requests == []
    h.adapter.model_info = ModelInfo(context_window=2_000)
    agent.followup(user_message("again"))
    await settle(agent)
    assert agent.session.events[-1].data.reason.kind == "completed"
    assert request_tokens(h.adapter.requests[-1]) < 2_000


async def test_a_failing_summary_is_asked_once_per_turn(h: Any) -> None:
    """After an automatic summary failed, the rest of that turn's steps send no further
    summary request; the next turn tries again."""
    install_compaction(h.rt, max_context_tokens=1_200, keep_recent_tokens=600,
                       strategy="summarize")  # fmt: skip
    h.rt.tools.register(fetch_tool())
    model = make_model()
    asked: list[int] = []

    def flaky(request: Any) -> Any:
        if is_summary_request(request):
            asked.append(agent.session.last_turn)
            return error_response("overloaded", "try later")
        return model(request)

    agent = await h.agent(*[flaky] * 60)
    await _turns(agent, 6)
    assert len(asked) >= 3 and asked == sorted(set(asked))


def test_hostile_compaction_events_are_refused() -> None:
    """A ``context/compacted`` that is not a ``Replace`` ending at its ``upto_seq`` is refused
    by ``Session.append`` (nothing appended) and by the loader (``SessionCorruptError``)."""
    from steerloop import SessionCorruptError, SessionEvent

    session = Session._create("hostile")
    for text in ("a", "b", "c"):
        session.append(user_message(text), surface_op="append")
    data = ContextCompacted(upto_seq=2, summary=(), strategy="window")
    with pytest.raises(ValueError):
        session.append(data, surface_op=Replace(1, 3),
                       source_event_seqs=(1, 2, 3))  # fmt: skip
    with pytest.raises(ValueError):
        session.append(data, surface_op="append")
    with pytest.raises(ValueError):
        session.append("context/compacted", {"upto_seq": 2}, surface_op=Replace(1, 2),
                       source_event_seqs=(1, 2))  # fmt: skip
    with pytest.raises(ValueError, match="cite"):
        session.append(data, surface_op=Replace(1, 2), source_event_seqs=(1,))
    assert len(session.events) == 3
    good = session.append(data, surface_op=Replace(1, 2),
                          source_event_seqs=(1, 2))  # fmt: skip
    raw = [e.to_json() for e in session.events]
    assert decode_log(raw)[-1] == good
    for bad in (
        {**raw[3], "surface_op": "append"},
        {**raw[3], "data": {**raw[3]["data"], "upto_seq": 1}},
        {**raw[3], "data": {**raw[3]["data"], "strategy": ""}},
        {**raw[3], "data": {**raw[3]["data"], "summary": [{"type": "image"}]}},
        {**raw[3], "data": {**raw[3]["data"], "tokens_after": -1}},
        {**raw[3], "data": {**raw[3]["data"], "usage": {"input_tokens": "many"}}},
    ):
        with pytest.raises(SessionCorruptError, match="seq 4"):
            decode_log([*raw[:3], bad])
    assert isinstance(good, SessionEvent)


async def test_an_in_history_system_message_inside_the_range_comes_back(h: Any) -> None:
    """On a route that reads in-history system messages, a prompt change appended a second
    system node; a compaction over it shadows it, and the next attempt's projection appends
    the current prompt again, so the request still ends its system text with the current
    prompt (C7.6-4) and equals ``derive_messages()`` (C7.6-10)."""
    prompt = {"text": "A"}
    h.rt.system_prompt.add_section("p", lambda agent: prompt["text"])
    h.adapter.model_info = ModelInfo(reads_in_history_system=True)
    install_compaction(h.rt, max_context_tokens=100_000, keep_recent_tokens=10,
                       strategy="window")  # fmt: skip
    agent = await h.agent(*[text_response(f"a{i}") for i in range(1, 5)])
    await _turns(agent, 1)
    prompt["text"] = "B"
    await _turns(agent, 2, start=2)
    systems = [m for m in agent.session.derive_messages() if m.role == "system"]
    assert [m.content[0].text for m in systems] == ["A", "B"]
    event = await within(agent.compact())
    systems_b = [
        e
        for e in agent.session.events
        if e.type == "system/message" and e.data.message.content[0].text == "B"
    ]
    appended = [e.seq for e in systems_b]
    assert appended[0] in event.source_event_seqs
    await _turns(agent, 1, start=4)
    request = h.adapter.requests[-1]
    assert list(request.messages) == agent.session.derive_messages()[:-1]
    texts = [m.content[0].text for m in request.messages if m.role == "system"]
    assert texts[-1] == "B"
    assert derived_problems(request.messages) == []
