"""The goal domain: compare-and-set verbs, ``goal/change`` records, strict replay."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest

from steerloop import AgentOptions, Runtime, SessionCorruptError
from steerloop.goals import (
    GOAL_CHANGE,
    Goal,
    GoalBlock,
    GoalLogError,
    GoalRevisionError,
    GoalStateError,
    SessionGoal,
    install_goals,
    replay_goal,
)
from steerloop.session import Session, SessionEvent

from ..conftest import Harness

OPTIONS = AgentOptions(provider="mock", model="m")


def session() -> Session:
    return Session._create("g-1")


def changes(s: Session) -> list[tuple[int, str, dict[str, Any]]]:
    return [(e.seq, e.data["action"], e.data["goal"]) for e in s.events if e.type == GOAL_CHANGE]


def test_every_verb_appends_one_ignorable_change_with_the_whole_state() -> None:
    s = session()
    goal = SessionGoal(s)
    assert goal.current is None and goal.revision == 0 and not goal.armed
    goal.create("ship it", round_cap=3, expected_revision=0)
    assert goal.armed
    goal.edit(1, objective="ship it well", round_cap=4)
    goal.pause(2)
    assert not goal.armed
    goal.resume(3)
    assert goal.armed
    goal.block(4, "NEEDS_REVIEW", "waiting for a human review")
    assert not goal.armed
    goal.complete(5, "merged as #12")
    goal.clear(6)
    goal.create("next thing", expected_revision=7)
    assert [e.ignorable for e in s.events] == [True] * 8
    assert [(seq, action) for seq, action, _ in changes(s)] == [
        (1, "create"), (2, "edit"), (3, "pause"), (4, "resume"),
        (5, "block"), (6, "complete"), (7, "clear"), (8, "create"),
    ]  # fmt: skip
    assert changes(s)[4][2] == {
        "objective": "ship it well",
        "phase": "blocked",
        "revision": 5,
        "round_cap": 4,
        "rounds_started": 0,
        "blocked": {"code": "NEEDS_REVIEW", "explanation": "waiting for a human review"},
    }
    assert changes(s)[5][2]["evidence"] == "merged as #12"
    assert goal.current == Goal(objective="next thing", phase="active", revision=8, round_cap=10)
    assert replay_goal(s.events) == goal.current


def test_a_stale_revision_is_refused_and_appends_nothing() -> None:
    s = session()
    goal = SessionGoal(s)
    goal.create("ship it", expected_revision=0)
    before = list(s.events)
    for verb in (
        lambda: goal.pause(0),
        lambda: goal.edit(2, objective="other"),
        lambda: goal.complete(0, "done"),
        lambda: goal.block(5, "X", "y"),
        lambda: goal.clear(0),
        lambda: goal.resume(0),
    ):
        with pytest.raises(GoalRevisionError, match=r"stale goal revision: expected .*current"):
            verb()  # type: ignore[no-untyped-call]
    with pytest.raises(GoalRevisionError) as info:
        goal.create("again", expected_revision=0)
    assert (info.value.expected, info.value.current) == (0, 1)
    assert list(s.events) == before
    assert goal.current is not None and goal.current.phase == "active"


def test_verbs_the_phase_does_not_allow_are_refused() -> None:
    s = session()
    goal = SessionGoal(s)
    with pytest.raises(GoalStateError, match="no goal"):
        goal.pause(0)
    goal.create("ship it", expected_revision=0)
    with pytest.raises(GoalStateError, match="already has a active goal"):
        goal.create("another", expected_revision=1)
    goal.complete(1)
    for verb in (goal.pause, goal.resume):
        with pytest.raises(GoalStateError):
            verb(2)
    with pytest.raises(GoalStateError):
        goal.block(2, "X", "y")
    goal.clear(2)
    with pytest.raises(GoalStateError):
        goal.clear(3)
    assert len(s.events) == 3


def test_bad_arguments_raise_value_error() -> None:
    goal = SessionGoal(session())
    with pytest.raises(ValueError, match="objective"):
        goal.create("  ", expected_revision=0)
    with pytest.raises(ValueError, match="round_cap"):
        goal.create("x", round_cap=0, expected_revision=0)
    with pytest.raises(ValueError, match="expected_revision"):
        goal.create("x", expected_revision=True)
    assert goal.current is None


def test_rounds_keep_the_revision_and_resume_needs_rounds_left() -> None:
    s = session()
    goal = SessionGoal(s)
    goal.create("ship it", round_cap=2, expected_revision=0)
    goal.record_round()
    goal.record_round()
    assert goal.current is not None
    assert (goal.current.revision, goal.current.rounds_started) == (1, 2)
    with pytest.raises(GoalStateError, match="used its 2 rounds"):
        goal.record_round()
    goal.block(1, "ROUND_CAP_REACHED", "out of rounds")
    with pytest.raises(GoalStateError, match="raise round_cap"):
        goal.resume(2)
    goal.edit(2, round_cap=3)
    goal.resume(3)
    assert goal.armed and goal.current.rounds_left == 1
    assert replay_goal(s.events) == goal.current


def test_a_new_session_goal_over_an_existing_log_is_disarmed() -> None:
    s = session()
    goal = SessionGoal(s)
    goal.create("ship it", expected_revision=0)
    again = SessionGoal(s)
    assert again.current == goal.current
    assert goal.armed and not again.armed
    again.resume(1)
    assert again.armed


def _event(seq: int, data: Any, *, ignorable: bool = True) -> SessionEvent:
    return SessionEvent(seq=seq, time=0, type=GOAL_CHANGE, data=data, ignorable=ignorable)


def _change(action: str, **goal: Any) -> dict[str, Any]:
    base = {"objective": "o", "phase": "active", "revision": 1, "round_cap": 3}
    base["rounds_started"] = 0
    return {"version": 1, "action": action, "goal": {**base, **goal}}


GOOD = _change("create")


@pytest.mark.parametrize(
    ("second", "problem"),
    [
        ({"version": 1, "action": "pause"}, "exactly version, action and goal"),
        ({**_change("pause", phase="paused", revision=2), "version": 2}, "unsupported version"),
        (_change("pause", phase="stopped", revision=2), "unknown phase 'stopped'"),
        (_change("pause", phase="paused", revision=3), "revision 3, expected 2"),
        (_change("round", rounds_started=2), "rounds_started 2, expected 1"),
        (_change("round", rounds_started=1, revision=2), "revision 2, expected 1"),
        (_change("create", revision=2), "'create' is not allowed from phase 'active'"),
        (_change("complete", phase="paused", revision=2), "must lead to phase 'complete'"),
        (_change("block", phase="blocked", revision=2), "blocked but has no {code"),
        (_change("edit", revision=2, extra=1), "unknown fields ['extra']"),
        (_change("pause", phase="paused", revision=2, objective=""), "invalid objective"),
        (_change("teleport", revision=2), "unknown action 'teleport'"),
        (_change("pause", phase="paused", revision=2, round_cap=9), "may not change"),
        ("not an object", "exactly version, action and goal"),
    ],
)
def test_replay_refuses_a_malformed_or_inconsistent_record_naming_its_seq(
    second: Any, problem: str
) -> None:
    events = [_event(1, GOOD), _event(2, second)]
    with pytest.raises(GoalLogError, match=r"^seq 2: goal/change .*") as info:
        replay_goal(events)
    assert problem in str(info.value)
    assert info.value.seq == 2
    assert isinstance(info.value, SessionCorruptError)


def test_replay_refuses_a_first_record_that_is_not_a_create_and_a_required_one() -> None:
    with pytest.raises(GoalLogError, match=r"seq 1: .*only 'create' may start one"):
        replay_goal([_event(1, _change("pause", phase="paused"))])
    with pytest.raises(GoalLogError, match=r"seq 1: .*not marked ignorable"):
        replay_goal([_event(1, GOOD, ignorable=False)])


async def test_resume_of_a_stored_log_with_a_corrupt_goal_change_fails_at_that_seq(
    hs: Harness,
) -> None:
    """The corrupt record makes the resume fail naming its seq; nothing is published."""
    rt: Runtime = hs.rt
    driver = install_goals(rt)
    handle = await rt.agents.create(session_id="s-1", agent_options=OPTIONS)
    goal = driver.goal_of(handle.agent)
    goal.create("ship it", round_cap=1, expected_revision=0)
    goal.pause(1)  # only the records matter here: no round runs
    seqs = [e.seq for e in handle.agent.session.events if e.type == GOAL_CHANGE]
    await handle.dispose()
    store: Any = rt.sessions.persistence
    lines = list(store.raw("s-1"))
    bad = json.loads(lines[seqs[1] - 1])
    bad["data"]["goal"]["rounds_started"] = 7
    lines[seqs[1] - 1] = json.dumps(bad)
    store.put_raw("s-1", lines)
    with pytest.raises(GoalLogError, match=f"^seq {seqs[1]}: goal/change 'pause' has rounds"):
        await rt.agents.resume(resume_session_id="s-1", agent_options=OPTIONS)
    assert rt.agents.get("s-1") is None and rt.sessions.get("s-1") is None
    # Without the corruption the same log resumes with its goal.
    bad["data"]["goal"]["rounds_started"] = 0
    lines[seqs[1] - 1] = json.dumps(bad)
    store.put_raw("s-1", lines)
    resumed = await rt.agents.resume(resume_session_id="s-1", agent_options=OPTIONS)
    assert driver.goal_of(resumed.agent).current == goal.current


def test_goal_records_are_frozen() -> None:
    goal = Goal(
        objective="o",
        phase="blocked",
        revision=1,
        round_cap=1,
        blocked=GoalBlock(code="C", explanation="e"),
    )
    with pytest.raises(dataclasses.FrozenInstanceError):
        goal.phase = "active"  # type: ignore[misc]


@pytest.mark.parametrize("module", ["steerloop.goals", "steerloop.subagents"])
def test_the_plugin_packages_export_an_all_that_resolves(module: str) -> None:
    """(Ordering is ruff's RUF022 gate: constants, classes, functions.)"""
    import importlib

    mod = importlib.import_module(module)
    assert len(set(mod.__all__)) == len(mod.__all__)
    for name in mod.__all__:
        assert hasattr(mod, name), f"{module}.{name}"
