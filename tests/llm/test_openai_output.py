"""Structured output over the OpenAI chat wire (loopback SSE server, the real SDK): a model
that supports JSON-schema output is asked with ``response_format``; one that does not gets
the ``final_result`` tool instead."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pydantic
import pytest

from steerloop import AgentOptions, Runtime
from steerloop.llm.openai import OpenAIChatAdapter
from tests.conftest import compact, within
from tests.llm.openai_wire import DONE, chunk, text_reply, tool_delta, usage
from tests.llm.sse_server import SSEServer, sse_reply
from tests.llm.test_openai import KEY


class Weather(pydantic.BaseModel):
    city: str
    celsius: float


@pytest.fixture
async def adapter(server: SSEServer) -> AsyncIterator[OpenAIChatAdapter]:
    a = OpenAIChatAdapter(base_url=server.url, api_key=KEY)
    try:
        yield a
    finally:
        await a.aclose()


async def agent_on(rt: Runtime, adapter: OpenAIChatAdapter, model: str) -> Any:
    rt.llm.register_adapter(["openai"], adapter)
    handle = await rt.agents.create(
        session_id="s-1", agent_options=AgentOptions(provider="openai", model=model)
    )
    return handle.agent


async def test_a_json_schema_model_is_asked_with_response_format(
    rt: Runtime, server: SSEServer, adapter: OpenAIChatAdapter
) -> None:
    answer = json.dumps({"city": "Paris", "celsius": 21.5})
    server.add(text_reply("not json"), text_reply(answer[:10], answer[10:]))
    agent = await agent_on(rt, adapter, "gpt-4o")
    result = await within(agent.run("weather?", output_type=Weather))
    assert result.output == Weather(city="Paris", celsius=21.5)
    bodies = [r.json() for r in server.requests]
    expected = {
        "type": "json_schema",
        "json_schema": {"name": "Weather", "schema": Weather.model_json_schema()},
    }
    assert [b.get("response_format") for b in bodies] == [expected, expected]
    assert all("tools" not in b for b in bodies)
    # The retry reached the model as a user message of the same turn.
    assert bodies[1]["messages"][-1]["role"] == "user"
    assert "does not match the output schema" in bodies[1]["messages"][-1]["content"]
    assert compact(agent.session, only=["T-", "turn/output"]) == ["turn/output", "T-1:completed"]

    # Counterexample: the plain turn after it asks for no format.
    server.add(text_reply("bye"))
    await within(agent.run("thanks"))
    assert "response_format" not in server.requests[2].json()


async def test_a_model_without_json_schema_output_gets_the_final_result_tool(
    rt: Runtime, server: SSEServer, adapter: OpenAIChatAdapter
) -> None:
    args = json.dumps({"city": "Lima", "celsius": 18})
    server.add(
        sse_reply(
            [
                chunk({"role": "assistant", "content": None}, model="deepseek-chat"),
                tool_delta(0, id="call_1", name="final_result", arguments=args),
                chunk({}, "tool_calls", model="deepseek-chat"),
                usage(10, 5),
                DONE,
            ]
        )
    )
    agent = await agent_on(rt, adapter, "deepseek-chat")
    result = await within(agent.run("weather?", output_type=Weather))
    assert result.output == Weather(city="Lima", celsius=18)
    body = server.requests[0].json()
    assert "response_format" not in body
    assert [t["function"]["name"] for t in body["tools"]] == ["final_result"]
    assert body["tools"][0]["function"]["parameters"] == Weather.model_json_schema()
    assert len(server.requests) == 1


async def test_known_models_say_whether_they_take_json_schema_output(
    adapter: OpenAIChatAdapter,
) -> None:
    flags = {
        m: (await adapter.resolve_model("openai", m)).json_schema_output
        for m in ("gpt-4o", "gpt-4o-mini-2024-07-18", "o3", "deepseek-chat", "gpt-4-turbo", "x")
    }
    assert flags == {
        "gpt-4o": True,
        "gpt-4o-mini-2024-07-18": True,
        "o3": True,
        "deepseek-chat": False,
        "gpt-4-turbo": False,
        "x": False,
    }
