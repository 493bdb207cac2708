"""A server's sampling requests, answered by the agent's own model under the server's policy
(deny by default, ask as an input request, allow), logged as ``mcp/sampled`` and counted by
``install_limits``; and the roots steerloop advertises."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, TextIO

import pytest

from steerloop import user_message
from steerloop.context import install_limits
from steerloop.context._limits import session_usage
from steerloop.llm import TokenUsage
from steerloop.mcp import install_mcp
from steerloop.messages import SystemMessage, TextBlock, UserMessage
from steerloop.session.events import MCPSampled
from steerloop.testing import text_response, tool_call_response

from ..conftest import Harness, events_of, settle
from .helpers import START, eventually, hostile, result_texts

pytestmark = pytest.mark.timeout(180)


def result_json(agent: Any, call_id: str) -> Any:
    return json.loads("".join(result_texts(agent, call_id)))


def declared(state: Path) -> dict[str, Any]:
    capabilities: dict[str, Any] = json.loads((state / "initialize").read_text())
    return capabilities


async def test_allow_answers_with_the_agents_model_logs_it_and_counts_its_usage(
    h: Harness, state: Path, errlog: TextIO
) -> None:
    """sampling='allow': the agent's adapter gets the server's messages (its system prompt,
    max_tokens); the server gets the text; mcp/sampled records model and usage, which
    install_limits' session usage includes."""
    installed = await install_mcp(h.rt, [hostile(state, sampling="allow")], errlog=errlog)
    assert "sampling" in declared(state)
    usage = TokenUsage(input_tokens=11, output_tokens=4)
    agent = await h.agent(
        tool_call_response("c1", "x__sample", {"text": "Say hi"}),
        text_response("hi there", usage=usage),
        text_response("done"),
    )
    agent.followup(user_message("go"))
    await settle(agent, START)
    sampled = h.adapter.requests[1]
    assert [type(m) for m in sampled.messages] == [SystemMessage, UserMessage]
    assert [b.text for m in sampled.messages for b in m.content if isinstance(b, TextBlock)] == [
        "Answer briefly.",
        "Say hi",
    ]
    assert sampled.max_tokens == 50 and sampled.tools == ()
    answer = result_json(agent, "c1")
    assert answer["content"] == {"type": "text", "text": "hi there"}
    assert answer["role"] == "assistant" and answer["model"] == "m"
    (event,) = events_of(agent.session, "mcp/sampled")
    assert event.ignorable
    assert event.data == MCPSampled(
        server="x",
        outcome="answered",
        call_id="c1",
        provider="mock",
        model="m",
        usage=usage,
        stop_reason="endTurn",
        text="hi there",
    )
    # The scripted turn reports no usage of its own: all the session spent is the sample's.
    assert session_usage(agent.session) == (15, 15)
    await installed.close()


async def test_deny_by_default_declares_no_sampling(
    h: Harness, state: Path, errlog: TextIO
) -> None:
    """The default policy: no sampling capability; a server that asks anyway is refused by
    the SDK, no model request is made, and nothing is logged as sampled."""
    installed = await install_mcp(h.rt, [hostile(state)], errlog=errlog)
    assert "sampling" not in declared(state)
    assert "elicitation" in declared(state)
    agent = await h.agent(
        tool_call_response("c1", "x__sample", {"text": "Say hi"}), text_response("done")
    )
    agent.followup(user_message("go"))
    await settle(agent, START)
    assert len(h.adapter.requests) == 2
    assert result_json(agent, "c1")["message"] == "Sampling not supported"
    assert events_of(agent.session, "mcp/sampled") == []
    await installed.close()


async def test_ask_holds_the_sample_for_a_person(h: Harness, state: Path, errlog: TextIO) -> None:
    """sampling='ask': an input request of kind 'sampling'; decline refuses (logged denied),
    accept lets the model answer."""
    installed = await install_mcp(h.rt, [hostile(state, sampling="ask")], errlog=errlog)
    agent = await h.agent(
        tool_call_response("c1", "x__sample", {"text": "First"}),
        tool_call_response("c2", "x__sample", {"text": "Second"}),
        text_response("sampled"),
        text_response("done"),
    )
    agent.followup(user_message("go"))
    (first,) = await eventually(lambda: agent.pending_inputs)
    assert first.kind == "sampling" and first.server == "x" and first.call_id == "c1"
    assert "up to 50 tokens" in first.message and "'First'" in first.message
    agent.answer_input(first.id, "decline", by="test")
    (second,) = await eventually(lambda: [r for r in agent.pending_inputs if r.id != first.id])
    agent.answer_input(second.id, "accept", by="test")
    await settle(agent, START)
    assert result_json(agent, "c1")["message"].startswith("sampling refused: the person")
    assert result_json(agent, "c2")["content"]["text"] == "sampled"
    outcomes = [e.data.outcome for e in events_of(agent.session, "mcp/sampled")]
    assert outcomes == ["denied", "answered"]
    await installed.close()


async def test_roots_are_advertised_when_configured(
    h: Harness, state: Path, errlog: TextIO, tmp_path: Path
) -> None:
    """install_mcp(roots=[workspace]) declares roots and answers roots/list with file URIs;
    without roots the capability is not declared."""
    workspace = tmp_path / "work space"
    workspace.mkdir()
    installed = await install_mcp(h.rt, [hostile(state)], errlog=errlog, roots=[workspace])
    assert "roots" in declared(state)
    agent = await h.agent(tool_call_response("c1", "x__roots", {}), text_response("done"))
    agent.followup(user_message("go"))
    await settle(agent, START)
    assert result_json(agent, "c1") == {
        "roots": [{"uri": workspace.resolve().as_uri(), "name": "work space"}]
    }
    await installed.close()


async def test_install_limits_counts_what_sampling_spent(
    h: Harness, state: Path, errlog: TextIO
) -> None:
    """max_session_tokens=20: the sample spends 15 of them, so the request after the call
    (which would exceed the limit) is not sent and the turn ends blocked naming the limit."""
    install_limits(h.rt, max_session_tokens=20)
    installed = await install_mcp(h.rt, [hostile(state, sampling="allow")], errlog=errlog)
    agent = await h.agent(
        tool_call_response("c1", "x__sample", {"text": "Say hi"}),
        text_response("hi there", usage=TokenUsage(input_tokens=11, output_tokens=4)),
        text_response("never sent"),
    )
    agent.followup(user_message("go"))
    await settle(agent, START)
    assert len(h.adapter.requests) == 2
    (end,) = events_of(agent.session, "turn/end")
    assert (end.data.reason.kind, end.data.reason.detail) == ("blocked", "max_session_tokens")
    await installed.close()
