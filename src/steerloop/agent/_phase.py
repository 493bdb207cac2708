"""The agent's phase machine: activity, abort controller, wake latch, phase and lifecycle.

Phases are ``idle``, ``maintenance`` and ``running``; ``status`` reports ``running`` only for
``running``. An *activity* (a driver or a maintenance job) owns an abort controller and a
completion future. The lifecycle runs ``unpublished → live → disposing → disposed``.

Every transition is a method that checks where it starts from and raises
``PhaseTransitionError`` naming the move and the state otherwise; nothing else writes the
private fields (each field's comment names the methods that may change it).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Literal

from .._signal import AbortController

__all__ = ["Activity", "Lifecycle", "Phase", "PhaseMachine", "PhaseTransitionError"]

Phase = Literal["idle", "maintenance", "running"]
Lifecycle = Literal["unpublished", "live", "disposing", "disposed"]
Status = Literal["idle", "running"]


class PhaseTransitionError(RuntimeError):
    """A phase-machine method was called from a state it does not start from."""


class Activity:
    """A driver or a maintenance job: ``done`` resolves once it converged (or was relayed)."""

    __slots__ = ("done",)

    def __init__(self) -> None:
        self.done: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def resolve(self) -> None:
        if not self.done.done():
            self.done.set_result(None)


class PhaseMachine:
    """One agent's phase and lifecycle, and the activity that holds it out of ``idle``.

    ``start_driver`` is the agent's: it opens a turn and calls ``begin_turn`` (a latched wake
    relays through it); ``has_pending`` tells whether the inbox holds input; ``on_status`` is
    told each change of the reported status.
    """

    __slots__ = (
        "_activity",
        "_controller",
        "_has_pending",
        "_latched",
        "_lifecycle",
        "_on_status",
        "_phase",
        "_reported",
        "_start_driver",
    )

    def __init__(
        self,
        *,
        start_driver: Callable[[], None],
        has_pending: Callable[[], bool],
        on_status: Callable[[Status], None],
    ) -> None:
        # The agent's callbacks, replaced by inert ones only by finish_dispose.
        self._start_driver = start_driver
        self._has_pending = has_pending
        self._on_status = on_status
        # Changed only by _enter (called from begin_turn, begin_maintenance, converge, and
        # finish_dispose for a never-converged creation).
        self._phase: Phase = "idle"
        # Changed only by _enter: the last status told to on_status.
        self._reported: Status = "idle"
        # Changed only by begin_turn, begin_maintenance, converge and finish_dispose.
        self._activity: Activity | None = None
        # Changed only by begin_turn, next_turn, begin_maintenance, converge, finish_dispose.
        self._controller: AbortController | None = None
        # Set only by latch; cleared only by forget_wake and converge.
        self._latched = False
        # Changed only by publish, begin_dispose and finish_dispose.
        self._lifecycle: Lifecycle = "unpublished"

    def __repr__(self) -> str:
        return f"<PhaseMachine {self._phase} {self._lifecycle}>"

    # --- reading ---------------------------------------------------------------------

    @property
    def phase(self) -> Phase:
        return self._phase

    @property
    def status(self) -> Status:
        return "running" if self._phase == "running" else "idle"

    @property
    def lifecycle(self) -> Lifecycle:
        return self._lifecycle

    @property
    def published(self) -> bool:
        return self._lifecycle != "unpublished"

    @property
    def disposing(self) -> bool:
        """Disposal began (``disposing`` or ``disposed``): nothing new may start."""
        return self._lifecycle in ("disposing", "disposed")

    @property
    def disposed(self) -> bool:
        return self._lifecycle == "disposed"

    @property
    def activity(self) -> Activity | None:
        return self._activity

    @property
    def controller(self) -> AbortController | None:
        """The abort controller of the running activity (``None`` when idle)."""
        return self._controller

    # --- lifecycle -------------------------------------------------------------------

    def publish(self) -> AbortController:
        """``unpublished → live``, under maintenance (the creation hook runs in it)."""
        if self._lifecycle != "unpublished":
            raise PhaseTransitionError(f"publish: the agent is already {self._lifecycle}")
        self._lifecycle = "live"
        return self.begin_maintenance()

    def begin_dispose(self) -> bool:
        """``unpublished | live → disposing``; ``False`` when disposal had already begun."""
        if self.disposing:
            return False
        self._lifecycle = "disposing"
        return True

    def finish_dispose(self) -> None:
        """``disposing → disposed``. An activity that never converged (a rolled-back
        creation) is released so ``when_idle`` returns."""
        if not self.disposing:
            raise PhaseTransitionError(
                f"finish_dispose: disposal has not begun (the agent is {self._lifecycle})"
            )
        self._lifecycle = "disposed"
        activity = self._activity
        if activity is not None:
            self._activity = None
            self._controller = None
            self._latched = False
            self._enter("idle")
            activity.resolve()
        # Nothing calls back into a disposed agent (every transition but converge refuses,
        # and converge stays idle). The callbacks are bound to the agent, which holds this
        # machine: dropping them leaves no reference cycle, so the agent and its log are
        # freed as soon as the last reference goes instead of by a full collection.
        self._start_driver = _inert
        self._has_pending = _nothing_pending
        self._on_status = _ignore_status

    # --- activities ------------------------------------------------------------------

    def begin_turn(self) -> tuple[AbortController, Activity | None]:
        """Start a driver: ``idle → running``, or relay a latched wake from a converging
        activity. Returns the new controller and the activity it replaces (to resolve once
        the driver runs)."""
        if self._lifecycle != "live":
            raise PhaseTransitionError(f"begin_turn: the agent is {self._lifecycle}")
        if self._controller is not None:
            raise PhaseTransitionError(f"begin_turn: a {self._phase} activity is running")
        previous = self._activity
        self._activity = Activity()
        controller = self._controller = AbortController()
        self._enter("running")
        return controller, previous

    def next_turn(self) -> AbortController:
        """The running driver opens another turn: a fresh controller, same activity."""
        if self._phase != "running" or self._activity is None:
            raise PhaseTransitionError(f"next_turn: the agent is {self._phase}, not running")
        if self.disposing:
            raise PhaseTransitionError(f"next_turn: the agent is {self._lifecycle}")
        self._controller = AbortController()
        return self._controller

    def begin_maintenance(self) -> AbortController:
        """``idle → maintenance`` before disposal (an unpublished agent too)."""
        if self.disposing:
            raise PhaseTransitionError(f"begin_maintenance: the agent is {self._lifecycle}")
        if self._phase != "idle":
            raise PhaseTransitionError(f"begin_maintenance: the agent is {self._phase}")
        self._activity = Activity()
        self._controller = AbortController()
        self._enter("maintenance")
        return self._controller

    def latch(self) -> None:
        """Remember a wake sent while an activity runs; ``converge`` replays it."""
        if self._activity is None:
            raise PhaseTransitionError("latch: no activity runs (an idle agent starts a driver)")
        self._latched = True

    def forget_wake(self) -> None:
        """Drop a latched wake (``cancel``)."""
        self._latched = False

    def converge(self, previous: Activity | None = None) -> None:
        """End the current activity: relay a latched wake to a new driver if input is
        pending on a live agent, else go idle. ``previous`` (an activity being relayed
        from) and the ended one resolve unless they are still current. With no activity
        (an abandoned one exiting late) it changes nothing."""
        done = self._activity
        if done is None and previous is None:
            # The late exit of an activity a dispose timeout already converged (abandon).
            return
        self._controller = None
        latched, self._latched = self._latched, False
        if latched and self._lifecycle == "live" and self._has_pending():
            # Relayed before the old activity resolves, so when_idle follows the relay.
            self._start_driver()
        else:
            self._activity = None
            self._enter("idle")
        for activity in (previous, done):
            if activity is not None and activity is not self._activity:
                activity.resolve()

    def _enter(self, phase: Phase) -> None:
        self._phase = phase
        status = self.status
        if status != self._reported:
            self._reported = status
            self._on_status(status)


def _inert() -> None:
    pass


def _nothing_pending() -> bool:
    return False


def _ignore_status(status: Status) -> None:
    pass
