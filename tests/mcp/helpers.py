"""Helpers of the MCP tests: servers to start, bounded waits, calls through an agent."""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from steerloop.mcp import MCPServer

FAULT_SERVER = Path(__file__).with_name("fault_server.py")
REPO = Path(__file__).resolve().parents[2]
EVERYTHING = REPO / ".test-servers" / "node_modules" / ".bin" / "mcp-server-everything"

#: Starting a Python or Node server can take several seconds on a loaded machine.
START = 60.0


def fault(
    state: Path,
    *,
    name: str = "f",
    timeout: float = 30.0,
    env: Mapping[str, str] | None = None,
) -> MCPServer:
    """The fault server of ``fault_server.py``, noting what it saw under ``state``."""
    return MCPServer.stdio(
        name,
        command=sys.executable,
        args=[str(FAULT_SERVER), str(state)],
        env=env,
        timeout=timeout,
    )


def everything_bin() -> str:
    if not EVERYTHING.exists():
        raise AssertionError(
            f"{EVERYTHING} is missing: run scripts/install_test_servers.sh (the CI does)"
        )
    return str(EVERYTHING)


async def eventually(check: Callable[[], Any], timeout: float = START) -> Any:
    """Poll ``check`` until it returns something truthy; fail after ``timeout`` seconds."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        value = check()
        if value:
            return value
        if loop.time() > deadline:
            raise AssertionError(f"condition not met within {timeout}s")
        await asyncio.sleep(0.05)


def lines(path: Path) -> list[str]:
    return path.read_text().split() if path.exists() else []


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie is dead for our purpose: it runs nothing and holds nothing.
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ", 1)[1][0] != "Z"
    except OSError:
        return False
