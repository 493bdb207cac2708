"""Durable approvals (EVENTS.md §2.4a): ``ToolDecision.ask`` holds a call; the decision is the
``tool/approval-decided`` event ``agent.decide_approval`` writes; a cancel ends the wait."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from steerloop import CancelCause, ToolDecision, user_message
from steerloop.errors import ApprovalError, SessionCorruptError
from steerloop.messages import ToolResultMessage
from steerloop.session import pending_approvals
from steerloop.session._codec import event_from_json, validate_log
from steerloop.session.events import ApprovalDecided, ApprovalRequested
from steerloop.testing import text_response, tool_call_response, tool_calls_response
from steerloop.tools import ApprovalHookPayload, ToolHookPayload

from ..conftest import Harness, compact, events_of, label, settle
from ..logcheck import assert_well_formed
from ..support import Bench, Fault, fail_append, on_event, yield_loop

APPROVAL = ("call(", "ask(", "decide(", "result(", "S-", "T-")


def ask_for(*names: str, reason: str | None = "may write") -> Any:
    """A pre-execute policy that asks about calls of ``names``."""

    def policy(payload: ToolHookPayload) -> ToolDecision | None:
        return ToolDecision.ask(reason) if payload.exec.name in names else None

    return policy


async def requested(agent: Any, call_id: str) -> None:
    """Wait (bounded) until ``call_id`` is pending."""
    for _ in range(500):
        if any(r.call_id == call_id for r in agent.pending_approvals):
            return
        await asyncio.sleep(0)
    raise AssertionError(f"{call_id} never became pending: {compact(agent.session)}")


async def test_allow_runs_the_call_after_the_decision(h: Harness) -> None:
    """§2.4a: call · ask · decide(allow) · result; decide_approval writes synchronously and
    returns the decided event's seq; pending_approvals lists the request until then."""
    bench = Bench()
    h.rt.tools.register(bench.tool("write"))
    h.rt.hooks.on("tools/pre-execute", ask_for("write"))
    agent = await h.agent(tool_call_response("c1", "write", {"path": "a"}), text_response("done"))
    agent.followup(user_message("u1"))
    await requested(agent, "c1")
    assert agent.pending_approvals == (
        ApprovalRequested(
            turn=1,
            step=1,
            call_id="c1",
            name="write",
            arguments='{"path": "a"}',
            reason="may write",
        ),
    )
    assert pending_approvals(agent.session.events) == agent.pending_approvals
    assert bench.trace == []  # held: the body has not run
    before = agent.session.next_seq
    seq = agent.decide_approval("c1", "allow", by="test")
    assert seq == before and agent.session.events[-1].seq == seq  # written in the call
    assert agent.session.events[-1].data == ApprovalDecided(
        call_id="c1", decision="allow", by="test"
    )
    assert agent.pending_approvals == ()
    await settle(agent)
    assert compact(agent.session) == [
        "ins(nt,u1)", "T+1", "claim(nt,u1)", "S+1.1", "sys", "user(u1)", "hdr(initial)", "ctx",
        "msg", "call(c1)", "ask(c1)", "decide(c1,allow)", "result(c1)", "S-1.1",
        "S+1.2", "msg", "S-1.2", "T-1:completed",
    ]  # fmt: skip
    assert bench.trace == ["begin:c1", "end:c1"]
    assert pending_approvals(agent.session.events) == ()
    assert_well_formed(agent.session)
    validate_log(agent.session.events)
    for event in agent.session.events:  # the two records round-trip through their JSON
        assert event_from_json(event.to_json()) == event


async def test_deny_answers_denied_with_the_reason(h: Harness) -> None:
    """§2.4a, C7.9-15: deny gives result(c1, DENIED) with the reason; the body never runs;
    the model sees the refusal."""
    bench = Bench()
    h.rt.tools.register(bench.tool("write"))
    h.rt.hooks.on("tools/pre-execute", ask_for("write"))
    agent = await h.agent(tool_call_response("c1", "write", {}), text_response("ok"))
    agent.followup(user_message("u1"))
    await requested(agent, "c1")
    agent.decide_approval("c1", "deny", reason="not today", by="http")
    await settle(agent)
    assert compact(agent.session, only=APPROVAL) == [
        "call(c1)", "ask(c1)", "decide(c1,deny)", "result(c1,DENIED)", "S-1.1", "S-1.2",
        "T-1:completed",
    ]  # fmt: skip
    assert bench.trace == []
    last = h.adapter.requests[1].messages[-1]
    assert isinstance(last, ToolResultMessage)
    assert (last.call_id, last.is_error, label(last)) == ("c1", True, "not today")
    assert_well_formed(agent.session)


