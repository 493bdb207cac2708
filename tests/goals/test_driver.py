"""The goal-round driver, scripted end to end; logs asserted with ``glog`` (``compact`` +
``goal:<action>``)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from steerloop import AgentOptions, CancelCause, PreStepDecision, Runtime
from steerloop.goals import (
    ROUND_CAP_REACHED,
    ROUND_REJECTED,
    GoalDriver,
    install_goals,
)
from steerloop.testing import HANG, text_response, tool_call_response

from ..conftest import Harness, events_of, u, within
from ._log import glog

OPTIONS = AgentOptions(provider="mock", model="m")


def rounds(cap: int, *numbers: int) -> list[str]:
    return [f"goal round {n}/{cap}: ship it" for n in numbers]


async def settled(driver: GoalDriver, agent: Any) -> None:
    await within(driver.when_settled(agent))


def complete_call(call_id: str, revision: int) -> Any:
    return tool_call_response(call_id, "complete_goal", {"revision": revision, "evidence": "green"})


async def test_a_goal_completed_by_the_model_in_round_3_runs_exactly_3_rounds(
    h: Harness,
) -> None:
    driver = install_goals(h.rt)
    initiators: list[Any] = []

    def inserted(payload: Any) -> None:  # rounds are queued from host context (C7.1-5)
        initiators.append(h.rt.agents.current_initiator())

    h.rt.hooks.on("agent/inbox/inserted", inserted)
    agent = await h.agent(
        text_response("r1"), text_response("r2"), complete_call("c1", 1), text_response("done")
    )
    goal = driver.goal_of(agent)
    goal.create("ship it", round_cap=5, expected_revision=0)
    await settled(driver, agent)
    g1, g2, g3 = rounds(5, 1, 2, 3)
    assert glog(agent.session) == [
        "goal:create",
        f"ins(nt,{g1})", "T+1", f"claim(nt,{g1})", "S+1.1", "sys", f"user({g1})",
        "goal:round 1/5", "hdr(initial)", "ctx", "msg", "S-1.1", "T-1:completed",
        f"ins(nt,{g2})", "T+2", f"claim(nt,{g2})", "S+2.1", f"user({g2})",
        "goal:round 2/5", "msg", "S-2.1", "T-2:completed",
        f"ins(nt,{g3})", "T+3", f"claim(nt,{g3})", "S+3.1", f"user({g3})",
        "goal:round 3/5", "msg", "call(c1)", "goal:complete", "result(c1)", "S-3.1",
        "S+3.2", "msg", "S-3.2", "T-3:completed",
    ]  # fmt: skip
    assert goal.current is not None
    assert (goal.current.phase, goal.current.rounds_started) == ("complete", 3)
    assert goal.current.evidence == "green" and not goal.armed
    assert len(h.adapter.requests) == 4 and h.adapter.remaining == 0
    assert initiators == [None, None, None]
    # The round prompt is a goal-sourced message naming the objective and round/cap.
    first = events_of(agent.session, "user/message")[0].data
    assert first.source.kind == "goal"
    assert dict(first.source.extra or {}) == {"revision": 1, "round": 1, "cap": 5}
    assert "complete_goal with revision 1" in first.content[1].text


async def test_a_cap_of_2_stops_after_2_rounds_and_blocks_with_a_clear_code(h: Harness) -> None:
    driver = install_goals(h.rt)
    agent = await h.agent(text_response("r1"), text_response("r2"))
    goal = driver.goal_of(agent)
    goal.create("ship it", round_cap=2, expected_revision=0)
    await settled(driver, agent)
    assert glog(agent.session, only=("goal:", "T+", "T-", "user(")) == [
        "goal:create",
        "T+1", f"user({rounds(2, 1)[0]})", "goal:round 1/2", "T-1:completed",
        "T+2", f"user({rounds(2, 2)[0]})", "goal:round 2/2", "T-2:completed",
        f"goal:block {ROUND_CAP_REACHED}",
    ]  # fmt: skip
    assert goal.current is not None and goal.current.blocked is not None
    assert goal.current.blocked.code == "ROUND_CAP_REACHED"
    assert "all 2 rounds" in goal.current.blocked.explanation
    assert len(h.adapter.requests) == 2 and not goal.armed


async def test_a_human_followup_during_a_round_is_served_next_and_uses_no_round(
    h: Harness,
) -> None:
    driver = install_goals(h.rt)
    agent: Any = None

    def round_1(request: Any) -> Any:
        agent.followup(u("human"))
        return text_response("r1")

    agent = await h.agent(
        round_1, text_response("to the human"), complete_call("c1", 1), text_response("done")
    )
    goal = driver.goal_of(agent)
    goal.create("ship it", round_cap=3, expected_revision=0)
    await settled(driver, agent)
    g1, g2 = rounds(3, 1, 2)
    assert glog(agent.session, only=("goal:", "ins", "T+", "T-", "user(", "claim")) == [
        "goal:create",
        f"ins(nt,{g1})", "T+1", f"claim(nt,{g1})", f"user({g1})", "goal:round 1/3",
        "ins(nt,human)", "T-1:completed",
        "T+2", "claim(nt,human)", "user(human)", "T-2:completed",
        f"ins(nt,{g2})", "T+3", f"claim(nt,{g2})", f"user({g2})", "goal:round 2/3",
        "goal:complete", "T-3:completed",
    ]  # fmt: skip
    assert goal.current is not None and goal.current.rounds_started == 2


async def test_a_human_followup_at_the_idle_boundary_goes_before_the_next_round(
    h: Harness,
) -> None:
    """The human message lands in the same idle edge the driver reacts to (a later
    ``agent/status`` listener): the driver's re-check after its flush sees the agent busy
    and queues nothing; the round follows the human turn."""
    driver = install_goals(h.rt)
    sent: list[bool] = []

    def on_status(payload: Any) -> None:
        if payload.status == "idle" and not sent:
            sent.append(True)
            payload.agent.followup(u("human"))

    h.rt.hooks.on("agent/status", on_status)
    agent = await h.agent(
        text_response("r1"), text_response("to the human"), complete_call("c1", 1),
        text_response("done"),
    )  # fmt: skip
    goal = driver.goal_of(agent)
    goal.create("ship it", round_cap=3, expected_revision=0)
    await settled(driver, agent)
    g1, g2 = rounds(3, 1, 2)
    assert glog(agent.session, only=("goal:", "T+", "T-", "user(")) == [
        "goal:create",
        "T+1", f"user({g1})", "goal:round 1/3", "T-1:completed",
        "T+2", "user(human)", "T-2:completed",
        "T+3", f"user({g2})", "goal:round 2/3", "goal:complete", "T-3:completed",
    ]  # fmt: skip


async def test_a_cancel_during_a_goal_round_pauses_the_goal(h: Harness) -> None:
    driver = install_goals(h.rt)
    streaming = asyncio.Event()

    def hang(request: Any) -> Any:
        streaming.set()
        return HANG

    agent = await h.agent(hang)
    goal = driver.goal_of(agent)
    goal.create("ship it", round_cap=3, expected_revision=0)
    await within(streaming.wait())
    agent.cancel(CancelCause.user())
    await settled(driver, agent)
    g1 = rounds(3, 1)[0]
    assert glog(agent.session, only=("goal:", "T+", "T-", "user(", "msg")) == [
        "goal:create", "T+1", f"user({g1})", "goal:round 1/3", "msg(interrupted)",
        "T-1:aborted", "goal:pause",
    ]  # fmt: skip
    assert goal.current is not None and goal.current.phase == "paused" and not goal.armed
    # It does not restart by itself: a human turn runs and no round follows it.
    h.adapter.add(text_response("hi"))
    agent.followup(u("human"))
    await settled(driver, agent)
    assert glog(agent.session)[-1] == "T-2:completed"
    assert len(h.adapter.requests) == 2
    # An explicit resume continues with round 2.
    h.adapter.add(complete_call("c1", 3), text_response("done"))
    goal.resume(goal.revision)
    await settled(driver, agent)
    assert glog(agent.session, only=("goal:",))[-3:] == [
        "goal:resume", "goal:round 2/3", "goal:complete",
    ]  # fmt: skip


async def test_a_round_counts_only_when_its_message_is_admitted(h: Harness) -> None:
    """A pre-step reject claims the round prompt without admitting it: no round is counted,
    the turn ends ``blocked`` and the goal is blocked ``ROUND_REJECTED`` (it would loop
    otherwise)."""
    driver = install_goals(h.rt)

    async def reject_goal_rounds(payload: Any, next_: Any) -> Any:
        if any(m.source.kind == "goal" for m in payload.messages):
            return PreStepDecision.reject()
        return await next_()

    h.rt.hooks.on("agent/pre-step", reject_goal_rounds)
    agent = await h.agent()
    goal = driver.goal_of(agent)
    goal.create("ship it", round_cap=3, expected_revision=0)
    await settled(driver, agent)
    g1 = rounds(3, 1)[0]
    assert glog(agent.session) == [
        "goal:create", f"ins(nt,{g1})", "T+1", f"claim(nt,{g1})", "T-1:blocked",
        f"goal:block {ROUND_REJECTED}",
    ]  # fmt: skip
    assert goal.current is not None and goal.current.rounds_started == 0
    assert h.adapter.requests == []


async def test_a_resumed_session_keeps_its_goal_but_starts_no_round_until_resumed(
    hs: Harness,
) -> None:
    rt: Runtime = hs.rt
    driver = install_goals(rt)
    streaming = asyncio.Event()

    def hang(request: Any) -> Any:
        streaming.set()
        return HANG

    hs.adapter.add(text_response("r1"), hang)
    handle = await rt.agents.create(session_id="s-1", agent_options=OPTIONS)
    goal = driver.goal_of(handle.agent)
    goal.create("ship it", round_cap=4, expected_revision=0)
    await within(streaming.wait())  # round 2 is streaming when the process "goes away"
    await within(handle.dispose())
    assert goal.current is not None and goal.current.phase == "active"  # disposal: no pause

    resumed = await rt.agents.resume(resume_session_id="s-1", agent_options=OPTIONS)
    agent = resumed.agent
    again = driver.goal_of(agent)
    assert again is not goal and again.current == goal.current
    assert again.current is not None and again.current.rounds_started == 2
    assert not again.armed
    before = len(agent.session.events)
    hs.adapter.add(text_response("hello"))
    agent.followup(u("human"))
    await settled(driver, agent)
    assert glog(agent.session)[before:] == [
        "ins(nt,human)", "T+3", "claim(nt,human)", "S+3.1", "user(human)", "hdr(resume)",
        "msg", "S-3.1", "T-3:completed",
    ]  # fmt: skip
    # Explicit resume arms it: round 3 starts at once on the idle agent.
    hs.adapter.add(complete_call("c1", 2), text_response("done"))
    again.resume(again.revision)
    await settled(driver, agent)
    g3 = rounds(4, 3)[0]
    assert glog(agent.session, only=("goal:", "T+", "T-", "user("))[-6:] == [
        "goal:resume", "T+4", f"user({g3})", "goal:round 3/4", "goal:complete", "T-4:completed",
    ]  # fmt: skip

    # A fork keeps the goal too, disarmed.
    await resumed.dispose()
    await rt.sessions.fork("s-1", before, "s-2")
    forked = await rt.agents.resume(resume_session_id="s-2", agent_options=OPTIONS)
    fork_goal = driver.goal_of(forked.agent)
    assert fork_goal.current is not None and fork_goal.current.phase == "active"
    assert not fork_goal.armed
    await settled(driver, forked.agent)
    assert forked.agent.session.events[-1].type == "session/end-seed"


async def test_a_stale_revision_from_the_model_is_refused(h: Harness) -> None:
    driver = install_goals(h.rt)
    agent: Any = None

    def edit_then_answer(request: Any) -> Any:
        g = driver.goal_of(agent)
        g.edit(1, objective="ship it")  # a human edit between read and act: revision 2
        return complete_call("c1", 1)

    agent = await h.agent(edit_then_answer, text_response("ok"), complete_call("c2", 2),
                          text_response("done"))  # fmt: skip
    goal = driver.goal_of(agent)
    goal.create("ship it", round_cap=3, expected_revision=0)
    await settled(driver, agent)
    results = events_of(agent.session, "tool/result")
    assert results[0].data.error is not None
    assert results[0].data.error.code == "GOAL_STALE_REVISION"
    assert "expected 1, the current revision is 2" in results[0].data.message.content[0].text
    assert results[1].data.error is None
    assert glog(agent.session, only=("goal:",)) == [
        "goal:create", "goal:round 1/3", "goal:edit", "goal:round 2/3", "goal:complete",
    ]  # fmt: skip


async def test_read_and_block_tools(h: Harness) -> None:
    driver = install_goals(h.rt)
    agent = await h.agent(
        tool_call_response("c1", "read_goal", {}),
        tool_call_response("c2", "block_goal", {"revision": 1, "reason": "no access"}),
        text_response("blocked"),
    )
    goal = driver.goal_of(agent)
    goal.create("ship it", round_cap=3, expected_revision=0)
    await settled(driver, agent)
    read = events_of(agent.session, "tool/result")[0].data.message.content[0].text
    assert '"revision": 1' in read and '"armed": true' in read
    assert goal.current is not None and goal.current.blocked is not None
    assert goal.current.blocked.code == "BLOCKED_BY_MODEL"
    assert goal.current.blocked.explanation == "no access"
    assert len(events_of(agent.session, "turn/start")) == 1


async def test_unloading_disarms_cancels_rounds_with_cause_parent_and_waits(
    h: Harness,
) -> None:
    driver = install_goals(h.rt)
    streaming = asyncio.Event()

    def hang(request: Any) -> Any:
        streaming.set()
        return HANG

    agent = await h.agent(hang)
    goal = driver.goal_of(agent)
    goal.create("ship it", round_cap=3, expected_revision=0)
    await within(streaming.wait())
    await within(driver.unload())
    assert agent.status == "idle"
    end = events_of(agent.session, "turn/end")[-1].data.reason
    assert end.kind == "aborted" and end.reason is not None and end.reason.kind == "parent"
    assert goal.current is not None and goal.current.phase == "active" and not goal.armed
    assert h.rt.tools.get("complete_goal") is None
    # Nothing continues the goal any more.
    h.adapter.add(text_response("hi"))
    agent.followup(u("human"))
    await within(agent.when_idle())
    assert glog(agent.session)[-1] == "T-2:completed"
    assert glog(agent.session, only=("goal:",)) == ["goal:create", "goal:round 1/3"]


@pytest.mark.parametrize("cause", ["user", "hook"])
async def test_pausing_works_for_user_and_hook_causes(h: Harness, cause: str) -> None:
    driver = install_goals(h.rt)
    streaming = asyncio.Event()

    def hang(request: Any) -> Any:
        streaming.set()
        return HANG

    agent = await h.agent(hang)
    goal = driver.goal_of(agent)
    goal.create("ship it", round_cap=3, expected_revision=0)
    await within(streaming.wait())
    agent.cancel(CancelCause.user() if cause == "user" else CancelCause.hook("budget"))
    await settled(driver, agent)
    assert goal.current is not None and goal.current.phase == "paused"
