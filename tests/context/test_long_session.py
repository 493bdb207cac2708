"""A 200-turn session with 2 KB tool results stays under its bound with every strategy."""

from __future__ import annotations

from typing import Any

import pytest

from steerloop import AgentOptions, Runtime, user_message
from steerloop.context import COMPACTION_PLUGIN, install_compaction

from ..conftest import SETTLE_TIMEOUT, settle
from ..logcheck import assert_well_formed, derived_problems
from ._model import agent_requests, request_tokens, simulated

BOUND = 4_000
KEEP = 1_500
TURNS = 200


@pytest.mark.parametrize("strategy", ["drop-tool-results", "window", "summarize"])
async def test_two_hundred_turns_stay_under_the_bound(strategy: Any) -> None:
    """Every request of 200 turns (each: a question, a 2 KB tool result, an answer) is under
    ``max_context_tokens`` as the provider counts it, provider-valid, and carries the current
    turn and the previous one verbatim after the summary; the log stays well formed."""
    rt = await Runtime.open(store="memory://", persona="answer briefly")
    try:
        adapter = simulated(rt, TURNS)
        install_compaction(rt, max_context_tokens=BOUND, keep_recent_tokens=KEEP, strategy=strategy)
        handle = await rt.agents.create(
            session_id="long", agent_options=AgentOptions(provider="mock", model="m")
        )
        agent = handle.agent
        questions = []
        for turn in range(1, TURNS + 1):
            question = user_message(f"question {turn}")
            questions.append(question)
            agent.followup(question)
            await settle(agent, SETTLE_TIMEOUT)
            requests = agent_requests(adapter)
            first, second = requests[-2], requests[-1]
            for request in (first, second):
                assert request_tokens(request) <= BOUND
                assert derived_problems(request.messages) == []
            # The current step's messages are never compacted; the previous turn is kept.
            assert first.messages[-1] is question
            assert [m.role for m in second.messages[-3:]] == ["user", "assistant", "tool"]
            assert second.messages[-3] is question
            if turn > 1:
                assert questions[-2] in first.messages
            adapter.requests.clear()
        session = agent.session
        compactions = [e for e in session.events if e.type == "context/compacted"]
        assert len(compactions) >= 20
        assert {e.data.strategy for e in compactions} == {strategy}
        for event in compactions:
            assert event.data.tokens_before > BOUND - 600
            assert event.data.tokens_after < event.data.tokens_before
            assert (event.data.usage is not None) == (strategy == "summarize")
        derived = session.derive_messages()
        summary = [m for m in derived if m.role == "user" and m.source.plugin == COMPACTION_PLUGIN]
        assert derived[0].role == "system"
        assert len(summary) == 1 and derived.index(summary[0]) == 1
        # The log keeps every original event: 200 questions, 200 results.
        assert sum(e.type == "tool/result" for e in session.events) == TURNS
        assert sum(e.type == "user/message" for e in session.events) == TURNS
        assert_well_formed(session)
    finally:
        await rt.close()