async def test_cancel_while_pending_writes_no_decision(h: Harness) -> None:
    """§2.4a + C7.8-12: a cancel ends the wait; the request is closed by the call's result
    ABORTED_BEFORE_DISPATCH (no decision written), the turn ends aborted, and a decision
    after it is refused with nothing written."""
    bench = Bench()
    h.rt.tools.register(bench.tool("write"))
    h.rt.hooks.on("tools/pre-execute", ask_for("write"))
    agent = await h.agent(tool_call_response("c1", "write", {}))
    agent.followup(user_message("u1"))
    await requested(agent, "c1")
    agent.cancel(CancelCause.user())
    assert agent.pending_approvals == ()  # gone at once, before the turn converges
    with pytest.raises(ApprovalError) as refused:
        agent.decide_approval("c1", "allow")  # same tick as the cancel
    assert refused.value.state == "closed"
    await settle(agent)
    assert compact(agent.session)[-6:] == [
        "msg", "call(c1)", "ask(c1)", "result(c1,ABORTED_BEFORE_DISPATCH)", "S-1.1",
        "T-1:aborted",
    ]  # fmt: skip
    count = len(agent.session.events)
    with pytest.raises(ApprovalError, match="no longer waits") as late:
        agent.decide_approval("c1", "allow")
    assert late.value.state == "closed"
    assert len(agent.session.events) == count
    assert bench.trace == []
    assert pending_approvals(agent.session.events) == ()
    assert_well_formed(agent.session)
    validate_log(agent.session.events)


async def test_hostile_decisions_are_refused_and_write_nothing(h: Harness) -> None:
    """A decision other than allow/deny, an unknown call id, a bad reason type and a second
    decision are each refused with nothing written."""
    bench = Bench()
    h.rt.tools.register(bench.tool("write"))
    h.rt.hooks.on("tools/pre-execute", ask_for("write"))
    agent = await h.agent(tool_call_response("c1", "write", {}), text_response("ok"))
    agent.followup(user_message("u1"))
    await requested(agent, "c1")
    count = len(agent.session.events)
    with pytest.raises(ValueError, match="'allow' or 'deny'"):
        agent.decide_approval("c1", "maybe")
    with pytest.raises(ValueError, match="reason"):
        agent.decide_approval("c1", "allow", reason=5)
    with pytest.raises(ApprovalError, match="no approval was requested") as unknown:
        agent.decide_approval("nope", "allow")
    assert unknown.value.state == "unknown"
    assert len(agent.session.events) == count
    assert [r.call_id for r in agent.pending_approvals] == ["c1"]
    agent.decide_approval("c1", "deny")
    with pytest.raises(ApprovalError, match="already decided") as twice:
        agent.decide_approval("c1", "allow")
    assert twice.value.state == "decided"
    await settle(agent)
    with pytest.raises(ApprovalError, match="already decided"):
        agent.decide_approval("c1", "deny")
    assert compact(agent.session, only=("ask(", "decide(", "result(")) == [
        "ask(c1)", "decide(c1,deny)", "result(c1,DENIED)",
    ]  # fmt: skip
    assert bench.trace == []


