"""The folds of the input events: a request is pending from ``input/requested`` until its
``input/answered``, its call's ``tool/result`` or the end of its turn."""

from __future__ import annotations

from steerloop.messages import TextBlock, ToolResultMessage
from steerloop.session import pending_inputs
from steerloop.session._events import (
    EventRecord,
    SessionEvent,
    ToolResultEvent,
    TurnEnd,
    TurnEndReason,
)
from steerloop.session._input_events import InputAnswered, InputRequest
from steerloop.session._inputs import input_state


def log(*records: EventRecord) -> list[SessionEvent]:
    return [
        SessionEvent(seq=i, time=0, type=r.TYPE, data=r) for i, r in enumerate(records, start=1)
    ]


def request(id: str, call_id: str | None = "c1", turn: int | None = 1) -> InputRequest:
    return InputRequest(id=id, server="s", message="?", call_id=call_id, turn=turn)


def result(call_id: str) -> ToolResultEvent:
    message = ToolResultMessage(id="m", call_id=call_id, content=(TextBlock("r"),))
    return ToolResultEvent(turn=1, step=1, message=message)


def test_answered_closed_by_its_call_or_its_turn_and_unknown() -> None:
    a, b, c, d = request("a"), request("b", "c2"), request("c", None, 1), request("d", None, 2)
    events = log(a, b, c, d, InputAnswered(id="a", action="accept", content={"x": 1}))
    assert pending_inputs(events) == (b, c, d)
    events += log(result("c2"))
    assert pending_inputs(events) == (c, d)
    events += log(TurnEnd(turn=1, reason=TurnEndReason(kind="completed")))
    assert pending_inputs(events) == (d,)
    assert [input_state(events, i) for i in "abcdz"] == [
        "answered",
        "closed",
        "closed",
        "pending",
        "unknown",
    ]
