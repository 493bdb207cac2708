"""Workspace fixtures: a root and a sibling ``outside`` directory in ``tmp_path``, a way to
call a tool body directly, and bounded process-liveness polling for the shell tests."""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from steerloop import AbortController, AbortSignal, ToolResult
from steerloop.tools import Tool, ToolExec
from steerloop.workspace import workspace_tools

POLL_INTERVAL = 0.01
POLL_TIMEOUT = 10.0


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """The workspace root; ``tmp_path / "outside"`` holds ``secret.txt`` next to it."""
    ws = tmp_path / "ws"
    ws.mkdir()
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("SECRET\n")
    return ws


@pytest.fixture
def tools(root: Path) -> dict[str, Tool]:
    return {tool.name: tool for tool in workspace_tools(root)}


def make_exec(tool: Tool, args: dict[str, Any], signal: AbortSignal | None = None) -> ToolExec:
    return ToolExec(
        call_id="c1",
        name=tool.name,
        arguments=args,
        raw_arguments="",
        signal=signal if signal is not None else AbortController().signal,
        agent=None,  # type: ignore[arg-type]  # the file tools never read it
    )


async def run(tool: Tool, signal: AbortSignal | None = None, **args: Any) -> ToolResult:
    """Validate ``args`` and run the body as the pipeline would; a ``str`` becomes a result."""
    value = await asyncio.wait_for(
        tool.execute(tool.validate(args), make_exec(tool, args, signal)), POLL_TIMEOUT
    )
    return value if isinstance(value, ToolResult) else ToolResult(content=value)


def text(result: ToolResult) -> str:
    assert isinstance(result.content, str)
    return result.content


def code(result: ToolResult) -> str | None:
    return None if result.error is None else result.error.code


def alive(pid: int) -> bool:
    """Whether ``pid`` still runs (a zombie awaiting its reaper does not)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


async def wait_gone(*pids: int) -> None:
    """Poll until none of ``pids`` runs; fail after a bounded wait."""
    for _ in range(int(POLL_TIMEOUT / POLL_INTERVAL)):
        if not any(alive(pid) for pid in pids):
            return
        await asyncio.sleep(POLL_INTERVAL)
    raise AssertionError(f"still running: {[pid for pid in pids if alive(pid)]}")


async def read_pid(path: Path) -> int:
    """The pid a command wrote to ``path`` (``echo $$ > path``), once it is complete."""
    for _ in range(int(POLL_TIMEOUT / POLL_INTERVAL)):
        if path.exists():
            content = path.read_text()
            if content.endswith("\n"):
                return int(content)
        await asyncio.sleep(POLL_INTERVAL)
    raise AssertionError(f"{path} was never written")


@pytest.fixture
def reaper() -> Iterator[list[int]]:
    """Pids to SIGKILL at teardown, so a failing test leaves no process behind."""
    pids: list[int] = []
    yield pids
    for pid in pids:
        if alive(pid):
            os.kill(pid, signal.SIGKILL)
