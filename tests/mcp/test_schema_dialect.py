"""A server's tool schema keeps its ``$schema`` dialect: the tool is defined with it, the
arguments are validated in the dialect it names (2020-12 when it names none), and only the
provider adapters that refuse the keyword leave it out of their requests."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, TextIO

import pytest

from steerloop import define_tool, user_message
from steerloop.errors import ToolDefinitionError
from steerloop.llm import GenerateRequest, ToolSchema
from steerloop.llm.anthropic import AnthropicAdapter
from steerloop.llm.openai import OpenAIChatAdapter, OpenAIResponsesAdapter
from steerloop.mcp import MCPTools, install_mcp
from steerloop.testing import text_response, tool_calls_response

from ..conftest import Harness, compact, settle
from .helpers import START, hostile, logged_result, result_texts

pytestmark = pytest.mark.timeout(180)

DRAFT_7 = "http://json-schema.org/draft-07/schema#"


@pytest.fixture
async def installed(h: Harness, state: Path, errlog: TextIO) -> AsyncIterator[MCPTools]:
    tools = await install_mcp(h.rt, [hostile(state)], errlog=errlog)
    yield tools
    await tools.close()


def pair_schema(h: Harness) -> dict[str, Any]:
    tool = h.rt.tools.get("x__pair")
    assert tool is not None
    return dict(tool.parameters)


async def test_the_tool_keeps_its_dialect_and_arguments_are_validated_in_it(
    h: Harness, installed: MCPTools
) -> None:
    """Draft 7's tuple ``items``: ``[1, "a"]`` passes and reaches the server; ``["a", 1]``
    is refused before the server is called (INVALID_ARGS). Read as 2020-12 the same schema
    is not even valid: the dialect named is the one used."""
    schema = pair_schema(h)
    assert schema["$schema"] == DRAFT_7
    agent = await h.agent(
        tool_calls_response(
            [("c1", "x__pair", {"pair": [1, "a"]}), ("c2", "x__pair", {"pair": ["a", 1]})]
        ),
        text_response("done"),
    )
    agent.followup(user_message("go"))
    await settle(agent, START)
    assert result_texts(agent, "c1") == [json.dumps([1, "a"])]
    assert logged_result(agent, "c2").is_error
    assert compact(agent.session, only=("result(",)) == ["result(c1)", "result(c2,INVALID_ARGS)"]
    header = next(e for e in agent.session.events if e.type == "request/header")
    (offered,) = [t for t in header.data.header["tools"] if t["name"] == "x__pair"]
    assert offered["parameters"]["$schema"] == DRAFT_7  # logged as defined
    without = {k: v for k, v in schema.items() if k != "$schema"}
    with pytest.raises(ToolDefinitionError, match="invalid parameter schema"):
        define_tool(name="p", description="", parameters=without, execute=lambda a, e: "")


async def test_openai_requests_leave_out_the_dialect_and_anthropic_keeps_it(
    h: Harness, installed: MCPTools
) -> None:
    schema = pair_schema(h)
    tool = ToolSchema(name="x__pair", description="pair", parameters=schema)
    request = GenerateRequest(
        provider="openai", model="gpt-4o", messages=(user_message("u"),), tools=(tool,)
    )
    without = {k: v for k, v in schema.items() if k != "$schema"}
    chat = OpenAIChatAdapter(base_url="http://127.0.0.1:9/v1", api_key="k")
    responses = OpenAIResponsesAdapter(base_url="http://127.0.0.1:9/v1", api_key="k")
    anthropic = AnthropicAdapter(base_url="http://127.0.0.1:9", api_key="k")
    try:
        assert chat.request_body(request)["tools"][0]["function"]["parameters"] == without
        assert responses.request_body(request)["tools"][0]["parameters"] == without
        assert anthropic.build_params(request)["tools"][0]["input_schema"] == schema
    finally:
        await chat.aclose()
        await responses.aclose()
        await anthropic.aclose()
    assert tool.parameters["$schema"] == DRAFT_7
