"""Request options (``AgentOptions.call``; API.md "Request options"): sent on every request of
the agent, each provider in its own wire format. Against the loopback servers of each wire
format, through the official SDKs; the assertions read the JSON bodies the server received.
"""

from __future__ import annotations

from typing import Any

import pytest

from steerloop import AgentOptions, Runtime, define_tool, user_message
from steerloop.agent._options import validate_call
from steerloop.llm import CallConfig
from steerloop.llm.anthropic import AnthropicAdapter
from steerloop.llm.openai import OpenAIChatAdapter, OpenAIResponsesAdapter
from steerloop.service import Profile

from ..conftest import settle
from . import anthropic_wire as aw
from . import openai_wire as ow
from .responses_wire import Wire, reply
from .sse_server import SSEServer

KEY = "sk-test"
CALL = {
    "temperature": 0.3,
    "top_p": 0.8,
    "tool_choice": "required",
    "parallel_tool_calls": False,
    "seed": 7,  # a provider extra, carried verbatim
}


def echo_tool() -> Any:
    async def run(args: Any, exec: Any) -> str:
        return str(args)

    return define_tool(
        name="echo",
        description="echo",
        parameters={"type": "object", "properties": {"x": {"type": "string"}}},
        execute=run,
    )


async def two_turns(rt: Runtime, provider: str, model: str, call: Any, tools: bool = True) -> None:
    """Two turns of one agent (``call`` on every request), the second after a resume."""
    if tools:
        rt.tools.register(echo_tool())
    options = AgentOptions(provider=provider, model=model, call=call)
    handle = await rt.agents.create(session_id="s-1", agent_options=options)
    handle.agent.followup(user_message("one"))
    await settle(handle.agent, 30)  # the first request builds the SDK's models
    handle.agent.followup(user_message("two"))
    await settle(handle.agent, 30)  # the first request builds the SDK's models


async def test_openai_chat_completions_body(rt: Runtime, server: SSEServer) -> None:
    server.add(ow.text_reply("a"), ow.text_reply("b"))
    rt.llm.register_adapter(["p"], OpenAIChatAdapter(base_url=server.url, api_key=KEY))
    await two_turns(rt, "p", "m", CALL)
    for request in server.requests:
        body = request.json()
        picked = {k: body.get(k) for k in (*CALL, "tools")}
        assert picked["tools"] and picked["tools"][0]["function"]["name"] == "echo"
        assert {k: v for k, v in picked.items() if k != "tools"} == CALL


async def test_openai_forced_tool_and_no_tools(rt: Runtime, server: SSEServer) -> None:
    """``{"name": TOOL}`` is chat completions' function form; without tools neither
    ``tool_choice`` nor ``parallel_tool_calls`` is sent (the API refuses them)."""
    server.add(ow.text_reply("a"), ow.text_reply("b"))
    rt.llm.register_adapter(["p"], OpenAIChatAdapter(base_url=server.url, api_key=KEY))
    call = {"tool_choice": {"name": "echo"}, "parallel_tool_calls": True}
    await two_turns(rt, "p", "m", call)
    body = server.requests[0].json()
    assert body["tool_choice"] == {"type": "function", "function": {"name": "echo"}}
    assert body["parallel_tool_calls"] is True


async def test_openai_without_tools_sends_no_tool_fields(rt: Runtime, server: SSEServer) -> None:
    server.add(ow.text_reply("a"), ow.text_reply("b"))
    rt.llm.register_adapter(["p"], OpenAIChatAdapter(base_url=server.url, api_key=KEY))
    await two_turns(rt, "p", "m", {"tool_choice": "none", "parallel_tool_calls": False}, False)
    body = server.requests[0].json()
    assert "tool_choice" not in body and "parallel_tool_calls" not in body and "tools" not in body