async def test_a_held_safe_call_lets_later_calls_run_and_commits_first(h: Harness) -> None:
    """C7.9-6/C7.9-11 with a hold: a held concurrency-safe call waits in its own task while
    the next safe call starts and finishes; results still commit in model order."""
    bench = Bench()
    h.rt.tools.register(bench.tool("p", safe=True))
    h.rt.hooks.on(
        "tools/pre-execute", lambda p: ToolDecision.ask() if p.exec.call_id == "p1" else None
    )
    agent = await h.agent(
        tool_calls_response([("p1", "p", {}), ("p2", "p", {})]), text_response("done")
    )
    agent.followup(user_message("u1"))
    await requested(agent, "p1")
    await bench.wait_started("p2")
    await yield_loop()
    assert bench.trace == ["begin:p2", "end:p2"]
    assert compact(agent.session, only=APPROVAL) == ["call(p1)", "ask(p1)", "call(p2)"]
    agent.decide_approval("p1", "allow")
    await settle(agent)
    assert compact(agent.session, only=APPROVAL) == [
        "call(p1)", "ask(p1)", "call(p2)", "decide(p1,allow)", "result(p1)", "result(p2)",
        "S-1.1", "S-1.2", "T-1:completed",
    ]  # fmt: skip
    assert bench.trace == ["begin:p2", "end:p2", "begin:p1", "end:p1"]
    assert_well_formed(agent.session)


async def test_a_held_exclusive_call_is_still_a_barrier(h: Harness) -> None:
    """C7.9-7 counterexample: a held exclusive call blocks the calls after it — p2's
    tool/call is written only after e1 was decided and committed."""
    bench = Bench()
    h.rt.tools.register(bench.tool("e"))
    h.rt.tools.register(bench.tool("p", safe=True))
    h.rt.hooks.on("tools/pre-execute", ask_for("e"))
    agent = await h.agent(
        tool_calls_response([("e1", "e", {}), ("p2", "p", {})]), text_response("done")
    )
    agent.followup(user_message("u1"))
    await requested(agent, "e1")
    await yield_loop()
    assert compact(agent.session, only=APPROVAL) == ["call(e1)", "ask(e1)"]
    assert bench.trace == []
    agent.decide_approval("e1", "allow")
    await settle(agent)
    assert compact(agent.session, only=APPROVAL) == [
        "call(e1)", "ask(e1)", "decide(e1,allow)", "result(e1)", "call(p2)", "result(p2)",
        "S-1.1", "S-1.2", "T-1:completed",
    ]  # fmt: skip
    assert bench.trace == ["begin:e1", "end:e1", "begin:p2", "end:p2"]


async def test_cancel_with_a_held_call_and_a_running_one(h: Harness) -> None:
    """C7.8-12 with a hold: the running body drains (ABORTED), the held one ends
    ABORTED_BEFORE_DISPATCH without a decision, unstarted calls are synthesised."""
    bench = Bench()
    h.rt.tools.register(bench.tool("p", safe=True))
    h.rt.tools.register(bench.tool("e"))
    h.rt.hooks.on(
        "tools/pre-execute", lambda p: ToolDecision.ask() if p.exec.call_id == "p1" else None
    )
    bench.gate("p2")
    agent = await h.agent(tool_calls_response([("p1", "p", {}), ("p2", "p", {}), ("e3", "e", {})]))
    agent.followup(user_message("u1"))
    await requested(agent, "p1")
    await bench.wait_started("p2")
    agent.cancel(CancelCause.user())
    bench.release("p2")
    await settle(agent)
    assert compact(agent.session, only=APPROVAL) == [
        "call(p1)", "ask(p1)", "call(p2)", "result(p1,ABORTED_BEFORE_DISPATCH)",
        "result(p2,ABORTED)", "call(e3)", "result(e3,ABORTED_BEFORE_DISPATCH)", "S-1.1",
        "T-1:aborted",
    ]  # fmt: skip
    assert_well_formed(agent.session)


