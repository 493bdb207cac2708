"""A fork server for ``test_effects_crash.py``: many rounds of "a side effect, then SIGKILL",
one forked process per round, so each kill costs a fork instead of an interpreter start.

Usage: ``python _effects_crash_child.py MODE STORE_URL DIR ROUNDS PARALLEL``. This process
imports everything once and runs no event loop and no thread; for each round (``PARALLEL``
at a time) it forks a child that
opens a runtime on ``STORE_URL``, creates session ``<MODE>-<round>`` and sends ``do it``;
the scripted model asks for one call (id ``e<round>``) of an exclusive tool, which acts on
the world and then dies with SIGKILL. It prints ``round <n> killed`` per round (or how the
child ended otherwise) once all ended, then ``done``. Modes:

* ``marker``: the tool ``effect`` appends ``<session> <call id>`` to ``DIR/effects.log``
  (the effect), then — in even rounds — SIGKILLs its own process at once; in odd rounds it
  tells this process through a pipe and waits, and this process SIGKILLs it the moment it
  reads that (the marker appeared).
* ``write``: the tool is the workspace's ``write_file`` over ``DIR/ws-<round>``, writing
  ``note.txt``; in even rounds the process is killed as the body starts (before the write),
  in odd rounds right after the write returned (before its result is logged).
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import select
import signal
import sys
import time
from pathlib import Path
from typing import Any

import asyncpg  # noqa: F401  # imported before forking: each child would import it again

import steerloop.session._postgres  # the stores load lazily: load them once here
import steerloop.session._sqlite  # noqa: F401
from steerloop import AgentOptions, Runtime, define_tool, user_message
from steerloop.testing import ScriptedAdapter, text_response, tool_call_response
from steerloop.tools import Tool, ToolExec
from steerloop.workspace import workspace_tools

OPTIONS = AgentOptions(provider="mock", model="m")
ROUND_TIMEOUT = 60.0
CONTENT = "the new content\n"


def record(path: Path, line: str) -> None:
    """Append one line with a single ``write`` (the effect, or the marker)."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


def die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def marker_tool(directory: Path, n: int, notify: int) -> Tool:
    async def effect(args: Any, exec: ToolExec) -> str:
        record(directory / "effects.log", f"{exec.agent.id} {exec.call_id}\n")
        if n % 2 == 0:
            die()
        os.write(notify, b"k")
        await asyncio.Event().wait()
        return "unreachable"

    return define_tool(
        name="effect", description="changes the world", parameters={"type": "object"},
        execute=effect,
    )  # fmt: skip


def write_tool(directory: Path, n: int) -> Tool:
    root = directory / f"ws-{n}"
    root.mkdir()
    (root / "note.txt").write_text("the old content\n")
    base = next(t for t in workspace_tools(root) if t.name == "write_file")

    async def execute(args: Any, exec: ToolExec) -> Any:
        if n % 2 == 0:
            die()  # before the write
        result = await base.execute(args, exec)
        die()  # after the write, before its result is logged
        return result

    return dataclasses.replace(base, execute=execute)


async def one_round(mode: str, url: str, directory: Path, n: int, notify: int) -> None:
    rt = await Runtime.open(store=url)
    if mode == "marker":
        rt.tools.register(marker_tool(directory, n, notify))
        call = tool_call_response(f"e{n}", "effect", {})
    else:
        rt.tools.register(write_tool(directory, n))
        call = tool_call_response(f"e{n}", "write_file", {"path": "note.txt", "content": CONTENT})
    rt.llm.register_adapter(["mock"], ScriptedAdapter([call, text_response("done")]))
    agent = (await rt.agents.create(session_id=f"{mode}-{n}", agent_options=OPTIONS)).agent
    agent.followup(user_message("do it"))
    await asyncio.wait_for(asyncio.Event().wait(), ROUND_TIMEOUT)


def fork_round(mode: str, url: str, directory: Path, n: int) -> tuple[int, int]:
    """Fork the child of round ``n``: its pid, and the read end of its pipe."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns
        os.close(read_end)
        try:
            asyncio.run(one_round(mode, url, directory, n, write_end))
        except BaseException as exc:
            print(f"round {n}: the child failed: {exc!r}", file=sys.stderr, flush=True)
        os._exit(3)
    os.close(write_end)
    return pid, read_end


def main(mode: str, url: str, directory: str, rounds: int, parallel: int) -> None:
    """Run ``rounds`` rounds, ``parallel`` children at a time (their commits and kills are
    independent: each has a session of its own)."""
    ended: dict[int, str] = {}
    running: dict[int, tuple[int, int]] = {}  # read end -> (round, pid)
    deadline = time.monotonic() + ROUND_TIMEOUT * rounds
    started = 0
    while len(ended) < rounds:
        while started < rounds and len(running) < parallel:
            pid, read_end = fork_round(mode, url, Path(directory), started)
            running[read_end] = (started, pid)
            started += 1
        ready, _, _ = select.select(list(running), [], [], max(0.0, deadline - time.monotonic()))
        if not ready:
            for _, pid in running.values():
                os.kill(pid, signal.SIGKILL)
        for read_end in ready or list(running):
            n, pid = running.pop(read_end)
            if ready and os.read(read_end, 1) == b"k":  # the marker: kill it now
                os.kill(pid, signal.SIGKILL)
            _, status = os.waitpid(pid, 0)
            os.close(read_end)
            killed = os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL
            ended[n] = ("killed" if ready else "timed-out") if killed else f"ended-{status}"
    for n in range(rounds):
        print(f"round {n} {ended[n]}", flush=True)
    print("done", flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]))
