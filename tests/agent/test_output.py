"""Structured output: ``run(..., output_type=T)``.

The answer is asked for natively (``CallConfig.output_schema``) when the model supports it
(``ModelInfo.json_schema_output``), else through a ``final_result`` tool visible to that turn
only; ``agent/turn-stopping`` validates it, sends the error back as a logged next-step
message at most ``output_retries`` times, then ends the turn ``error{OUTPUT_INVALID}``; the
validated value is logged as ``turn/output`` before ``turn/end``.
"""

from __future__ import annotations

import asyncio
import json
import re
import socket
from typing import Any

import pydantic
import pytest

from steerloop import SessionCorruptError, TurnResult, user_message
from steerloop.agent._output import OutputSpec
from steerloop.llm import ModelInfo
from steerloop.session._codec import event_from_json
from steerloop.testing import (
    text_response,
    tool_call_response,
    tool_calls_response,
    wait_all_tasks_blocked,
)

from ..conftest import Harness, compact, events_of, label, settle, within
from ..logcheck import assert_well_formed

WRONG_TOOL = (
    "Your final answer is not valid: celsius: Field required. "
    "Call final_result again with corrected arguments."
)


class Weather(pydantic.BaseModel):
    city: str
    celsius: float


PARIS = {"city": "Paris", "celsius": 21.5}
PARIS_WEATHER = Weather(city="Paris", celsius=21.5)


def native(h: Harness) -> None:
    h.adapter.model_info = ModelInfo(json_schema_output=True)


async def test_tool_mode_retries_through_a_logged_next_step_message(h: Harness) -> None:
    """The invalid ``final_result`` call is answered by a next-step message of the same
    turn; the valid one is logged as ``turn/output`` right before ``turn/end``."""
    agent = await h.agent(
        tool_call_response("c1", "final_result", {"city": "Paris"}),
        tool_call_response("c2", "final_result", PARIS),
    )
    result = await within(agent.run("weather?", output_type=Weather, output_retries=2))
    assert compact(agent.session) == [
        "ins(nt,weather?)", "T+1", "claim(nt,weather?)", "S+1.1", "sys", "user(weather?)",
        "hdr(initial)", "ctx", "msg", "call(c1)", "result(c1)", "S-1.1",
        f"ins(ns,{WRONG_TOOL})", f"claim(ns,{WRONG_TOOL})", "S+1.2", f"user({WRONG_TOOL})",
        "msg", "call(c2)", "result(c2)", "S-1.2", "turn/output", "T-1:completed",
    ]  # fmt: skip
    assert result.kind == "completed" and result.output == PARIS_WEATHER
    retry = events_of(agent.session, "user/message")[1].data
    assert (retry.source.kind, retry.source.plugin) == ("plugin", "steerloop/output")
    (output,) = events_of(agent.session, "turn/output")
    assert output.ignorable
    assert output.data.output == PARIS and output.data.turn == 1
    assert agent.session.event(output.data.message_seq).type == "assistant/message"
    # The model saw the output schema as the tool's parameters, and no output_schema.
    (tool,) = h.adapter.requests[0].tools
    assert tool.name == "final_result" and tool.parameters == Weather.model_json_schema()
    assert all(r.config is not None and r.config.output_schema is None for r in h.adapter.requests)
    assert TurnResult.from_session(agent.session, 1, Weather) == result
    assert_well_formed(agent.session)


async def test_the_final_result_tool_belongs_to_its_turn_only(h: Harness) -> None:
    """Counterexample for the ordering of queued runs: a plain run queued before a
    structured one sees no ``final_result``; the structured turn does; the plain turn after
    it does not again, and its header records the change."""
    agent = await h.agent(
        text_response("plain"),
        tool_call_response("c1", "final_result", PARIS),
        text_response("plain again"),
    )
    plain = asyncio.ensure_future(agent.run("a"))
    await asyncio.sleep(0)
    structured = asyncio.ensure_future(agent.run("b", output_type=Weather))
    after = asyncio.ensure_future(agent.run("c"))
    results = await within(asyncio.gather(plain, structured, after))
    assert [r.turn for r in results] == [1, 2, 3]
    assert [r.output for r in results] == [None, PARIS_WEATHER, None]
    assert [[t.name for t in r.tools] for r in h.adapter.requests] == [[], ["final_result"], []]
    assert compact(agent.session, only=["hdr", "T-", "turn/output"]) == [
        "hdr(initial)", "T-1:completed", "hdr(change)", "turn/output", "T-2:completed",
        "hdr(change)", "T-3:completed",
    ]  # fmt: skip
    assert not h.rt.hooks.has("agent/turn-stopping")
    assert h.rt.tools.get("final_result", agent.id) is None


