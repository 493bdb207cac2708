"""The goal record, its ``goal/change`` JSON form, and strict replay from a session log.

A session has at most one *current* goal. Every accepted mutation appends one
``goal/change`` event whose payload is ``{"version": 1, "action": ..., "goal": {...}}``
with the whole new state, so the current goal is the fold of those events alone.

``revision`` counts the goal's lifecycle verbs across the whole session (create, edit,
pause, resume, complete, block, clear): each one adds exactly 1, and a goal created after
an earlier one was cleared continues the count, so a revision never names two states. A
``round`` change (the goal-round driver admitted one more round) only advances
``rounds_started`` and keeps the revision: a human or the model holding revision ``r`` is
not made stale by the driver's own bookkeeping.

``goal/change`` is written with ``ignorable=True``: it is log-only (never on the surface,
never read by the loop), a reader without the goals plugin — the core codec, ``steerloop
sessions show``, an older build — replays the conversation correctly without it, and the
core codec refuses every *required* type it does not know (EVENTS.md §1), which would make
any session that ever had a goal unloadable. Skipping it is a choice of readers that do not
care about goals; the goal replay itself (``replay_goal``) is strict.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, TypeAlias

from ..errors import SessionCorruptError, SteerloopError
from ..session.events import SessionEvent

__all__ = [
    "GOAL_CHANGE",
    "PAYLOAD_VERSION",
    "Goal",
    "GoalAction",
    "GoalBlock",
    "GoalError",
    "GoalLogError",
    "GoalPhase",
    "GoalRevisionError",
    "GoalStateError",
    "check_transition",
    "goal_from_json",
    "goal_to_json",
    "replay_goal",
]

GOAL_CHANGE = "goal/change"
PAYLOAD_VERSION = 1

GoalPhase: TypeAlias = Literal["active", "paused", "blocked", "complete", "cleared"]
GoalAction: TypeAlias = Literal[
    "create", "edit", "pause", "resume", "complete", "block", "clear", "round"
]
_PHASES: frozenset[str] = frozenset({"active", "paused", "blocked", "complete", "cleared"})
_ACTIONS: frozenset[str] = frozenset(
    {"create", "edit", "pause", "resume", "complete", "block", "clear", "round"}
)
_GOAL_KEYS = frozenset(
    {"objective", "phase", "revision", "round_cap", "rounds_started", "blocked", "evidence"}
)
# The phases each verb may start from (``create`` also starts from "no goal").
_FROM: dict[str, frozenset[str]] = {
    "create": frozenset({"complete", "cleared"}),
    "edit": frozenset({"active", "paused", "blocked"}),
    "pause": frozenset({"active"}),
    "resume": frozenset({"active", "paused", "blocked"}),
    "complete": frozenset({"active", "paused", "blocked"}),
    "block": frozenset({"active", "paused"}),
    "clear": frozenset({"active", "paused", "blocked", "complete"}),
    "round": frozenset({"active"}),
}
_TO: dict[str, str | None] = {
    "create": "active",
    "edit": None,  # keeps the phase
    "pause": "paused",
    "resume": "active",
    "complete": "complete",
    "block": "blocked",
    "clear": "cleared",
    "round": "active",
}


class GoalError(SteerloopError):
    """A goal verb was refused; nothing was appended."""


class GoalRevisionError(GoalError):
    """The caller's expected revision is not the current one (compare-and-set failed)."""

    def __init__(self, expected: int, current: int) -> None:
        super().__init__(
            f"stale goal revision: expected {expected}, the current revision is {current}"
        )
        self.expected = expected
        self.current = current


class GoalStateError(GoalError):
    """The verb is not allowed in the goal's current phase (or there is no goal)."""


class GoalLogError(SessionCorruptError):
    """A ``goal/change`` record is malformed or inconsistent; ``seq`` names it."""

    def __init__(self, seq: int, problem: str) -> None:
        super().__init__(f"seq {seq}: goal/change {problem}")
        self.seq = seq


@dataclass(frozen=True, slots=True, kw_only=True)
class GoalBlock:
    """Why a goal is blocked: a machine-readable ``code`` and a human ``explanation``."""

    code: str
    explanation: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Goal:
    """The whole state of a session's current goal."""

    objective: str
    phase: GoalPhase
    revision: int
    round_cap: int
    rounds_started: int = 0
    blocked: GoalBlock | None = None
    evidence: str | None = None

    @property
    def rounds_left(self) -> int:
        return max(self.round_cap - self.rounds_started, 0)


def goal_to_json(goal: Goal) -> dict[str, Any]:
    out: dict[str, Any] = {
        "objective": goal.objective,
        "phase": goal.phase,
        "revision": goal.revision,
        "round_cap": goal.round_cap,
        "rounds_started": goal.rounds_started,
    }
    if goal.blocked is not None:
        out["blocked"] = {"code": goal.blocked.code, "explanation": goal.blocked.explanation}
    if goal.evidence is not None:
        out["evidence"] = goal.evidence
    return out


class _Bad(Exception):
    pass


