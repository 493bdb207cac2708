"""Bounded HTTP decoding: a streamable-HTTP server that sends an endless body or SSE event
hits ``MCPLimits.max_message_bytes`` with a clear error (nothing more of it is held), and a
large message within the cap is decoded and cut off the event loop. Against a hostile HTTP
server of the tests' own (its stalls measured; the bound is generous for a loaded machine,
the figures are in bench/mcp_bounds.py)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from steerloop import user_message
from steerloop.mcp import MCPLimits, MCPServer, install_mcp
from steerloop.messages import TextBlock
from steerloop.testing import text_response, tool_calls_response

from ..conftest import Harness, compact, settle
from .helpers import START, StallMeter, logged_result, python_server, result_texts

pytestmark = pytest.mark.timeout(240)

SERVER = Path(__file__).with_name("http_hostile_server.py")
STALL_BOUND = 2.0  # as test_bounds.py: the SDK alone held the loop for seconds


@pytest.fixture
async def url(state: Path) -> AsyncIterator[str]:
    async with python_server(SERVER, state) as address:
        yield address


async def run(h: Harness, url: str, limits: MCPLimits, *calls: Any) -> tuple[Any, float]:
    installed = await install_mcp(h.rt, [MCPServer.http("w", url=url, limits=limits)])
    try:
        agent = await h.agent(tool_calls_response(list(calls)), text_response("done"))
        async with StallMeter() as meter:
            agent.followup(user_message("go"))
            await settle(agent, START)
        return agent, meter.worst
    finally:
        await installed.close()


def error_text(agent: Any, call_id: str) -> str:
    result = logged_result(agent, call_id)
    assert result.is_error
    return " ".join(b.text for b in result.content if isinstance(b, TextBlock))


async def test_an_endless_json_body_hits_the_default_cap(h: Harness, url: str) -> None:
    """The documented default (32 MiB): the call fails naming the cap; the next call on the
    same server is answered."""
    assert MCPLimits().max_message_bytes == 32 << 20
    agent, stall = await run(
        h, url, MCPLimits(), ("c1", "w__endless_json", {}), ("c2", "w__echo", {"text": "after"})
    )
    assert "a response body over max_message_bytes=33,554,432" in error_text(agent, "c1")
    assert result_texts(agent, "c2") == ["after"]
    assert compact(agent.session, only=("result(",)) == ["result(c1,TOOL_FAILED)", "result(c2)"]
    assert stall < STALL_BOUND, f"the loop stalled {stall:.2f}s"


async def test_an_endless_sse_event_hits_a_configured_cap(h: Harness, url: str) -> None:
    """A cap set per server (1 MiB): the event that never ends fails its call, the
    connection is replaced and the next call answered."""
    limits = MCPLimits(max_message_bytes=1 << 20)
    agent, stall = await run(
        h, url, limits, ("c1", "w__endless_sse", {}), ("c2", "w__echo", {"text": "after"})
    )
    assert "an SSE event over max_message_bytes=1,048,576" in error_text(agent, "c1")
    assert result_texts(agent, "c2") == ["after"]
    assert stall < STALL_BOUND, f"the loop stalled {stall:.2f}s"


@pytest.mark.parametrize("tool", ["w__blocks_json", "w__blocks_sse"])
async def test_200000_blocks_over_http_are_cut_off_the_loop(
    h: Harness, url: str, tool: str
) -> None:
    """~6 MB, within the cap: decoded a slice at a time in a worker thread and cut to
    ``max_blocks`` before the SDK sees it; one line says what was cut."""
    agent, stall = await run(h, url, MCPLimits(), ("c1", tool, {"n": 200_000}))
    texts = result_texts(agent, "c1")
    assert texts[:2] == ["block 0", "block 1"]
    assert len(texts) == 256 + 1
    assert "200,000" in texts[-1]
    assert stall < STALL_BOUND, f"the loop stalled {stall:.2f}s"


def test_the_cap_is_a_positive_integer() -> None:
    with pytest.raises(ValueError, match="max_message_bytes must be a positive integer"):
        MCPLimits(max_message_bytes=0)