async def test_openai_responses_body(rt: Runtime, server: SSEServer) -> None:
    for n in (1, 2):
        wire = Wire(response_id=f"resp_{n}")
        events = wire.created() + wire.message(0, ["ok"], id=f"msg_{n}")
        server.add(reply([*events, wire.completed(Wire.usage(10, 1))]))
    rt.llm.register_adapter(["r"], OpenAIResponsesAdapter(base_url=server.url, api_key=KEY))
    call = {**CALL, "tool_choice": {"name": "echo"}}
    await two_turns(rt, "r", "gpt-4.1", call)
    assert len(server.requests) == 2
    for request in server.requests:
        body = request.json()
        assert body["tool_choice"] == {"type": "function", "name": "echo"}
        assert body["parallel_tool_calls"] is False
        assert (body["temperature"], body["top_p"], body["seed"]) == (0.3, 0.8, 7)


@pytest.mark.parametrize(
    ("call", "expected"),
    [
        (CALL, {"type": "any", "disable_parallel_tool_use": True}),
        ({"tool_choice": {"name": "echo"}}, {"type": "tool", "name": "echo"}),
        ({"parallel_tool_calls": False}, {"type": "auto", "disable_parallel_tool_use": True}),
        ({"tool_choice": "none", "parallel_tool_calls": False}, {"type": "none"}),
        ({"tool_choice": {"type": "any"}}, {"type": "any"}),  # the provider's own form
    ],
)
async def test_anthropic_messages_body(
    rt: Runtime, server: SSEServer, call: dict[str, Any], expected: dict[str, Any]
) -> None:
    """Anthropic has no ``parallel_tool_calls``: it is ``disable_parallel_tool_use`` inside
    ``tool_choice``; ``required`` is ``any``."""
    server.add(aw.streamed(aw.message(aw.text(0, "a"))), aw.streamed(aw.message(aw.text(0, "b"))))
    adapter = AnthropicAdapter(base_url=server.url, api_key="sk-ant-test")
    rt.llm.register_adapter(["anthropic"], adapter)
    await two_turns(rt, "anthropic", aw.MODEL, call)
    for request in server.requests:
        body = request.json()
        assert body["tool_choice"] == expected
        assert "parallel_tool_calls" not in body
        if call is CALL:
            assert (body["temperature"], body["top_p"], body["seed"]) == (0.3, 0.8, 7)


def test_call_config_splits_the_known_options_from_the_extras() -> None:
    config = AgentOptions(provider="p", model="m", max_tokens=9, call=CALL).call_config()
    assert config == CallConfig(
        provider="p",
        model="m",
        max_tokens=9,
        temperature=0.3,
        top_p=0.8,
        tool_choice="required",
        parallel_tool_calls=False,
        extra={"seed": 7},
    )
    assert CallConfig.from_json(config.to_json()) == config  # the logged header restores it


@pytest.mark.parametrize(
    ("call", "message"),
    [
        ({"temperature": 3}, "temperature must be a number from 0 to 2"),
        ({"temperature": True}, "temperature must be a number"),
        ({"top_p": 1.5}, "top_p must be a number from 0 to 1"),
        ({"top_p": float("nan")}, "top_p must be a JSON value"),
        ({"tool_choice": "sometimes"}, "tool_choice must be 'auto', 'none', 'required'"),
        ({"parallel_tool_calls": "no"}, "parallel_tool_calls must be true or false"),
        ({"max_tokens": 5}, "set max_tokens as an option of its own"),
        ({"x": object()}, "x must be a JSON value"),
        ({"": 1}, "keys must be non-empty strings"),
        ("temperature=1", "must be a mapping"),
    ],
)
def test_invalid_request_options_are_refused_naming_the_key(call: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        validate_call(call)


async def test_an_invalid_call_is_refused_before_anything_is_published(rt: Runtime) -> None:
    with pytest.raises(ValueError, match="temperature"):
        await rt.agents.create(
            session_id="s-x",
            agent_options=AgentOptions(provider="p", model="m", call={"temperature": -1}),
        )
    assert rt.agents.get("s-x") is None


def test_a_profiles_call_goes_over_its_options_call() -> None:
    options = AgentOptions(provider="p", model="m", call={"temperature": 0.1, "seed": 1})
    profile = Profile(name="d", options=options, call={"temperature": 0.9})
    assert profile.options.call == {"temperature": 0.9, "seed": 1}
    with pytest.raises(ValueError, match=r"profile 'd': call\.top_p"):
        Profile(name="d", options=options, call={"top_p": 2})