def _int(data: Mapping[str, Any], key: str, minimum: int) -> int:
    value = data.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise _Bad(f"has an invalid {key} {value!r} (an integer >= {minimum} is required)")
    return value


def _text(data: Mapping[str, Any], key: str) -> str:
    value = data.get(key)
    if not isinstance(value, str) or not value.strip():
        raise _Bad(f"has an invalid {key} {value!r} (a non-empty string is required)")
    return value


def goal_from_json(data: Any) -> Goal:
    """Decode a goal object strictly. Raises ``ValueError`` describing the problem."""
    try:
        return _goal(data)
    except _Bad as exc:
        raise ValueError(f"goal {exc}") from None


def _goal(data: Any) -> Goal:
    if not isinstance(data, Mapping):
        raise _Bad(f"is not an object: {data!r:.60}")
    unknown = set(data) - _GOAL_KEYS
    if unknown:
        raise _Bad(f"has unknown fields {sorted(unknown)}")
    phase = data.get("phase")
    if phase not in _PHASES:
        raise _Bad(f"has an unknown phase {phase!r}")
    blocked: GoalBlock | None = None
    raw_block = data.get("blocked")
    if phase == "blocked":
        if not isinstance(raw_block, Mapping) or set(raw_block) != {"code", "explanation"}:
            raise _Bad("is blocked but has no {code, explanation}")
        blocked = GoalBlock(
            code=_text(raw_block, "code"), explanation=_text(raw_block, "explanation")
        )
    elif raw_block is not None:
        raise _Bad(f"is {phase} but carries a block reason")
    evidence = data.get("evidence")
    if evidence is not None and (phase != "complete" or not isinstance(evidence, str)):
        raise _Bad("carries evidence but is not complete (or the evidence is not a string)")
    return Goal(
        objective=_text(data, "objective"),
        phase=phase,
        revision=_int(data, "revision", 1),
        round_cap=_int(data, "round_cap", 1),
        rounds_started=_int(data, "rounds_started", 0),
        blocked=blocked,
        evidence=evidence,
    )


def check_transition(previous: Goal | None, action: str, new: Goal) -> None:
    """Check that ``new`` may follow ``previous`` through ``action``.

    Raises:
        ValueError: describing the inconsistency.
    """
    try:
        _transition(previous, action, new)
    except _Bad as exc:
        raise ValueError(str(exc)) from None


def _transition(previous: Goal | None, action: str, new: Goal) -> None:
    if not isinstance(action, str) or action not in _ACTIONS:
        raise _Bad(f"has an unknown action {action!r}")
    if previous is None:
        if action != "create":
            raise _Bad(f"{action!r} with no goal (only 'create' may start one)")
    elif previous.phase not in _FROM[action]:
        raise _Bad(f"{action!r} is not allowed from phase {previous.phase!r}")
    last = previous.revision if previous is not None else 0
    expected_revision = last if action == "round" else last + 1
    if new.revision != expected_revision:
        raise _Bad(
            f"{action!r} has revision {new.revision}, expected {expected_revision} "
            f"(previous revision {last})"
        )
    target = _TO[action]
    phase = previous.phase if target is None and previous is not None else target
    if new.phase != phase:
        raise _Bad(f"{action!r} must lead to phase {phase!r}, not {new.phase!r}")
    if action == "create":
        if new.rounds_started != 0:
            raise _Bad("'create' must start with rounds_started 0")
        return
    assert previous is not None
    rounds = previous.rounds_started + (1 if action == "round" else 0)
    if new.rounds_started != rounds:
        raise _Bad(f"{action!r} has rounds_started {new.rounds_started}, expected {rounds}")
    if action == "round" and rounds > previous.round_cap:
        raise _Bad(f"'round' {rounds} exceeds the round cap {previous.round_cap}")
    if action != "edit" and (
        new.objective != previous.objective or new.round_cap != previous.round_cap
    ):
        raise _Bad(f"{action!r} may not change the objective or the round cap")


def replay_goal(events: Iterable[SessionEvent]) -> Goal | None:
    """Rebuild a session's current goal strictly from its ``goal/change`` events.

    Raises:
        GoalLogError: a malformed or inconsistent record, naming its seq.
    """
    goal: Goal | None = None
    for event in events:
        if event.type == GOAL_CHANGE:
            goal = decode_change(event, goal)
    return goal


def decode_change(event: SessionEvent, previous: Goal | None) -> Goal:
    """The goal after one ``goal/change`` event that follows ``previous``.

    Raises:
        GoalLogError: naming the event's seq.
    """
    try:
        data = event.data
        if not event.ignorable:
            raise _Bad("is not marked ignorable")
        if not isinstance(data, Mapping) or set(data) != {"version", "action", "goal"}:
            raise _Bad("payload must be an object with exactly version, action and goal")
        if data["version"] != PAYLOAD_VERSION:
            raise _Bad(f"has an unsupported version {data['version']!r}")
        new = _goal(data["goal"])
        _transition(previous, data["action"], new)
    except _Bad as exc:
        raise GoalLogError(event.seq, str(exc)) from None
    return new
