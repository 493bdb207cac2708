"""Usage limits end turns ``blocked`` at exactly the named count."""

from __future__ import annotations

from typing import Any

import pytest

from steerloop import PreStepDecision, define_tool, user_message
from steerloop.context import install_limits, session_usage
from steerloop.llm._types import TokenUsage
from steerloop.llm.chunks import UsageChunk
from steerloop.testing import text_response, tool_call_response, tool_calls_response

from ..conftest import compact, settle


def _tool(ran: list[str]) -> Any:
    async def execute(args: Any, exec: Any) -> str:
        ran.append(exec.call_id)
        return "ok"

    return define_tool(name="t", description="a tool", parameters={"type": "object"},
                       execute=execute)  # fmt: skip


def _end(agent: Any) -> Any:
    ends = [e for e in agent.session.events if e.type == "turn/end"]
    return ends[-1].data.reason


async def test_pre_step_reject_reason_is_the_turn_end_detail(h: Any) -> None:
    """EVENTS.md §4: ``reject(reason)`` ends the turn ``blocked`` with ``detail`` = reason;
    ``reject()`` leaves it out."""
    reasons = iter(["quota spent", None])

    async def reject(payload: Any, next_: Any) -> PreStepDecision:
        return PreStepDecision.reject(next(reasons))

    h.rt.hooks.on("agent/pre-step", reject)
    agent = await h.agent()
    agent.followup(user_message("u1"))
    await settle(agent)
    assert _end(agent).kind == "blocked" and _end(agent).detail == "quota spent"
    agent.followup(user_message("u2"))
    await settle(agent)
    assert _end(agent).kind == "blocked" and _end(agent).detail is None
    assert "detail" not in agent.session.events[-1].to_json()["data"]["reason"]
    with pytest.raises(ValueError):
        PreStepDecision.reject(42)  # type: ignore[arg-type]


async def test_max_steps_per_turn(h: Any) -> None:
    """With ``max_steps_per_turn=3`` a model that always calls a tool gets exactly 3
    requests; the 4th step is refused before its ``step/start``."""
    ran: list[str] = []
    h.rt.tools.register(_tool(ran))
    install_limits(h.rt, max_steps_per_turn=3)
    agent = await h.agent(*[tool_call_response(f"c{i}", "t", {}) for i in range(1, 6)])
    agent.followup(user_message("go"))
    await settle(agent)
    assert len(h.adapter.requests) == 3
    assert ran == ["c1", "c2", "c3"]
    assert compact(agent.session, only=("S", "T")) == [
        "T+1", "S+1.1", "S-1.1", "S+1.2", "S-1.2", "S+1.3", "S-1.3", "T-1:blocked",
    ]  # fmt: skip
    assert _end(agent).detail == "max_steps_per_turn"
    # The next turn starts counting again.
    h.adapter.add(text_response("fine"))
    agent.followup(user_message("again"))
    await settle(agent)
    assert _end(agent).kind == "completed"


async def test_max_tool_calls_per_turn(h: Any) -> None:
    """With ``max_tool_calls_per_turn=2`` the 3rd call of a turn is answered ``DENIED`` and
    not run, and the turn ends ``blocked`` before another request; a new turn counts anew."""
    ran: list[str] = []
    h.rt.tools.register(_tool(ran))
    install_limits(h.rt, max_tool_calls_per_turn=2)
    agent = await h.agent(
        tool_call_response("c1", "t", {}),
        tool_calls_response([("c2", "t", {}), ("c3", "t", {})]),
        tool_call_response("c4", "t", {}),
        text_response("done"),
    )
    agent.followup(user_message("go"))
    await settle(agent)
    assert ran == ["c1", "c2"]
    results = [e.data for e in agent.session.events if e.type == "tool/result"]
    assert [(r.message.call_id, r.error.code if r.error else None) for r in results] == [
        ("c1", None), ("c2", None), ("c3", "DENIED"),
    ]  # fmt: skip
    assert "max_tool_calls_per_turn" in results[-1].message.content[0].text
    assert len(h.adapter.requests) == 2
    assert _end(agent).kind == "blocked" and _end(agent).detail == "max_tool_calls_per_turn"
    agent.followup(user_message("again"))
    await settle(agent)
    assert ran == ["c1", "c2", "c4"] and _end(agent).kind == "completed"


def _reply(tokens: int, call: str | None = None) -> Any:
    usage = UsageChunk(usage=TokenUsage(input_tokens=tokens, output_tokens=10))
    chunks = tool_call_response(call, "t", {}) if call else text_response("ok")
    return [*chunks[:-1], usage, chunks[-1]]


async def test_max_tokens_per_turn(h: Any) -> None:
    """Reported usage plus the next request's estimated input: with 1,000 input + 10 output
    tokens per request and a 3,500 limit, the 4th request (3,030 spent + ~1,000) is refused."""
    ran: list[str] = []
    h.rt.tools.register(_tool(ran))
    install_limits(h.rt, max_tokens_per_turn=3_500)
    agent = await h.agent(*[_reply(1_000, f"c{i}") for i in range(1, 6)])
    agent.followup(user_message("go"))
    await settle(agent)
    assert len(h.adapter.requests) == 3
    assert session_usage(agent.session) == (3_030, 3_030)
    assert _end(agent).kind == "blocked" and _end(agent).detail == "max_tokens_per_turn"


async def test_max_session_tokens(h: Any) -> None:
    """``max_session_tokens`` counts every turn: after two turns of 1,010 tokens a third
    (2,020 + ~1,000 > 2,600) is refused before its request."""
    install_limits(h.rt, max_session_tokens=2_600)
    agent = await h.agent(_reply(1_000), _reply(1_000), _reply(1_000))
    for text in ("a", "b", "c"):
        agent.followup(user_message(text))
        await settle(agent)
    assert len(h.adapter.requests) == 2
    kinds = [(e.data.reason.kind, e.data.reason.detail)
             for e in agent.session.events if e.type == "turn/end"]  # fmt: skip
    assert kinds == [("completed", None), ("completed", None), ("blocked", "max_session_tokens")]


@pytest.mark.parametrize(
    "kwargs",
    [{"max_steps_per_turn": 0}, {"max_tool_calls_per_turn": -1}, {"max_tokens_per_turn": 1.5},
     {"max_session_tokens": True}, {"max_steps_per_turn": "3"}],
)  # fmt: skip
def test_bad_limits_are_refused(kwargs: dict[str, Any]) -> None:
    rt: Any = object()
    with pytest.raises(ValueError):
        install_limits(rt, **kwargs)
