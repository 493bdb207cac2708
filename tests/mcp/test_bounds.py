"""MCPLimits against the hostile server (hostile_server.py): what a server may send is cut
or refused where it arrives, the log and the model never see the rest, and decoding a huge
message never holds the event loop (its worst stall is measured; the bound is generous for
a loaded CI machine, the figures of a quiet one are in README)."""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, TextIO

import pytest

from steerloop import user_message
from steerloop.mcp import MCPLimitError, MCPLimits, MCPTools, install_mcp
from steerloop.messages import TextBlock, ToolResultMessage
from steerloop.testing import text_response, tool_call_response

from ..conftest import Harness, compact, events_of, settle
from .helpers import START, StallMeter, hostile, logged_result, result_texts

pytestmark = pytest.mark.timeout(240)

#: The worst event-loop stall a test accepts (before: 4.9–18.4 s for these cases).
STALL_BOUND = 2.0


@pytest.fixture
async def installed(h: Harness, state: Path, errlog: TextIO) -> AsyncIterator[MCPTools]:
    tools = await install_mcp(h.rt, [hostile(state)], errlog=errlog)
    yield tools
    await tools.close()


def logged_bytes(agent: Any, call_id: str) -> int:
    for event in events_of(agent.session, "tool/result"):
        if event.data.message.call_id == call_id:
            return len(json.dumps(event.to_json()))
    raise AssertionError(f"no result for {call_id}")


async def run_one(
    h: Harness, name: str, args: dict[str, Any], session_id: str = "s-1"
) -> tuple[Any, float]:
    """Run one call of ``name`` in a turn; the agent and the loop's worst stall meanwhile."""
    agent = await h.agent(
        tool_call_response("c1", name, args), text_response("done"), session_id=session_id
    )
    async with StallMeter() as meter:
        agent.followup(user_message("go"))
        await settle(agent, START)
    return agent, meter.worst


async def test_200000_content_blocks_are_cut_off_the_loop(h: Harness, installed: MCPTools) -> None:
    """A result of 200,000 blocks: the first max_blocks are kept, one line says what was cut,
    the log holds only what was kept, and the loop never stalled (C7 MCP bounds)."""
    agent, stall = await run_one(h, "x__blocks", {"n": 200_000})
    result = logged_result(agent, "c1")
    texts = [b.text for b in result.content if isinstance(b, TextBlock)]
    assert texts[:3] == ["block 0", "block 1", "block 2"]
    assert len(texts) == 256 + 1
    assert texts[255] == "block 255"
    assert texts[-1].startswith("[steerloop: this result was cut")
    assert "199,744 items of 200,000 cut or left out" in texts[-1]
    assert "\n" not in texts[-1]
    assert logged_bytes(agent, "c1") < 64_000
    # The model got the same (cut) result.
    sent = [m for m in h.adapter.requests[1].messages if isinstance(m, ToolResultMessage)]
    assert sent == [result]
    assert stall < STALL_BOUND, f"the loop stalled {stall:.2f}s"


async def test_an_8_mib_result_is_cut_to_max_result_bytes(h: Harness, installed: MCPTools) -> None:
    """An 8 MiB text is cut at max_result_bytes (256 KiB by default) with the note; the log
    does not hold the rest."""
    agent, stall = await run_one(h, "x__big", {"mib": 8})
    texts = result_texts(agent, "c1")
    assert len(texts) == 2
    assert texts[0] == "x" * (256 << 10) or 0 < len(texts[0]) <= 256 << 10
    assert set(texts[0]) == {"x"}
    assert "1 item of 1 cut or left out" in texts[1]
    assert logged_bytes(agent, "c1") < (256 << 10) + 4_000
    assert stall < STALL_BOUND, f"the loop stalled {stall:.2f}s"


async def test_structured_content_over_the_budget_is_left_out(
    h: Harness, installed: MCPTools
) -> None:
    """~9 MB of structured content does not fit: it is left out (and said so), the text kept."""
    agent, stall = await run_one(h, "x__structured", {})
    event = next(e for e in events_of(agent.session, "tool/result"))
    assert event.data.meta is None
    texts = [b.text for b in event.data.message.content if isinstance(b, TextBlock)]
    assert texts[0] == "rows"
    assert "its structured content left out" in texts[1]
    assert stall < STALL_BOUND, f"the loop stalled {stall:.2f}s"


