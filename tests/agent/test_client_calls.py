"""Client tools as deferred calls: offered to the model, a call is logged like any call,
``tool/deferred`` marks its wait, ``answer`` commits its ``tool/result`` and the turn goes
on; a cancel answers it like any call cancelled in its body."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from steerloop import CancelCause, define_tool, user_message
from steerloop.agent._client_calls import ClientCallError, ClientTool
from steerloop.messages import ToolResultMessage
from steerloop.session._codec import event_from_json, validate_log
from steerloop.session._deferred import pending_deferred
from steerloop.session.events import ToolDeferred
from steerloop.testing import text_response, tool_call_response

from ..conftest import Harness, compact, settle

PICK = ClientTool(
    "pick_color",
    "Ask the user to pick a color",
    {"type": "object", "properties": {"hint": {"type": "string"}}},
)


async def deferred(agent: Any, call_id: str) -> None:
    """Wait (bounded) until ``call_id`` waits for the client."""
    for _ in range(500):
        if any(r.call_id == call_id for r in agent.client_calls.pending):
            return
        await asyncio.sleep(0)
    raise AssertionError(f"{call_id} never waited: {compact(agent.session)}")


async def test_a_client_call_waits_then_commits_its_answer(h: Harness) -> None:
    agent = await h.agent(tool_call_response("c1", "pick_color", {"hint": "warm"}))
    agent.client_calls.offer([PICK])
    h.adapter.add(text_response("red it is"))
    agent.followup(user_message("u1"))
    await deferred(agent, "c1")
    # the model was offered the client tool with the client's schema
    offered = h.adapter.requests[0].tools
    assert [(t.name, t.description) for t in offered] == [
        ("pick_color", "Ask the user to pick a color")
    ]
    assert agent.status == "running"
    record = ToolDeferred(
        turn=1, step=1, call_id="c1", name="pick_color", arguments='{"hint": "warm"}'
    )
    assert agent.client_calls.pending == (record,)
    assert pending_deferred(agent.session.events) == (record,)
    agent.client_calls.answer("c1", "red")
    await settle(agent)
    assert compact(agent.session, only=("call(", "defer(", "result(", "S", "T-")) == [
        "S+1.1", "call(c1)", "defer(c1)", "result(c1)", "S-1.1", "S+1.2", "S-1.2",
        "T-1:completed",
    ]  # fmt: skip
    result = next(e for e in agent.session.events if e.type == "tool/result").data
    assert result.message.content[0].text == "red" and not result.message.is_error
    # the model got the client's answer as the call's result
    last = h.adapter.requests[1].messages[-1]
    assert isinstance(last, ToolResultMessage) and last.call_id == "c1"
    assert pending_deferred(agent.session.events) == ()
    validate_log(agent.session.events)
    for event in agent.session.events:
        assert event_from_json(event.to_json()) == event


async def test_an_error_answer_is_an_error_result(h: Harness) -> None:
    agent = await h.agent(tool_call_response("c1", "pick_color", {}), text_response("ok"))
    agent.client_calls.offer([PICK])
    agent.followup(user_message("u1"))
    await deferred(agent, "c1")
    agent.client_calls.answer("c1", "the user closed the dialog", is_error=True)
    await settle(agent)
    assert compact(agent.session, only=("result(",)) == ["result(c1,CLIENT_ERROR)"]


async def test_a_cancel_answers_a_waiting_call(h: Harness) -> None:
    agent = await h.agent(tool_call_response("c1", "pick_color", {}))
    agent.client_calls.offer([PICK])
    agent.followup(user_message("u1"))
    await deferred(agent, "c1")
    agent.cancel(CancelCause.user())
    await settle(agent)
    assert compact(agent.session, only=("defer(", "result(", "T-")) == [
        "defer(c1)", "result(c1,ABORTED)", "T-1:aborted",
    ]  # fmt: skip
    assert agent.client_calls.pending == ()
    with pytest.raises(ClientCallError):
        agent.client_calls.answer("c1", "late")


async def test_offers_replace_each_other_and_never_shadow_server_tools(h: Harness) -> None:
    h.rt.tools.register(
        define_tool(
            name="shell", description="s", parameters={"type": "object"}, execute=lambda a, e: ""
        )
    )
    agent = await h.agent()
    with pytest.raises(ClientCallError, match="server tool"):
        agent.client_calls.offer([ClientTool("shell", "mine")])
    with pytest.raises(ClientCallError, match="unique"):
        agent.client_calls.offer([PICK, PICK])
    with pytest.raises(ClientCallError):
        agent.client_calls.offer([ClientTool("bad name!", "x")])
    with pytest.raises(ClientCallError):
        agent.client_calls.offer([ClientTool("t", "x", {"type": 12})])
    agent.client_calls.offer([PICK])
    assert agent.client_calls.offered == ("pick_color",)
    agent.client_calls.offer([PICK])  # the same offer again replaces itself
    agent.client_calls.offer([ClientTool("other", "o")])
    assert agent.client_calls.offered == ("other",)
    assert h.rt.tools.get("pick_color", agent.id) is None
    agent.client_calls.withdraw()
    assert h.rt.tools.get("other", agent.id) is None
    with pytest.raises(ClientCallError):
        agent.client_calls.answer("nope", "x")
