"""An MCP server written with the SDK's own server API, for the fault cases of tests/mcp.

Run as ``python fault_server.py STATE_DIR``: it writes what it observed (cancellations, the
pids of children it spawned, its environment) into files under STATE_DIR.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import anyio
from mcp.server.mcpserver import Context, MCPServer
from mcp_types import ImageContent, ToolAnnotations

STATE = Path(sys.argv[1])
server = MCPServer("fault")


def note(name: str, text: str) -> None:
    path = STATE / name
    with path.open("a") as f:
        f.write(text + "\n")


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def echo(text: str) -> str:
    """Return the text."""
    return text


@server.tool()
def count(n: int) -> dict[str, int]:
    """Return n, doubled, as structured content."""
    return {"n": n, "double": 2 * n}


@server.tool()
def fail(reason: str) -> str:
    """Always fails."""
    raise ValueError(reason)


@server.tool()
def image() -> ImageContent:
    """A one-pixel image."""
    return ImageContent(type="image", data="iVBORw0KGgo=", mime_type="image/png")


@server.tool()
async def hang(tag: str) -> str:
    """Never answers; notes whether it was cancelled."""
    note("started", tag)
    try:
        await anyio.sleep_forever()
    finally:
        with anyio.CancelScope(shield=True):
            note("cancelled", tag)
    return "unreachable"


@server.tool()
async def die(tag: str) -> str:
    """Exits the process in the middle of the call."""
    note("started", tag)
    os._exit(3)


@server.tool()
def spawn() -> int:
    """Starts a child process that would outlive us if nobody killed our group."""
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    note("children", str(child.pid))
    return child.pid


@server.tool()
def environment() -> list[str]:
    """The names of the variables in this process's environment."""
    return sorted(os.environ)


@server.tool()
async def grow(ctx: Context) -> str:
    """Adds the tool ``added`` and announces that the list changed."""

    def added(x: int) -> int:
        """Added at run time."""
        return x + 1

    server.add_tool(added, name="added")
    await ctx.notify_tools_changed()
    return "grown"


if os.environ.get("FAULT_BAD_NAME"):
    # A name that cannot become a steerloop tool name ("." is outside [A-Za-z0-9_-]).
    server.add_tool(echo, name=os.environ["FAULT_BAD_NAME"])

if __name__ == "__main__":
    note("pid", str(os.getpid()))
    server.run()