async def test_an_answerer_on_the_hook_may_decide_synchronously(h: Harness) -> None:
    """``tools/approval-requested`` fires after the request is durable, with the exec and the
    request's seq; a listener may decide at once."""
    bench = Bench()
    h.rt.tools.register(bench.tool("write"))
    h.rt.hooks.on("tools/pre-execute", ask_for("write", reason=None))
    seen: list[tuple[str, int, str | None]] = []

    def answer(payload: ApprovalHookPayload) -> None:
        agent = payload.exec.agent
        seen.append((payload.exec.call_id, payload.seq, payload.request.reason))
        assert agent.session.events[payload.seq - 1].data == payload.request
        agent.decide_approval(payload.exec.call_id, "allow", by="hook")  # type: ignore[attr-defined]

    h.rt.hooks.on("tools/approval-requested", answer)
    agent = await h.agent(tool_call_response("c1", "write", {}), text_response("ok"))
    agent.followup(user_message("u1"))
    await settle(agent)
    ask = events_of(agent.session, "tool/approval-requested")[0]
    assert seen == [("c1", ask.seq, None)]
    assert compact(agent.session, only=("ask(", "decide(", "result(")) == [
        "ask(c1)", "decide(c1,allow)", "result(c1)",
    ]  # fmt: skip


async def test_a_scheduler_failure_does_not_wait_for_a_decision(h: Harness) -> None:
    """C7.9-20 + C7.10-1: when the scheduler's own step fails while a safe call is held,
    the hold ends (no decision will come) and recovery answers the held call
    TOOL_NOT_STARTED (its body never ran), not TOOL_OUTCOME_UNKNOWN."""
    bench = Bench()
    h.rt.tools.register(bench.tool("p", safe=True))
    h.rt.hooks.on(
        "tools/pre-execute", lambda p: ToolDecision.ask() if p.exec.call_id == "p1" else None
    )
    agent = await h.agent(tool_calls_response([("p1", "p", {}), ("p2", "p", {})]))
    fail_append(agent.session, on_event("p2", "tool/call"))
    agent.followup(user_message("u1"))
    await settle(agent)
    assert compact(agent.session, only=APPROVAL) == [
        "call(p1)", "ask(p1)", "result(p1,TOOL_NOT_STARTED)", "result(p2,TOOL_NOT_STARTED)",
        "S-1.1", "T-1:error",
    ]  # fmt: skip
    assert bench.trace == []
    assert agent.pending_approvals == ()
    assert Fault.__name__ in str(events_of(agent.session, "turn/end")[0].data.reason.error)


def _log(*items: dict[str, Any]) -> list[Any]:
    return [event_from_json({"seq": i, "time": 0, **item}) for i, item in enumerate(items, 1)]


CALL = {"type": "tool/call", "data": {"turn": 1, "step": 1, "call_id": "c1", "name": "w",
                                      "arguments": ""}}  # fmt: skip
ASK = {"type": "tool/approval-requested",
       "data": {"turn": 1, "step": 1, "call_id": "c1", "name": "w", "arguments": ""}}  # fmt: skip
ALLOW = {"type": "tool/approval-decided", "data": {"call_id": "c1", "decision": "allow"}}


def test_stored_approval_events_are_checked() -> None:
    """Hostile stored rows: a decision with no request, a second decision, a request before
    its call, an unknown decision value are refused naming the seq; a paired log passes."""
    validate_log(_log(CALL, ASK, ALLOW))
    assert pending_approvals(_log(CALL, ASK)) == (
        ApprovalRequested(turn=1, step=1, call_id="c1", name="w", arguments=""),
    )
    with pytest.raises(SessionCorruptError, match=r"seq 2 .*no pending approval request"):
        validate_log(_log(CALL, ALLOW))
    with pytest.raises(SessionCorruptError, match=r"seq 4 .*already decided"):
        validate_log(_log(CALL, ASK, ALLOW, ALLOW))
    with pytest.raises(SessionCorruptError, match=r"seq 1 .*no open tool/call"):
        validate_log(_log(ASK, CALL))
    with pytest.raises(SessionCorruptError, match=r"seq 3 .*already asked"):
        validate_log(_log(CALL, ASK, ASK))
    with pytest.raises(SessionCorruptError, match="seq 3: unknown approval decision 'maybe'"):
        _log(CALL, ASK, {**ALLOW, "data": {"call_id": "c1", "decision": "maybe"}})


def test_ask_takes_an_optional_string_reason() -> None:
    assert ToolDecision.ask() == ToolDecision("ask", None)
    assert ToolDecision.ask("why").reason == "why"
    with pytest.raises(ValueError, match="string or None"):
        ToolDecision.ask(3)  # type: ignore[arg-type]
