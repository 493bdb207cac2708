"""Elicitation as durable input requests: a server asks during a call, the agent writes
``input/requested``, the call waits (its timeout standing still) until ``answer_input``
writes ``input/answered`` (validated against the schema), or the turn's cancel answers it
``cancel``. Against the hostile server and server-everything."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, TextIO

import pytest

from steerloop import CancelCause, InputRequest, user_message
from steerloop.errors import InputError
from steerloop.mcp import MCPServer, MCPTools, install_mcp
from steerloop.session import pending_inputs
from steerloop.session.events import InputAnswered
from steerloop.testing import text_response, tool_call_response

from ..conftest import Harness, compact, events_of, settle
from .helpers import START, eventually, everything_bin, hostile, result_texts

pytestmark = pytest.mark.timeout(180)


@pytest.fixture
async def installed(h: Harness, state: Path, errlog: TextIO) -> AsyncIterator[MCPTools]:
    tools = await install_mcp(h.rt, [hostile(state, timeout=30.0)], errlog=errlog)
    yield tools
    await tools.close()


async def waiting(agent: Any) -> InputRequest:
    (request,) = await eventually(lambda: agent.pending_inputs)
    assert isinstance(request, InputRequest)
    return request


ASKED_SCHEMA = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
    "required": ["name"],
}


async def test_an_elicitation_is_a_durable_input_request_answered_by_answer_input(
    h: Harness, installed: MCPTools
) -> None:
    """input/requested (server, message, schema, call) → the call waits → answer_input writes
    input/answered (returns its seq) → the server gets the answer; all before the result."""
    agent = await h.agent(
        tool_call_response("c1", "x__ask", {"text": "Who are you?"}), text_response("ok")
    )
    agent.followup(user_message("go"))
    request = await waiting(agent)
    assert (request.server, request.message, request.call_id, request.kind) == (
        "x",
        "Who are you?",
        "c1",
        "elicitation",
    )
    assert request.schema == ASKED_SCHEMA and request.url is None
    assert pending_inputs(agent.session.events) == (request,)
    seq = agent.answer_input(request.id, "accept", {"name": "Ada", "age": 36}, by="test")
    assert agent.session.events[seq - 1].data == InputAnswered(
        id=request.id, action="accept", content={"name": "Ada", "age": 36}, by="test"
    )
    await settle(agent, START)
    assert json.loads("".join(result_texts(agent, "c1"))) == {
        "action": "accept",
        "content": {"age": 36, "name": "Ada"},
    }
    assert compact(agent.session, only=("call(", "result(")) == ["call(c1)", "result(c1)"]
    kinds = [e.type for e in agent.session.events if e.type.startswith(("input/", "tool/"))]
    assert kinds == ["tool/call", "input/requested", "input/answered", "tool/result"]
    assert agent.pending_inputs == () and pending_inputs(agent.session.events) == ()
    with pytest.raises(InputError) as refused:
        agent.answer_input(request.id, "decline")
    assert refused.value.state == "answered"


async def test_an_answer_the_schema_refuses_writes_nothing(h: Harness, installed: MCPTools) -> None:
    """Content that does not match the schema (or content with a decline) is a ValueError;
    nothing is written and the request still waits; decline then reaches the server."""
    agent = await h.agent(tool_call_response("c1", "x__ask", {"text": "Who?"}), text_response("ok"))
    agent.followup(user_message("go"))
    request = await waiting(agent)
    before = len(agent.session.events)
    with pytest.raises(ValueError, match="age: 'old' is not of type 'integer'"):
        agent.answer_input(request.id, "accept", {"name": "Ada", "age": "old"})
    with pytest.raises(ValueError, match="'name' is a required property"):
        agent.answer_input(request.id, "accept", {})
    with pytest.raises(ValueError, match="carries no content"):
        agent.answer_input(request.id, "decline", {"name": "Ada"})
    with pytest.raises(ValueError, match="action must be"):
        agent.answer_input(request.id, "maybe")
    with pytest.raises(InputError) as unknown:
        agent.answer_input("input-none", "decline")
    assert unknown.value.state == "unknown"
    assert len(agent.session.events) == before
    assert agent.pending_inputs == (request,)
    agent.answer_input(request.id, "decline")
    await settle(agent, START)
    assert json.loads("".join(result_texts(agent, "c1"))) == {"action": "decline"}


async def test_cancelling_the_turn_answers_the_request_cancel(
    h: Harness, installed: MCPTools
) -> None:
    """The turn is cancelled while the call waits: input/answered{cancel} is written, the call
    ends ABORTED, and the request no longer takes an answer."""
    agent = await h.agent(tool_call_response("c1", "x__ask", {"text": "Who?"}))
    agent.followup(user_message("go"))
    request = await waiting(agent)
    agent.cancel(CancelCause.user())
    await settle(agent, START)
    answered = [e.data for e in events_of(agent.session, "input/answered")]
    assert answered == [InputAnswered(id=request.id, action="cancel")]
    assert compact(agent.session, only=("result(", "T-")) == ["result(c1,ABORTED)", "T-1:aborted"]
    assert agent.pending_inputs == ()
    with pytest.raises(InputError) as refused:
        agent.answer_input(request.id, "accept", {"name": "late"})
    assert refused.value.state == "answered"


async def test_the_tool_timeout_stands_still_while_a_person_is_asked(
    h: Harness, state: Path, errlog: TextIO
) -> None:
    """A 0.5 s tool timeout: the answer comes after 1 s of waiting, and the call succeeds."""
    installed = await install_mcp(h.rt, [hostile(state, timeout=0.5)], errlog=errlog)
    agent = await h.agent(
        tool_call_response("c1", "x__ask", {"text": "Slowly?"}), text_response("ok")
    )
    agent.followup(user_message("go"))
    request = await waiting(agent)
    await asyncio.sleep(1.0)  # longer than the timeout: the clock must stand still
    agent.answer_input(request.id, "accept", {"name": "Slow"})
    await settle(agent, START)
    assert compact(agent.session, only=("result(",)) == ["result(c1)"]
    assert json.loads("".join(result_texts(agent, "c1")))["content"] == {"name": "Slow"}
    await installed.close()


async def test_a_url_request_has_no_schema_and_takes_no_content(
    h: Harness, installed: MCPTools
) -> None:
    """URL mode: the request carries the URL and no schema; accept carries no content."""
    agent = await h.agent(tool_call_response("c1", "x__ask_url", {}), text_response("ok"))
    agent.followup(user_message("go"))
    request = await waiting(agent)
    assert (request.url, request.schema, request.message) == (
        "https://example.test/login",
        None,
        "Sign in",
    )
    agent.answer_input(request.id, "accept")
    await settle(agent, START)
    assert json.loads("".join(result_texts(agent, "c1"))) == {"action": "accept"}


async def test_everything_elicitation_over_stdio(h: Harness, errlog: TextIO) -> None:
    """server-everything's trigger-elicitation-request: its form schema (formats, enums,
    bounds) is the request's; an answer valid against it reaches the server."""
    server = MCPServer.stdio("ev", command=everything_bin(), args=["stdio"])
    installed = await install_mcp(h.rt, [server], errlog=errlog)
    agent = await h.agent(
        tool_call_response("c1", "ev__trigger-elicitation-request", {}), text_response("ok")
    )
    agent.followup(user_message("go"))
    request = await waiting(agent)
    assert request.schema is not None and request.schema["type"] == "object"
    with pytest.raises(ValueError, match="integer: 1000 is greater than the maximum of 100"):
        agent.answer_input(request.id, "accept", {"name": "Ada", "integer": 1000})
    agent.answer_input(request.id, "accept", {"name": "Ada", "check": True, "integer": 7})
    await settle(agent, START)
    text = "".join(result_texts(agent, "c1"))
    assert "Ada" in text and "accept" in text
    await installed.close()
