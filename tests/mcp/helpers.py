"""Helpers of the MCP tests: servers to start, bounded waits, calls through an agent."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import subprocess
import sys
from collections.abc import AsyncIterator, Callable, Mapping
from pathlib import Path
from typing import Any

from steerloop.mcp import MCPLimits, MCPServer
from steerloop.messages import TextBlock, ToolResultMessage

FAULT_SERVER = Path(__file__).with_name("fault_server.py")
HOSTILE_SERVER = Path(__file__).with_name("hostile_server.py")
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


def hostile(
    state: Path,
    *,
    name: str = "x",
    timeout: float = 60.0,
    limits: MCPLimits | None = None,
    sampling: Any = "deny",
) -> MCPServer:
    """The hostile server of ``hostile_server.py``, noting what it saw under ``state``."""
    return MCPServer.stdio(
        name,
        command=sys.executable,
        args=[str(HOSTILE_SERVER), str(state)],
        timeout=timeout,
        limits=limits,
        sampling=sampling,
    )


class StallMeter:
    """The longest the event loop went without running a ticking task, over a block.

    ``async with StallMeter() as meter: ...`` then ``meter.worst`` (seconds): how much later
    than asked a 5 ms sleep woke up, at worst.
    """

    TICK = 0.005

    def __init__(self) -> None:
        self.worst = 0.0
        self._task: asyncio.Task[None] | None = None

    async def _tick(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            before = loop.time()
            await asyncio.sleep(self.TICK)
            self.worst = max(self.worst, loop.time() - before - self.TICK)

    async def __aenter__(self) -> StallMeter:
        self._task = asyncio.ensure_future(self._tick())
        await asyncio.sleep(0)
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._task is not None
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task


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


def logged_result(agent: Any, call_id: str) -> ToolResultMessage:
    """The ``tool/result`` message of ``call_id`` in the agent's log."""
    for event in agent.session.events:
        if event.type == "tool/result" and event.data.message.call_id == call_id:
            message: ToolResultMessage = event.data.message
            return message
    raise AssertionError(f"no result for {call_id}")


def result_texts(agent: Any, call_id: str) -> list[str]:
    """The text blocks of the logged result of ``call_id``."""
    return [b.text for b in logged_result(agent, call_id).content if isinstance(b, TextBlock)]


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


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.asynccontextmanager
async def python_server(script: Path, state: Path) -> AsyncIterator[str]:
    """``python SCRIPT STATE PORT`` (a server of these tests over HTTP) until it accepts
    connections; its ``/mcp`` URL. It is killed afterwards (its process group)."""
    port = free_port()
    with (state / f"{script.stem}.log").open("w") as log:
        process = subprocess.Popen(
            [sys.executable, str(script), str(state), str(port)],
            stdout=log,
            stderr=log,
            start_new_session=True,
        )
    try:

        def accepting() -> bool:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
            except OSError:
                return process.poll() is not None  # exited: fails below
            return True

        await eventually(accepting)
        assert process.poll() is None, (state / f"{script.stem}.log").read_text()
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        await asyncio.to_thread(process.wait, 10)
