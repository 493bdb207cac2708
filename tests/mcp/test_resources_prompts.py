"""A server's resources (listed, read within the limits, followed by the model through the
read-only ``<server>__read_resource`` tool, updates logged, never applied) and prompts
(expanded into one user message that records its source)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import TextIO

import pytest

from steerloop import user_message
from steerloop.mcp import MCPServer, MCPTools, install_mcp
from steerloop.messages import TextBlock
from steerloop.session.events import MCPResourceUpdated
from steerloop.testing import text_response, tool_call_response, tool_calls_response
from steerloop.tools import ToolHookPayload

from ..conftest import Harness, compact, events_of, settle
from .helpers import START, eventually, everything_bin, hostile, lines, result_texts

pytestmark = pytest.mark.timeout(180)


@pytest.fixture
async def installed(h: Harness, state: Path, errlog: TextIO) -> AsyncIterator[MCPTools]:
    tools = await install_mcp(h.rt, [hostile(state)], errlog=errlog)
    yield tools
    await tools.close()


async def test_resources_are_listed_and_read_within_the_limits(installed: MCPTools) -> None:
    """Text under a header naming it; 8 MiB cut to max_result_bytes with the note; binary
    described, not shown."""
    listed = await installed.resources("x")
    assert [r.uri for r in listed] == ["hostile://doc", "hostile://big", "hostile://bin"]
    (doc,) = await installed.read_resource("x", "hostile://doc")
    assert isinstance(doc, TextBlock)
    assert doc.text == "[resource hostile://doc (text/plain) of MCP server 'x']\nthe doc"
    big = await installed.read_resource("x", "hostile://big")
    assert len(big) == 2 and isinstance(big[0], TextBlock) and isinstance(big[1], TextBlock)
    assert big[0].text.endswith("b" * 1000) and len(big[0].text) <= (256 << 10) + 100
    assert "1 item of 1 cut or left out" in big[1].text
    (binary,) = await installed.read_resource("x", "hostile://bin")
    assert isinstance(binary, TextBlock) and "binary, about 3 bytes, not shown" in binary.text
    with pytest.raises(ValueError, match="resource URI"):
        await installed.read_resource("x", "")


async def test_the_model_follows_links_with_the_read_only_reader_in_parallel(
    h: Harness, installed: MCPTools
) -> None:
    """x__read_resource is concurrency-safe: two reads in one step run at once; a URI the
    server does not know is the server's error."""
    reader = h.rt.tools.get("x__read_resource")
    assert reader is not None and reader.concurrency_safe is True
    assert "x__read_resource" in installed.tools("x")
    running: set[str] = set()
    overlapped: list[bool] = []

    async def observe(payload: ToolHookPayload) -> None:
        running.add(payload.exec.call_id)

    def done(payload: ToolHookPayload) -> None:
        overlapped.append(len(running) == 2)

    h.rt.hooks.on("tools/pre-execute", observe)
    h.rt.hooks.on("tools/result", done)
    agent = await h.agent(
        tool_calls_response(
            [
                ("c1", "x__read_resource", {"uri": "hostile://doc"}),
                ("c2", "x__read_resource", {"uri": "hostile://missing"}),
            ]
        ),
        text_response("done"),
    )
    agent.followup(user_message("go"))
    await settle(agent, START)
    assert compact(agent.session, only=("result(",)) == ["result(c1)", "result(c2,TOOL_FAILED)"]
    assert result_texts(agent, "c1")[0].endswith("\nthe doc")
    assert result_texts(agent, "c2") == ["no such resource"]
    assert overlapped and overlapped[0]


async def test_an_update_is_logged_to_the_agents_that_read_it_and_nothing_is_reread(
    h: Harness, installed: MCPTools, state: Path
) -> None:
    """Reading a resource for an agent subscribes; resources/updated appends
    mcp/resource-updated (ignorable) to that agent's log; no read follows."""
    agent = await h.agent(
        tool_call_response("c1", "x__read_resource", {"uri": "hostile://doc"}),
        tool_call_response("c2", "x__touch", {"uri": "hostile://doc"}),
        tool_call_response("c3", "x__touch", {"uri": "hostile://other"}),
        text_response("done"),
    )
    agent.followup(user_message("go"))
    await settle(agent, START)
    assert lines(state / "subscribed") == ["hostile://doc"]
    updates = await eventually(lambda: events_of(agent.session, "mcp/resource-updated"))
    assert [e.data for e in updates] == [MCPResourceUpdated(server="x", uri="hostile://doc")]
    assert updates[0].ignorable
    assert lines(state / "calls") == ["touch", "touch"]


async def test_a_prompt_expands_into_one_user_message_with_its_source(
    installed: MCPTools,
) -> None:
    """Positional and key=value arguments; the source records server, prompt, arguments."""
    (prompt,) = await installed.prompts("x")
    assert prompt.name == "greet"
    message = await installed.prompt_message("x", "greet", "Ada tone=warm")
    assert [b.text for b in message.content if isinstance(b, TextBlock)] == ["Greet Ada (warm)."]
    assert message.source.kind == "user"
    assert message.source.extra == {
        "mcp_prompt": {"server": "x", "name": "greet", "arguments": {"name": "Ada", "tone": "warm"}}
    }
    last = await installed.prompt_message("x", "greet", '"Grace Hopper"')
    assert [b.text for b in last.content if isinstance(b, TextBlock)] == [
        "Greet Grace Hopper (plain)."
    ]
    with pytest.raises(ValueError, match="prompt 'greet' needs name"):
        await installed.prompt_message("x", "greet", "tone=warm")
    with pytest.raises(ValueError, match="has no prompt 'nope'"):
        await installed.prompt_message("x", "nope")


async def test_everything_resources_links_and_prompts(h: Harness, errlog: TextIO) -> None:
    """server-everything: its resources read; a resource link of get-resource-links followed
    through ev__read_resource; args-prompt expanded."""
    server = MCPServer.stdio("ev", command=everything_bin(), args=["stdio"])
    installed = await install_mcp(h.rt, [server], errlog=errlog)
    listed = await installed.resources("ev")
    assert any(r.uri.endswith("architecture.md") for r in listed)
    agent = await h.agent(
        tool_call_response("c1", "ev__get-resource-links", {"count": 1}),
        tool_call_response("c2", "ev__read_resource", {"uri": "demo://resource/dynamic/blob/1"}),
        text_response("done"),
    )
    agent.followup(user_message("go"))
    await settle(agent, START)
    assert compact(agent.session, only=("result(",)) == ["result(c1)", "result(c2)"]
    # The link reaches the model as the link's JSON, the URI the model then reads.
    assert '"uri": "demo://resource/dynamic/blob/1"' in result_texts(agent, "c1")[1]
    assert result_texts(agent, "c2")[0].startswith("[resource demo://resource/dynamic/blob/1")
    message = await installed.prompt_message("ev", "args-prompt", "city=Paris")
    assert "Paris" in " ".join(b.text for b in message.content if isinstance(b, TextBlock))
    await installed.close()