async def test_native_mode_asks_with_output_schema_and_validates_the_text(h: Harness) -> None:
    """The request carries ``config.output_schema`` (recorded in ``request/header``) and no
    tool; invalid JSON text is retried; the next plain turn asks for nothing (the field
    does not stick through the logged header)."""
    native(h)
    agent = await h.agent(
        text_response('{"city": "Paris", "celsius": "warm"}'),
        text_response(json.dumps(PARIS)),
        text_response("plain"),
    )
    result = await within(agent.run("weather?", output_type=Weather))
    retry = (
        "Your answer does not match the output schema: celsius: Input should be a valid "
        "number, unable to parse string as a number. Answer again with only the corrected JSON."
    )
    assert compact(agent.session)[8:] == [
        "msg", "S-1.1", f"ins(ns,{retry})", f"claim(ns,{retry})", "S+1.2", f"user({retry})",
        "msg", "S-1.2", "turn/output", "T-1:completed",
    ]  # fmt: skip
    assert result.output == PARIS_WEATHER and result.text == json.dumps(PARIS)
    schema = Weather.model_json_schema()
    assert [r.config.output_schema for r in h.adapter.requests[:2]] == [schema, schema]  # type: ignore[union-attr]
    assert all(r.tools == () for r in h.adapter.requests)
    (header,) = events_of(agent.session, "request/header")
    assert header.data.header["config"]["output_schema"] == schema

    plain = await within(agent.run("thanks"))
    assert plain.output is None and h.adapter.requests[2].config.output_schema is None  # type: ignore[union-attr]
    last_header = events_of(agent.session, "request/header")[-1].data
    assert last_header.reason == "change" and "output_schema" not in last_header.header["config"]


async def test_retries_exhausted_end_the_turn_error_output_invalid(h: Harness) -> None:
    """``output_retries=1``: one retry message, then ``T-1:error{OUTPUT_INVALID}``; the run
    reports it (never raises) and no ``turn/output`` is written."""
    errors: list[Any] = []
    h.rt.hooks.on("agent/error", errors.append)
    agent = await h.agent(
        tool_call_response("c1", "final_result", {"city": "Paris"}),
        text_response("I refuse"),
    )
    result = await within(agent.run("weather?", output_type=Weather, output_retries=1))
    assert compact(agent.session)[-9:] == [
        "result(c1)", "S-1.1", f"ins(ns,{WRONG_TOOL})", f"claim(ns,{WRONG_TOOL})", "S+1.2",
        f"user({WRONG_TOOL})", "msg", "S-1.2", "T-1:error",
    ]  # fmt: skip
    assert result.kind == "error" and result.output is None and result.text == "I refuse"
    assert result.error is not None and result.error.code == "OUTPUT_INVALID"
    assert result.error.message == (
        "the output did not validate after 1 retries: no final_result call"
    )
    assert events_of(agent.session, "turn/output") == []
    assert [(e.turn, e.step) for e in errors] == [(1, 0)]
    assert_well_formed(agent.session)


async def test_zero_retries_fail_on_the_first_invalid_answer(h: Harness) -> None:
    agent = await h.agent(text_response("not JSON"))
    native(h)
    result = await within(agent.run("weather?", output_type=Weather, output_retries=0))
    assert compact(agent.session)[-3:] == ["msg", "S-1.1", "T-1:error"]
    assert result.error is not None and result.error.code == "OUTPUT_INVALID"
    assert result.error.message.startswith(
        "the output did not validate after 0 retries: invalid JSON"
    )


async def test_a_non_object_output_is_wrapped_in_response(h: Harness) -> None:
    agent = await h.agent(tool_call_response("c1", "final_result", {"response": [3, 1, 2]}))
    result = await within(agent.run("numbers?", output_type=list[int]))
    assert result.output == [3, 1, 2]
    (tool,) = h.adapter.requests[0].tools
    assert tool.parameters == {
        "title": "list",
        "type": "object",
        "properties": {"response": {"type": "array", "items": {"type": "integer"}}},
        "required": ["response"],
    }
    assert events_of(agent.session, "turn/output")[0].data.output == [3, 1, 2]


async def test_a_json_schema_dict_is_an_output_type(h: Harness) -> None:
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    agent = await h.agent(
        tool_call_response("c1", "final_result", {"n": "one"}),
        tool_call_response("c2", "final_result", {"n": 1}),
    )
    result = await within(agent.run("count", output_type=schema))
    assert result.output == {"n": 1}
    retry = events_of(agent.session, "user/message")[1].data
    assert label(retry) == (
        "Your final answer is not valid: n: 'one' is not of type 'integer'. "
        "Call final_result again with corrected arguments."
    )
    with pytest.raises(ValueError, match="invalid output schema"):
        await agent.run("x", output_type={"type": 12})


