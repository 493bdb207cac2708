"""Loading validates the whole log, not only its last turn (issue 11, item 3; C7.2-9).

Only an open *last* turn is repaired (a crash). Damage earlier in the log — a turn that never
ended, a tool call of a closed step without a result, a turn nested in another — would need
events inserted into committed history, so it is refused with ``SessionCorruptError`` naming
the seq.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from steerloop import AgentOptions, Runtime, Session, SessionEvent, user_message
from steerloop.errors import SessionCorruptError
from steerloop.messages import AssistantMessage, TextBlock, ToolCallBlock
from steerloop.session._events import (
    AssistantMessageEvent,
    StepEnd,
    StepStart,
    TurnEnd,
    TurnEndReason,
    TurnStart,
)
from steerloop.testing import ScriptedAdapter

from ..logcheck import assert_well_formed

Writer = Callable[[Session], None]


def start(turn: int) -> Writer:
    def write(s: Session) -> None:
        s.append(TurnStart(turn=turn))

    return write


def end(turn: int) -> Writer:
    def write(s: Session) -> None:
        s.append(TurnEnd(turn=turn, reason=TurnEndReason(kind="completed")))

    return write


def step(turn: int, n: int, edge: str) -> Writer:
    def write(s: Session) -> None:
        s.append((StepStart if edge == "start" else StepEnd)(turn=turn, step=n))

    return write


def asks(turn: int, n: int, call_id: str) -> Writer:
    message = AssistantMessage(
        id=f"m-{call_id}",
        content=(TextBlock("x"), ToolCallBlock(id=call_id, name="t", arguments="{}")),
    )

    def write(s: Session) -> None:
        event = AssistantMessageEvent(turn=turn, step=n, message=message, stream=())
        s.append(event, surface_op="append")

    return write


def log(*writers: Writer) -> tuple[SessionEvent, ...]:
    session = Session._create("src")
    for write in writers:
        write(session)
    return tuple(session.events)


@pytest.mark.parametrize(
    ("events", "seq", "words"),
    [
        # an earlier turn never ended: turn 2 starts inside it
        (log(start(1), start(2), end(2)), 2, "inside open turn 1"),
        # a turn nested in another, both ended
        (log(start(1), start(2), end(2), end(1)), 2, "inside open turn 1"),
        # a tool call of a closed step without its result
        (
            log(start(1), step(1, 1, "start"), asks(1, 1, "c1"), step(1, 1, "end"), end(1)),
            4,
            "'c1'",
        ),
        # a turn closed while its step is open
        (log(start(1), step(1, 1, "start"), end(1), start(2)), 3, "open step"),
        # a turn/end of a turn that is not open
        (log(start(1), end(1), end(1)), 3, "open turn is None"),
    ],
)
def test_damage_before_the_last_turn_is_refused(
    events: tuple[SessionEvent, ...], seq: int, words: str
) -> None:
    """Before, only the last turn was looked at: these logs loaded without complaint."""
    with pytest.raises(SessionCorruptError) as raised:
        Session._create("s", seed=events)
    assert f"seq {seq} " in str(raised.value) and words in str(raised.value)


def test_an_open_last_turn_is_still_repaired() -> None:
    """C7.2-9: a well-formed log ending inside a turn is closed by repair, not refused."""
    events = log(start(1), end(1), start(2), step(2, 1, "start"), asks(2, 1, "c1"))
    session = Session._create("s", seed=events)
    assert [e.type for e in session.events[len(events) :]] == [
        "tool/result",
        "step/end",
        "turn/end",
        "session/end-seed",
    ]
    assert_well_formed(session)


async def test_resuming_a_malformed_stored_log_is_refused(tmp_path: Path) -> None:
    """A stored log with an unclosed earlier turn does not resume (it used to, and the next
    turn opened inside the old one)."""
    url = f"sqlite:///{tmp_path / 's.db'}"
    options = AgentOptions(provider="mock", model="m")
    rt = await Runtime.open(store=url)
    try:
        rt.llm.register_adapter(["mock"], ScriptedAdapter())
        handle = await rt.agents.create(session_id="s", agent_options=options)
        session = handle.agent.session
        handle.agent.inject(user_message("kept"))
        bad = session.append(TurnStart(turn=1)).seq
        session.append(TurnStart(turn=2))
        await handle.dispose()
    finally:
        await rt.close()
    rt = await Runtime.open(store=url)
    try:
        rt.llm.register_adapter(["mock"], ScriptedAdapter())
        with pytest.raises(SessionCorruptError, match=f"seq {bad + 1} "):
            await rt.agents.resume(resume_session_id="s", agent_options=options)
    finally:
        await rt.close()
