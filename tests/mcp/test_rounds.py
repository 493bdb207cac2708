"""The 2026-07-28 stateless input rounds, driven by steerloop's transport and durable: a server
of these tests answers ``tools/call`` ``input_required`` (an elicitation and sealed
``requestState``); the agent writes ``input/requested`` with the round (``resume``), the call
waits, and the answer — on this process or, after a crash, on the one that resumed the
session — is sent with the state, once. And the same protocol's resource updates, which come
on ``subscriptions/listen``."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from steerloop import AgentOptions, CancelCause, InputRequest, Runtime, user_message
from steerloop.mcp import MCPServer, MCPTools, install_mcp
from steerloop.session.events import InputAnswered, MCPResourceUpdated
from steerloop.testing import ScriptedAdapter, text_response, tool_call_response

from ..conftest import Harness, compact, events_of, settle
from ..logcheck import assert_well_formed
from ..support import kill_after_first_line
from .helpers import eventually, python_server, result_texts

pytestmark = pytest.mark.timeout(180)

ROUNDS_SERVER = Path(__file__).with_name("rounds_server.py")
CHILD = Path(__file__).with_name("_rounds_crash_child.py")
COUNT_SCHEMA = {
    "type": "object",
    "properties": {"count": {"type": "integer", "minimum": 1, "maximum": 9}},
    "required": ["count"],
}


@pytest.fixture
async def url(state: Path) -> AsyncIterator[str]:
    async with python_server(ROUNDS_SERVER, state) as address:
        yield address


@pytest.fixture
async def installed(h: Harness, url: str) -> AsyncIterator[MCPTools]:
    tools = await install_mcp(h.rt, [MCPServer.http("r", url=url, timeout=30.0)])
    yield tools
    await tools.close()


def completed(state: Path) -> list[str]:
    """What the server was told, one line per completed order."""
    path = state / "completed"
    return path.read_text().splitlines() if path.exists() else []


async def asked(agent: Any) -> InputRequest:
    (request,) = await eventually(lambda: agent.pending_inputs)
    assert isinstance(request, InputRequest)
    return request


def check_round(request: InputRequest, call_id: str = "c1") -> None:
    """The request as the round recorded it: enough to send the call again elsewhere."""
    assert (request.server, request.message, request.call_id) == ("r", "How many tea?", call_id)
    assert request.schema == COUNT_SCHEMA
    resume = request.resume
    assert isinstance(resume, dict)
    assert (resume["v"], resume["tool"], resume["round"], resume["key"]) == (1, "order", 1, "count")
    assert resume["request_state"] != "order:tea"  # sealed by the server, echoed verbatim
    assert list(resume["requests"]) == ["count"]
    assert resume["requests"]["count"]["method"] == "elicitation/create"
    assert resume["responses"] == {}


async def test_an_input_round_is_a_durable_request_answered_once(
    h: Harness, installed: MCPTools, state: Path
) -> None:
    """input/requested carries the round; an answer outside the schema is refused (nothing
    written, still pending); the valid answer is sent with the state: the server completes
    the order once and the result is the call's."""
    agent = await h.agent(
        tool_call_response("c1", "r__order", {"item": "tea"}), text_response("done")
    )
    agent.followup(user_message("order tea"))
    request = await asked(agent)
    check_round(request)
    with pytest.raises(ValueError, match="count: 0 is less than the minimum of 1"):
        agent.answer_input(request.id, "accept", {"count": 0}, by="me")
    assert agent.pending_inputs == (request,)
    agent.answer_input(request.id, "accept", {"count": 3}, by="me")
    await settle(agent, 60)
    assert result_texts(agent, "c1") == ["ordered 3 tea"]
    assert completed(state) == ['tea accept {"count": 3}']
    assert compact(agent.session, only=("input/", "result(")) == [
        "input/requested",
        "input/answered",
        "result(c1)",
    ]
    assert_well_formed(agent.session)


async def test_a_cancel_answer_is_sent_as_cancel(
    h: Harness, installed: MCPTools, state: Path
) -> None:
    agent = await h.agent(
        tool_call_response("c1", "r__order", {"item": "tea"}), text_response("done")
    )
    agent.followup(user_message("order tea"))
    request = await asked(agent)
    agent.answer_input(request.id, "cancel", None, by="me")
    await settle(agent, 60)
    assert result_texts(agent, "c1") == ["no tea ordered (cancel)"]
    assert completed(state) == ["tea cancel null"]


