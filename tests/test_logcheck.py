"""The log checker itself: it accepts a real log and flags each kind of malformation."""

from __future__ import annotations

from types import SimpleNamespace as NS
from typing import Any

from steerloop import AssistantMessage, ToolCallBlock, ToolResultMessage, user_message
from steerloop.testing import text_response, tool_call_response

from .conftest import Harness, settle
from .logcheck import derived_problems, log_problems


class _FakeSession:
    def __init__(self, events: list[tuple[Any, ...]], messages: list[Any] = ()) -> None:  # type: ignore[assignment]
        self.id = "fake"
        self.events = [
            NS(seq=i, type=t, data=d, source_event_seqs=src)
            for i, (t, d, *rest) in enumerate(events, start=1)
            for src in [rest[0] if rest else None]
        ]
        self._messages = list(messages)

    def derive_messages(self) -> list[Any]:
        return self._messages


def _msg(*call_ids: str, interrupted: bool = False) -> Any:
    calls = tuple(ToolCallBlock(c, "t", "{}") for c in call_ids)
    return NS(message=AssistantMessage(id="a", content=calls), interrupted=interrupted)


def _result(call_id: str, code: str | None = None) -> Any:
    message = ToolResultMessage(id=f"r-{call_id}", call_id=call_id, content=())
    return NS(message=message, error=NS(code=code) if code else None)


def _splice(target: str, start: int, removed: int, *ids: str) -> Any:
    inserted = tuple(user_message(i, id=i) for i in ids)
    return NS(target=target, start=start, removed_count=removed, inserted=inserted, outcome=None)


T1, T1E = ("turn/start", NS(turn=1)), ("turn/end", NS(turn=1, reason=NS(kind="completed")))
S1, S1E = ("step/start", NS(turn=1, step=1)), ("step/end", NS(turn=1, step=1))


async def test_a_real_tool_round_trip_is_well_formed(h: Harness) -> None:
    """A canonical tool turn passes the checker."""
    from steerloop import define_tool

    h.rt.tools.register(
        define_tool(name="echo", description="e", parameters={"type": "object"}, execute=_echo)
    )
    agent = await h.agent(tool_call_response("c1", "echo", {"x": 1}), text_response("done"))
    agent.followup(user_message("u1"))
    await settle(agent)
    assert log_problems(agent.session) == []


async def _echo(args: Any, exec: Any) -> str:
    return "ok"


def test_well_formed_fake_log_passes() -> None:
    """The fake-session builder itself yields a clean log when the events are right."""
    session = _FakeSession(
        [T1, S1, ("assistant/message", _msg("c1")), ("tool/call", NS(call_id="c1")),
         ("tool/result", _result("c1"), (4,)), S1E, T1E],
    )  # fmt: skip
    assert log_problems(session) == []


def test_flags_unbalanced_turns_and_steps() -> None:
    """Missing turn/end, a step left open and a nested turn are all reported."""
    problems = log_problems(_FakeSession([T1, S1, ("turn/start", NS(turn=2))]))
    text = "\n".join(problems)
    assert "starts inside turn 1" in text
    assert "never ended" in text


def test_flags_seq_gaps() -> None:
    """Seqs must be contiguous from 1."""
    session = _FakeSession([T1, T1E])
    session.events[1].seq = 3
    assert any("contiguous" in p for p in log_problems(session))


def test_flags_unpaired_and_duplicated_tool_results() -> None:
    """A call without result, a second result and a result without call are reported."""
    session = _FakeSession(
        [T1, S1, ("assistant/message", _msg("c1", "c2")), ("tool/call", NS(call_id="c1")),
         ("tool/result", _result("c1"), (4,)), ("tool/result", _result("c1"), (4,)),
         ("tool/result", _result("c2")), S1E, T1E],
    )  # fmt: skip
    text = "\n".join(log_problems(session))
    assert "result #2 for call c1" in text
    assert "result for c2 without a tool/call" in text


def test_flags_unanswered_calls_at_step_end() -> None:
    """A requested call still unanswered when its step ends is reported."""
    session = _FakeSession([T1, S1, ("assistant/message", _msg("c1")), S1E, T1E])
    assert any("unanswered calls ['c1']" in p for p in log_problems(session))


def test_allows_tool_not_started_recovery_without_call() -> None:
    """The TOOL_NOT_STARTED recovery answer needs no tool/call."""
    session = _FakeSession(
        [T1, S1, ("assistant/message", _msg("c1")),
         ("tool/result", _result("c1", "TOOL_NOT_STARTED"), (3,)), S1E, T1E],
    )  # fmt: skip
    assert log_problems(session) == []


def test_flags_interrupted_message_with_tool_calls() -> None:
    """An interrupted message never carries tool calls."""
    session = _FakeSession([T1, S1, ("assistant/message", _msg("c1", interrupted=True)), S1E, T1E])
    assert any("interrupted message" in p for p in log_problems(session))


def test_flags_double_claim_and_out_of_bounds_splice() -> None:
    """A message removed twice (re-claimed) and an out-of-bounds splice are reported."""
    session = _FakeSession(
        [("agent/inbox/spliced", _splice("next-turn", 0, 0, "u1")),
         ("agent/inbox/spliced", _splice("next-turn", 0, 1)),
         ("agent/inbox/spliced", _splice("next-turn", 0, 1))],
    )  # fmt: skip
    assert any("out of bounds" in p for p in log_problems(session))
    session = _FakeSession(
        [("agent/inbox/spliced", _splice("next-step", 0, 0, "u1", "u1"))],
    )
    assert any("pending twice" in p for p in log_problems(session))


def test_derived_problems() -> None:
    """Derived history: calls must be followed by their results, in order, and nothing else."""
    a = AssistantMessage(
        id="a", content=(ToolCallBlock("c1", "t", "{}"), ToolCallBlock("c2", "t", ""))
    )
    r1 = ToolResultMessage(id="r1", call_id="c1", content=())
    r2 = ToolResultMessage(id="r2", call_id="c2", content=())
    u = user_message("u")
    assert derived_problems([u, a, r1, r2, u]) == []
    assert derived_problems([u, a, r2, r1])  # wrong order
    assert derived_problems([u, a, r1, u, r2])  # interleaved user message
    assert derived_problems([u, r1])  # orphan result


def test_flags_unclaimed_dropped_and_duplicate_deliveries() -> None:
    """An inbox message delivered before its claim, a dropped one delivered, and a message
    delivered twice are reported."""
    dropped = _splice("next-turn", 0, 1)
    dropped.outcome = "canceled"
    session = _FakeSession(
        [("agent/inbox/spliced", _splice("next-turn", 0, 0, "u1", "u2")),
         ("user/message", user_message("u1", id="u1")),
         ("agent/inbox/spliced", _splice("next-turn", 0, 1)),
         ("user/message", user_message("u1", id="u1")),
         ("agent/inbox/spliced", dropped),
         ("user/message", user_message("u2", id="u2"))],
    )  # fmt: skip
    text = "\n".join(log_problems(session))
    assert "u1 delivered without a claim" in text
    assert "u1 delivered twice" in text
    assert "dropped message u2 delivered" in text
