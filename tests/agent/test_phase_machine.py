"""The phase machine (``agent/_phase.py``): valid transitions, and refusals that name the move."""

from __future__ import annotations

import pytest

from steerloop.agent._phase import PhaseMachine, PhaseTransitionError


class _Host:
    """Records what the machine asks of its agent; starts drivers through ``begin_turn``."""

    def __init__(self) -> None:
        self.pending = False
        self.statuses: list[str] = []
        self.starts = 0
        self.machine = PhaseMachine(
            start_driver=self.start_driver,
            has_pending=lambda: self.pending,
            on_status=self.statuses.append,
        )

    def start_driver(self) -> None:
        self.starts += 1
        self.machine.begin_turn()


async def test_creation_turn_and_disposal_walk_the_lifecycle() -> None:
    host = _Host()
    m = host.machine
    assert (m.phase, m.lifecycle, m.activity, m.controller) == ("idle", "unpublished", None, None)
    m.publish()
    assert (m.phase, m.lifecycle) == ("maintenance", "live")
    created = m.activity
    assert created is not None
    m.converge()
    assert (m.phase, m.activity, m.controller) == ("idle", None, None)
    assert created.done.done()
    controller, previous = m.begin_turn()
    assert (m.phase, m.status, previous) == ("running", "running", None)
    second = m.next_turn()
    assert second is m.controller and second is not controller
    m.converge()
    assert m.begin_dispose() is True
    assert m.begin_dispose() is False  # a second dispose joins the first
    m.finish_dispose()
    assert (m.phase, m.lifecycle) == ("idle", "disposed")
    assert host.statuses == ["running", "idle"]


async def test_a_latched_wake_relays_before_the_old_activity_resolves() -> None:
    """C7.5-18a: a wake latched during maintenance starts a driver when it converges."""
    host = _Host()
    m = host.machine
    m.publish()
    m.converge()
    m.begin_maintenance()
    job = m.activity
    assert job is not None
    m.latch()
    host.pending = True
    m.converge()
    assert host.starts == 1
    assert m.phase == "running" and m.activity is not job
    assert job.done.done()


async def test_a_forgotten_or_inputless_latch_goes_idle() -> None:
    host = _Host()
    m = host.machine
    m.publish()
    m.latch()
    m.forget_wake()
    host.pending = True
    m.converge()
    assert (host.starts, m.phase) == (0, "idle")
    m.begin_turn()
    m.latch()
    host.pending = False
    m.converge()
    assert (host.starts, m.phase) == (0, "idle")


async def test_invalid_transitions_are_refused_with_the_move_and_the_state() -> None:
    host = _Host()
    m = host.machine
    with pytest.raises(PhaseTransitionError, match=r"^begin_turn: the agent is unpublished$"):
        m.begin_turn()
    with pytest.raises(PhaseTransitionError, match=r"^latch: no activity runs"):
        m.latch()
    with pytest.raises(PhaseTransitionError, match=r"^finish_dispose: disposal has not begun"):
        m.finish_dispose()
    with pytest.raises(PhaseTransitionError, match=r"^next_turn: the agent is idle, not running$"):
        m.next_turn()
    m.publish()
    with pytest.raises(PhaseTransitionError, match=r"^publish: the agent is already live$"):
        m.publish()
    with pytest.raises(
        PhaseTransitionError, match=r"^begin_turn: a maintenance activity is running$"
    ):
        m.begin_turn()
    with pytest.raises(
        PhaseTransitionError, match=r"^begin_maintenance: the agent is maintenance$"
    ):
        m.begin_maintenance()
    m.converge()
    m.begin_turn()
    m.begin_dispose()
    with pytest.raises(PhaseTransitionError, match=r"^next_turn: the agent is disposing$"):
        m.next_turn()
    m.converge()
    with pytest.raises(PhaseTransitionError, match=r"^begin_turn: the agent is disposing$"):
        m.begin_turn()
    with pytest.raises(PhaseTransitionError, match=r"^begin_maintenance: the agent is disposing$"):
        m.begin_maintenance()
    assert m.phase == "idle" and m.lifecycle == "disposing"


async def test_a_rolled_back_creation_releases_its_maintenance() -> None:
    """A creation that fails under ``agent/created`` never converges: disposal releases it."""
    host = _Host()
    m = host.machine
    m.publish()
    activity = m.activity
    assert activity is not None
    m.begin_dispose()
    m.finish_dispose()
    assert activity.done.done()
    assert (m.phase, m.activity, m.controller) == ("idle", None, None)


async def test_a_late_converge_after_abandon_changes_nothing() -> None:
    host = _Host()
    m = host.machine
    m.publish()
    m.converge()
    m.begin_turn()
    m.begin_dispose()
    m.converge()  # the dispose timeout converged the running activity
    m.converge()  # the stray driver exits later
    assert (m.phase, m.lifecycle, host.statuses) == ("idle", "disposing", ["running", "idle"])