async def test_a_cancelled_turn_answers_the_round_cancel_and_tells_the_server_nothing(
    h: Harness, installed: MCPTools, state: Path
) -> None:
    """C7.8-12: the call ends ABORTED, its request answered ``cancel`` in the log; the
    server is not sent the round again."""
    agent = await h.agent(tool_call_response("c1", "r__order", {"item": "tea"}))
    agent.followup(user_message("order tea"))
    request = await asked(agent)
    agent.cancel(CancelCause.user())
    await settle(agent, 60)
    answers = [e.data for e in agent.session.events if e.type == "input/answered"]
    assert answers == [InputAnswered(id=request.id, action="cancel")]
    assert compact(agent.session, only=("result(",)) == ["result(c1,ABORTED)"]
    assert completed(state) == []


async def test_a_round_killed_with_its_process_is_finished_by_the_next(
    tmp_path: Path, url: str, state: Path
) -> None:
    """A child process on a SQLite file is SIGKILLed while ``c1`` waits for the answer to
    its round. This process opens the file, installs the server (its resumer), resumes the
    session: the request is pending again, nothing appended but the seed's end; the answer
    (validated) completes ``c1`` with the server's result, the server told exactly once."""
    path = tmp_path / "crash.db"
    words = await kill_after_first_line(CHILD, str(path), url, timeout=120.0)
    assert words[0] == "waiting"
    rt = await Runtime.open(store=f"sqlite:///{path}")
    try:
        model = ScriptedAdapter([text_response("thanks")])
        rt.llm.register_adapter(["mock"], model)
        await install_mcp(rt, [MCPServer.http("r", url=url, timeout=30.0)])
        options = AgentOptions(provider="mock", model="m")
        agent = (await rt.agents.resume(resume_session_id="s", agent_options=options)).agent
        kept = int(words[1])
        assert compact(agent.session)[kept:] == ["session/end-seed"]
        (request,) = agent.pending_inputs
        check_round(request)
        assert completed(state) == []
        with pytest.raises(ValueError, match="count"):
            agent.answer_input(request.id, "accept", {"count": "three"}, by="me")
        agent.answer_input(request.id, "accept", {"count": 3}, by="me")
        await settle(agent, 60)
        assert compact(agent.session)[kept:] == [
            "session/end-seed", "input/answered", "result(c1)", "S-1.1", "S+1.2",
            "hdr(resume)", "msg", "S-1.2", "T-1:completed",
        ]  # fmt: skip
        assert result_texts(agent, "c1") == ["ordered 3 tea"]
        assert completed(state) == ['tea accept {"count": 3}']
        assert_well_formed(agent.session)
    finally:
        await rt.close()
    assert json.loads(completed(state)[0].split(" ", 2)[2]) == {"count": 3}


async def test_a_resource_watched_on_2026_07_28_logs_its_updates_and_nothing_is_reread(
    h: Harness, installed: MCPTools, state: Path
) -> None:
    """2026-07-28 has no ``resources/subscribe``: reading a resource for an agent adds it to
    the connection's ``subscriptions/listen`` filter (acknowledged before the read returns);
    the server's update of it appends ``mcp/resource-updated`` to that agent's log, an
    update of another resource nothing; the resource is not read again."""
    agent = await h.agent(
        tool_call_response("c1", "r__read_resource", {"uri": "note://doc"}),
        tool_call_response("c2", "r__touch", {"uri": "note://doc"}),
        tool_call_response("c3", "r__touch", {"uri": "note://other"}),
        text_response("done"),
    )
    agent.followup(user_message("go"))
    await settle(agent, 60)
    assert result_texts(agent, "c1")[0].endswith("\nthe note")
    updates = await eventually(lambda: events_of(agent.session, "mcp/resource-updated"))
    assert [e.data for e in updates] == [MCPResourceUpdated(server="r", uri="note://doc")]
    assert updates[0].ignorable
    assert (state / "reads").read_text().splitlines() == ["note://doc"]
