"""``SessionGoal``: the goal of one live session, its compare-and-set verbs, and "armed".

The durable state is the fold of the session's ``goal/change`` events (``_model``). *Armed*
— permission for a goal-round driver to continue the goal on its own — lives only in this
object: a ``SessionGoal`` built over a resumed or forked log starts disarmed, and only an
explicit ``create`` or ``resume`` arms it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING

from ..hooks import Disposer
from ._model import (
    GOAL_CHANGE,
    PAYLOAD_VERSION,
    Goal,
    GoalAction,
    GoalBlock,
    GoalRevisionError,
    GoalStateError,
    check_transition,
    goal_to_json,
    replay_goal,
)

if TYPE_CHECKING:
    from ..session import Session

__all__ = ["DEFAULT_ROUND_CAP", "SessionGoal"]

DEFAULT_ROUND_CAP = 10
_log = logging.getLogger("steerloop.goals")

Listener = Callable[["SessionGoal", GoalAction], None]

_ARMS: dict[str, bool | None] = {
    "create": True,
    "resume": True,
    "pause": False,
    "complete": False,
    "block": False,
    "clear": False,
    "edit": None,
    "round": None,
}


def _check_revision(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"expected_revision must be a non-negative integer, not {value!r}")
    return value


def _check_text(value: object, what: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"{what} must be a non-empty string")
    return value


def _check_cap(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"round_cap must be a positive integer, not {value!r}")
    return value


class SessionGoal:
    """The current goal of ``session`` and the verbs that change it.

    Every verb takes the revision the caller expects (``0`` when there is no goal yet);
    a stale one raises ``GoalRevisionError`` and appends nothing. A verb that the current
    phase does not allow raises ``GoalStateError``. An accepted verb appends one
    ``goal/change`` event and returns the new ``Goal``.

    Raises (constructor):
        GoalLogError: the session's ``goal/change`` records are malformed or inconsistent.
    """

    def __init__(self, session: Session) -> None:
        self.session = session
        self._goal = replay_goal(session.events)
        self._armed = False
        self._listeners: list[Listener] = []

    def __repr__(self) -> str:
        return f"<SessionGoal {self.session.id} {self._goal!r} armed={self._armed}>"

    # --- reading ---------------------------------------------------------------------

    @property
    def current(self) -> Goal | None:
        """The current goal (a cleared or complete one stays current until replaced)."""
        return self._goal

    @property
    def revision(self) -> int:
        """The current revision; ``0`` before the session's first goal."""
        return self._goal.revision if self._goal is not None else 0

    @property
    def armed(self) -> bool:
        """Whether a goal-round driver may continue the goal (process memory only)."""
        return self._armed and self._goal is not None and self._goal.phase == "active"

    def subscribe(self, listener: Listener) -> Disposer:
        """Call ``listener(self, action)`` after every accepted change; returns a disposer."""
        self._listeners.append(listener)
        return Disposer(lambda: self._listeners.remove(listener))

    # --- verbs -----------------------------------------------------------------------

    def create(
        self, objective: str, *, expected_revision: int, round_cap: int = DEFAULT_ROUND_CAP
    ) -> Goal:
        """Start a new active goal (no goal yet, or the current one is complete/cleared)."""
        self._expect(expected_revision)
        goal = self._goal
        if goal is not None and goal.phase not in ("complete", "cleared"):
            raise GoalStateError(
                f"the session already has a {goal.phase} goal: clear or complete it first"
            )
        return self._commit(
            "create",
            Goal(
                objective=_check_text(objective, "objective"),
                phase="active",
                revision=self.revision + 1,
                round_cap=_check_cap(round_cap),
            ),
        )

    def edit(
        self,
        expected_revision: int,
        *,
        objective: str | None = None,
        round_cap: int | None = None,
    ) -> Goal:
        """Change the objective and/or the round cap; the phase stays as it is."""
        goal = self._require(expected_revision, "edit", ("active", "paused", "blocked"))
        return self._commit(
            "edit",
            replace(
                goal,
                objective=goal.objective
                if objective is None
                else _check_text(objective, "objective"),
                round_cap=goal.round_cap if round_cap is None else _check_cap(round_cap),
                revision=goal.revision + 1,
            ),
        )

    def pause(self, expected_revision: int) -> Goal:
        """Stop continuing the goal until ``resume``."""
        goal = self._require(expected_revision, "pause", ("active",))
        return self._commit("pause", replace(goal, phase="paused", revision=goal.revision + 1))

    def resume(self, expected_revision: int) -> Goal:
        """Make the goal active and armed again (also arms an active goal after a restart)."""
        goal = self._require(expected_revision, "resume", ("active", "paused", "blocked"))
        if goal.rounds_started >= goal.round_cap:
            raise GoalStateError(
                f"the goal has used its {goal.round_cap} rounds: raise round_cap with edit() "
                "before resuming it"
            )
        return self._commit(
            "resume", replace(goal, phase="active", blocked=None, revision=goal.revision + 1)
        )

    def complete(self, expected_revision: int, evidence: str | None = None) -> Goal:
        """Mark the goal achieved, optionally with the evidence."""
        goal = self._require(expected_revision, "complete", ("active", "paused", "blocked"))
        if evidence is not None:
            _check_text(evidence, "evidence")
        return self._commit(
            "complete",
            replace(
                goal,
                phase="complete",
                blocked=None,
                evidence=evidence,
                revision=goal.revision + 1,
            ),
        )

    def block(self, expected_revision: int, code: str, explanation: str) -> Goal:
        """Stop the goal because it cannot progress: ``code`` for machines, ``explanation``."""
        goal = self._require(expected_revision, "block", ("active", "paused"))
        reason = GoalBlock(
            code=_check_text(code, "code"), explanation=_check_text(explanation, "explanation")
        )
        return self._commit(
            "block", replace(goal, phase="blocked", blocked=reason, revision=goal.revision + 1)
        )

    def clear(self, expected_revision: int) -> Goal:
        """Drop the goal; a new one may be created afterwards."""
        goal = self._require(
            expected_revision, "clear", ("active", "paused", "blocked", "complete")
        )
        return self._commit(
            "clear",
            replace(goal, phase="cleared", blocked=None, evidence=None, revision=goal.revision + 1),
        )

    def record_round(self) -> Goal:
        """One more goal round was admitted: advance ``rounds_started`` (revision unchanged).

        For goal-round drivers.

        Raises:
            GoalStateError: the goal is not active, or its round cap is used up.
        """
        goal = self._goal
        if goal is None or goal.phase != "active":
            raise GoalStateError("a round can only start for an active goal")
        if goal.rounds_started >= goal.round_cap:
            raise GoalStateError(f"the goal has used its {goal.round_cap} rounds")
        return self._commit("round", replace(goal, rounds_started=goal.rounds_started + 1))

    def disarm(self) -> None:
        """Withdraw the permission to continue (process memory only; nothing is written)."""
        self._armed = False

    # --- internals -------------------------------------------------------------------

    def _expect(self, expected_revision: int) -> None:
        expected = _check_revision(expected_revision)
        if expected != self.revision:
            raise GoalRevisionError(expected, self.revision)

    def _require(self, expected_revision: int, verb: str, phases: tuple[str, ...]) -> Goal:
        self._expect(expected_revision)
        goal = self._goal
        if goal is None:
            raise GoalStateError(f"cannot {verb}: the session has no goal")
        if goal.phase not in phases:
            raise GoalStateError(f"cannot {verb} a {goal.phase} goal")
        return goal

    def _commit(self, action: GoalAction, new: Goal) -> Goal:
        check_transition(self._goal, action, new)
        self.session.append(
            GOAL_CHANGE,
            {"version": PAYLOAD_VERSION, "action": action, "goal": goal_to_json(new)},
            ignorable=True,
        )
        self._goal = new
        arms = _ARMS[action]
        if arms is not None:
            self._armed = arms
        for listener in list(self._listeners):
            try:
                listener(self, action)
            except Exception:  # the change is already durable; a listener cannot undo it
                _log.exception("a goal listener raised")
        return new
