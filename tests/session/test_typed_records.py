"""``Session.append(record)`` / ``Session.latest(Record)``: the typed forms of the log API."""

from __future__ import annotations

import pytest

from steerloop.session import Session, events


def test_append_record_writes_its_type_and_latest_returns_the_record() -> None:
    session = Session._create("s-typed")
    start = events.TurnStart(turn=1)
    event = session.append(start)
    session.append(events.StepStart(turn=1, step=1))
    session.append(events.StepEnd(turn=1, step=1))
    assert event.type == "turn/start" and event.data is start
    assert [e.type for e in session.events] == ["turn/start", "step/start", "step/end"]
    assert session.latest(events.TurnStart) is start
    assert session.latest(events.StepEnd) == events.StepEnd(turn=1, step=1)
    assert session.latest(events.TurnEnd) is None
    assert session.last_turn == 1


def test_a_plain_payload_under_a_record_type_is_not_that_record() -> None:
    """``latest(Record)`` never hands back a dict typed as the record."""
    session = Session._create("s-plain")
    session.append("turn/start", {"turn": 3})
    assert session.latest(events.TurnStart) is None
    latest = session.latest("turn/start")
    assert latest is not None and latest.data == {"turn": 3}


def test_append_refuses_a_value_that_is_not_a_record() -> None:
    session = Session._create("s-refuse")
    with pytest.raises(ValueError, match="not an event payload record"):
        session.append({"turn": 1})  # type: ignore[call-overload]
    with pytest.raises(ValueError, match="takes a type name"):
        session.append(events.TurnStart(turn=1), {"turn": 1})  # type: ignore[call-overload]
    assert len(session.events) == 0
