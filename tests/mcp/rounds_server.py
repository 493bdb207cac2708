"""An MCP server over streamable HTTP that speaks 2026-07-28 and asks for input the stateless
way: ``order`` answers its first round ``input_required`` (an elicitation and sealed
``requestState``), and completes when it is sent again with the answer.

Run as ``python rounds_server.py STATE_DIR PORT``. Each completed order is a line of
``STATE_DIR/completed`` (``item action content``), so a test sees how many times the server
was told an answer. A resource ``note://doc`` and a tool ``touch`` that announces an update
of a resource on ``subscriptions/listen`` (2026-07-28 has no ``resources/subscribe``).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from mcp.server.mcpserver import Context, MCPServer
from mcp_types import (
    ElicitRequest,
    ElicitRequestFormParams,
    ElicitResult,
    InputRequiredResult,
)

STATE = Path(sys.argv[1])
PORT = int(sys.argv[2])

COUNT_SCHEMA = {
    "type": "object",
    "properties": {"count": {"type": "integer", "minimum": 1, "maximum": 9}},
    "required": ["count"],
}

server = MCPServer("rounds")


@server.tool()
async def order(item: str, ctx: Context) -> str | InputRequiredResult:
    """Order an item; asks how many."""
    answer = (ctx.input_responses or {}).get("count")
    if answer is None:
        ask = ElicitRequest(
            params=ElicitRequestFormParams(
                message=f"How many {item}?", requested_schema=COUNT_SCHEMA
            )
        )
        return InputRequiredResult(input_requests={"count": ask}, request_state=f"order:{item}")
    assert ctx.request_state == f"order:{item}", ctx.request_state
    assert isinstance(answer, ElicitResult)
    with (STATE / "completed").open("a") as f:
        f.write(f"{item} {answer.action} {json.dumps(answer.content)}\n")
    if answer.action != "accept" or answer.content is None:
        return f"no {item} ordered ({answer.action})"
    return f"ordered {answer.content['count']} {item}"


@server.tool()
def echo(text: str) -> str:
    """Return the text."""
    return text


@server.resource("note://doc", name="doc", mime_type="text/plain")
def doc() -> str:
    """A note; each read is noted in ``STATE_DIR/reads``."""
    with (STATE / "reads").open("a") as f:
        f.write("note://doc\n")
    return "the note"


@server.tool()
async def touch(uri: str, ctx: Context) -> str:
    """Say that resource ``uri`` changed (to ``subscriptions/listen`` subscribers)."""
    await ctx.notify_resource_updated(uri)
    return "touched"


if __name__ == "__main__":
    server.run(transport="streamable-http", host="127.0.0.1", port=PORT, stateless_http=True)