async def test_a_tool_list_changed_to_10000_tools_mid_turn_is_refused(
    h: Harness, installed: MCPTools, caplog: pytest.LogCaptureFixture
) -> None:
    """tools/list_changed to 10,000 tools during a turn: at the next request the list is
    refused with a warning naming max_tools; the tools stay as they were; no stall."""
    caplog.set_level(logging.WARNING, "steerloop.mcp")
    before = installed.tools("x")
    agent = await h.agent(
        tool_call_response("c1", "x__flood", {}),
        tool_call_response("c2", "x__echo", {"text": "still here"}),
        text_response("done"),
    )
    async with StallMeter() as meter:
        agent.followup(user_message("go"))
        await settle(agent, START)
    assert compact(agent.session, only=("result(",)) == ["result(c1)", "result(c2)"]
    assert installed.tools("x") == before
    assert [t.name for t in h.adapter.requests[1].tools] == [
        t.name for t in h.adapter.requests[0].tools
    ]
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("10,000 tools, over max_tools=256" in w for w in warnings), warnings
    assert meter.worst < STALL_BOUND, f"the loop stalled {meter.worst:.2f}s"


async def test_a_line_over_the_message_cap_ends_the_connection_with_the_cause(
    h: Harness, installed: MCPTools
) -> None:
    """A 40 MiB line (over the 32 MiB a connection reads): the call fails naming the cap,
    the connection ends, and the next call starts the server again."""
    agent = await h.agent(
        tool_call_response("c1", "x__huge_line", {}),
        tool_call_response("c2", "x__echo", {"text": "back"}),
        text_response("done"),
    )
    agent.followup(user_message("go"))
    await settle(agent, START)
    assert compact(agent.session, only=("result(",)) == ["result(c1,TOOL_FAILED)", "result(c2)"]
    failed = result_texts(agent, "c1")
    assert "a message longer than 33,554,432 bytes" in failed[0]
    assert result_texts(agent, "c2") == ["back"]


async def test_limits_are_per_server(h: Harness, state: Path, errlog: TextIO) -> None:
    """A server's own MCPLimits apply: 3 blocks, then 63 bytes (a block counts its text and
    the rest of its JSON: 22 bytes here), the block that crosses the budget cut short."""
    installed = await install_mcp(
        h.rt, [hostile(state, limits=MCPLimits(max_blocks=3), name="x")], errlog=errlog
    )
    agent, _stall = await run_one(h, "x__blocks", {"n": 10})
    texts = result_texts(agent, "c1")
    assert texts[:-1] == ["block 0", "block 1", "block 2"]
    assert "max_blocks=3, max_result_bytes=262,144" in texts[-1]
    assert "7 items of 10 cut or left out" in texts[-1]
    await installed.close()
    installed = await install_mcp(
        h.rt, [hostile(state, limits=MCPLimits(max_result_bytes=63), name="y")], errlog=errlog
    )
    agent, _stall = await run_one(h, "y__blocks", {"n": 10}, session_id="s-2")
    texts = result_texts(agent, "c1")
    assert texts[:-1] == ["block 0", "block 1", "bloc"]
    assert "8 items of 10 cut or left out" in texts[-1]
    await installed.close()


async def test_a_list_over_max_tools_is_refused_at_install(
    h: Harness, state: Path, errlog: TextIO
) -> None:
    """Over max_tools at install: MCPLimitError naming the limit; nothing registered."""
    with pytest.raises(
        MCPLimitError, match=r"tools refused: the server lists 15 tools, over max_tools=5"
    ):
        await install_mcp(h.rt, [hostile(state, limits=MCPLimits(max_tools=5))], errlog=errlog)
    assert h.rt.tools.get("x__echo") is None


async def test_a_tool_over_max_schema_bytes_is_left_out_with_a_warning(
    h: Harness, state: Path, errlog: TextIO, caplog: pytest.LogCaptureFixture
) -> None:
    """A tool whose schema and description exceed max_schema_bytes is not registered; the
    others are."""
    caplog.set_level(logging.WARNING, "steerloop.mcp")
    limits = MCPLimits(max_schema_bytes=90)
    installed = await install_mcp(h.rt, [hostile(state, limits=limits)], errlog=errlog)
    names = installed.tools("x")
    assert "x__flood" in names  # {"type": "object", "properties": {}}
    assert "x__job" not in names  # its description makes it larger
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("tool 'job'" in w and "max_schema_bytes=90" in w for w in warnings), warnings
    await installed.close()


def test_limits_refuse_bad_values() -> None:
    for bad in (0, -1, 1.5, True, "1"):
        with pytest.raises(ValueError, match="positive integer"):
            MCPLimits(max_blocks=bad)  # type: ignore[arg-type]
    assert MCPLimits() == MCPLimits(
        max_result_bytes=262_144, max_blocks=256, max_tools=256, max_schema_bytes=65_536
    )