async def test_hostile_final_result_arguments_never_break_the_turn(h: Harness) -> None:
    """Arguments that are not JSON get the pipeline's ``INVALID_ARGS`` result (the step owes
    a request, no retry is spent); a second call in the same step wins over the first (the
    calls have no side effect, so they run together)."""
    agent = await h.agent(
        tool_call_response("c1", "final_result", "{not json"),
        tool_calls_response([("c2", "final_result", {"city": 1}), ("c3", "final_result", PARIS)]),
    )
    result = await within(agent.run("weather?", output_type=Weather, output_retries=0))
    assert compact(agent.session, only=["call", "result", "S", "turn/output", "T-"]) == [
        "S+1.1", "call(c1)", "result(c1,INVALID_ARGS)", "S-1.1", "S+1.2", "call(c2)",
        "call(c3)", "result(c2)", "result(c3)", "S-1.2", "turn/output", "T-1:completed",
    ]  # fmt: skip
    assert result.output == PARIS_WEATHER


async def test_a_steer_during_a_structured_turn_is_answered_in_it(h: Harness) -> None:
    """C7.5-13: the steer is claimed before turn-stopping runs, so only the answer that
    follows it is validated (the first valid call is not recorded)."""

    def steer(request: Any) -> Any:
        agent.steer(user_message("in Fahrenheit? no, Celsius"))
        return tool_call_response("c1", "final_result", {"city": "Paris", "celsius": 0})

    agent = await h.agent(steer, tool_call_response("c2", "final_result", PARIS))
    result = await within(agent.run("weather?", output_type=Weather, output_retries=0))
    assert compact(agent.session, only=["claim", "S+", "call", "turn/output", "T-"]) == [
        "claim(nt,weather?)", "S+1.1", "call(c1)", "claim(ns,in Fahrenheit? no, Celsius)",
        "S+1.2", "call(c2)", "turn/output", "T-1:completed",
    ]  # fmt: skip
    assert result.output == PARIS_WEATHER


async def test_turn_output_round_trips_through_the_codec(h: Harness) -> None:
    agent = await h.agent(tool_call_response("c1", "final_result", PARIS))
    await within(agent.run("weather?", output_type=Weather))
    (event,) = events_of(agent.session, "turn/output")
    raw = json.loads(json.dumps(event.to_json()))
    assert raw["ignorable"] is True and raw["data"] == {
        "turn": 1,
        "message_seq": event.data.message_seq,
        "output": PARIS,
    }
    assert event_from_json(raw) == event

    for broken in ({"turn": 1, "output": 1}, {"turn": 0, "message_seq": 1}):
        with pytest.raises(SessionCorruptError, match=f"seq {event.seq}"):
            event_from_json({**raw, "data": broken})


async def test_cancelling_the_waiting_task_does_not_stop_the_structured_turn(
    h: Harness,
) -> None:
    """The caller gives up waiting (``Task.cancel`` of its own await): the turn still asks
    with the tool, validates, retries and records its output; only ``agent.cancel()`` would
    stop it."""
    release = asyncio.Event()

    async def slow(request: Any) -> Any:
        await release.wait()
        return tool_call_response("c1", "final_result", {"city": "Paris"})

    agent = await h.agent(slow, tool_call_response("c2", "final_result", PARIS))
    waiting = asyncio.ensure_future(agent.run("weather?", output_type=Weather))
    await wait_all_tasks_blocked()
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    release.set()
    await settle(agent)
    assert compact(agent.session, only=["ins(ns", "turn/output", "T-"]) == [
        f"ins(ns,{WRONG_TOOL})", "turn/output", "T-1:completed",
    ]  # fmt: skip
    assert TurnResult.from_session(agent.session, 1, Weather).output == PARIS_WEATHER
    assert not h.rt.hooks.has("agent/turn-stopping")


def test_a_network_ref_in_an_output_schema_is_never_fetched() -> None:
    """SEP-2106: validating an answer against an output schema never retrieves a ``$ref`` to
    a network URI (an answer that reaches it is invalid, naming it, and nothing connects);
    same-document references still resolve."""
    with socket.create_server(("127.0.0.1", 0)) as canary:
        canary.setblocking(False)
        url = f"http://127.0.0.1:{canary.getsockname()[1]}/city.json"
        spec: OutputSpec[Any] = OutputSpec(
            {
                "type": "object",
                "$defs": {"c": {"type": "number"}},
                "properties": {"celsius": {"$ref": "#/$defs/c"}, "city": {"$ref": url}},
            }
        )
        assert spec.from_json({"celsius": 21.5}) == {"celsius": 21.5}
        with pytest.raises(ValueError, match="celsius"):
            spec.from_json({"celsius": "warm"})
        with pytest.raises(ValueError, match=re.escape(url)):
            spec.from_json({"celsius": 1, "city": "Paris"})
        with pytest.raises(BlockingIOError):
            canary.accept()
