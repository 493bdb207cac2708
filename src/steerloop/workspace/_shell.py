"""The shell tool: one command in its own process group, bounded in time and output.

Design note. The command runs under ``/bin/sh -c`` in a new session
(``start_new_session=True``), so its process group id is the shell's pid and every process
it starts without leaving the group can be signalled at once. The group never outlives the
call: on the timeout, on the call's abort signal, and after a normal exit (background
children), it is sent SIGTERM, then SIGKILL once the shell has exited and the output pipe
has closed or the grace period has passed. Output (stdout and stderr merged) arrives
through protocol callbacks, so no reader task is left behind when a process that escaped
the group keeps the pipe open: the transport is closed after a bounded wait. The output is
capped in bytes, keeping its head and its tail with a note of how much was cut.
"""

from __future__ import annotations

import asyncio
import os
import signal as signals
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from .._signal import AbortSignal
from ..tools import Tool, ToolError, ToolExec, ToolResult, define_tool
from ._paths import Workspace

__all__ = ["shell_tool"]


class ShellArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    command: str = Field(
        min_length=1,
        description="Shell command (/bin/sh) to run in the workspace root; stdout and stderr "
        "are returned together with the exit code.",
    )


class _Capture(asyncio.SubprocessProtocol):
    """Collects merged output (head and tail, at most ``cap`` bytes each) and the lifecycle."""

    def __init__(self, cap: int) -> None:
        loop = asyncio.get_running_loop()
        self.cap = cap
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0
        self.exited: asyncio.Future[None] = loop.create_future()
        self.drained: asyncio.Future[None] = loop.create_future()

    def pipe_data_received(self, fd: int, data: bytes | bytearray) -> None:
        self.total += len(data)
        room = self.cap - len(self.head)
        if room > 0:
            self.head += data[:room]
        self.tail += data
        if len(self.tail) > 2 * self.cap:
            del self.tail[: len(self.tail) - self.cap]

    def pipe_connection_lost(self, fd: int, exc: Exception | None) -> None:
        if fd == 1 and not self.drained.done():
            self.drained.set_result(None)

    def process_exited(self) -> None:
        if not self.exited.done():
            self.exited.set_result(None)

    def text(self) -> str:
        if self.total <= self.cap:
            return bytes(self.head).decode("utf-8", errors="replace")
        keep_head = self.cap // 2
        keep_tail = self.cap - keep_head
        head = bytes(self.head[:keep_head]).decode("utf-8", errors="replace")
        tail = bytes(self.tail[len(self.tail) - keep_tail :]).decode("utf-8", errors="replace")
        cut = self.total - self.cap
        return f"{head}\n[... {cut} bytes of output cut ...]\n{tail}"


def _signal_group(pgid: int, sig: int) -> bool:
    """Send ``sig`` to the group; ``False`` when no process of it is left."""
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        return False
    return True


async def _settled(capture: _Capture, timeout: float) -> None:
    """Wait (at most ``timeout``) until the shell has exited and the output pipe is closed."""
    await asyncio.wait([capture.exited, capture.drained], timeout=timeout)


async def _end_group(pgid: int, capture: _Capture, grace: float) -> None:
    """SIGTERM the group, give it ``grace`` seconds, then SIGKILL whatever is left."""
    if not _signal_group(pgid, signals.SIGTERM):
        return
    await _settled(capture, grace)
    _signal_group(pgid, signals.SIGKILL)


def _report(capture: _Capture, returncode: int | None) -> str:
    output = capture.text()
    if returncode is not None and returncode < 0:
        status = f"[killed by signal {-returncode}]"
    else:
        status = f"[exit code {returncode}]"
    if output and not output.endswith("\n"):
        output += "\n"
    return output + status


class _Shell:
    def __init__(self, ws: Workspace, timeout: float, cap: int, grace: float) -> None:
        self.ws = ws
        self.timeout = timeout
        self.cap = cap
        self.grace = grace

    async def run(self, args: ShellArgs, exec: ToolExec) -> ToolResult:
        abort = exec.signal
        abort.throw_if_aborted()
        loop = asyncio.get_running_loop()
        transport, capture = await loop.subprocess_shell(
            lambda: _Capture(self.cap),
            args.command,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            cwd=self.ws.root,
            start_new_session=True,
        )
        pgid = transport.get_pid()
        finished = False
        try:
            reason = await self._wait(capture, abort)
            # On a cut this ends the command itself; after a normal exit, what it left running.
            await _end_group(pgid, capture, self.grace)
            await capture.exited
            await _settled(capture, self.grace)
            finished = True
        finally:
            if not finished:
                # Cancelled from outside: no time to be polite, leave no process behind.
                _signal_group(pgid, signals.SIGKILL)
            transport.close()
        abort.throw_if_aborted()
        returncode = transport.get_returncode()
        if reason == "timeout":
            return ToolResult(
                content=f"command timed out after {self.timeout:g}s; its process group was "
                f"killed\n{_report(capture, returncode)}",
                is_error=True,
                error=ToolError("TOOL_FAILED", "TimeoutError"),
                meta={"exit_code": returncode, "timed_out": True},
            )
        return ToolResult(
            content=_report(capture, returncode),
            meta={"exit_code": returncode, "output_bytes": capture.total},
        )

    async def _wait(self, capture: _Capture, abort: AbortSignal) -> str | None:
        """``None`` once the shell exits; ``"timeout"`` or ``"aborted"`` when cut short."""
        stop: asyncio.Future[str] = asyncio.get_running_loop().create_future()

        def cut(reason: str) -> Any:
            def fire(*_: object) -> None:
                if not stop.done():
                    stop.set_result(reason)

            return fire

        timer = asyncio.get_running_loop().call_later(self.timeout, cut("timeout"))
        dispose = abort.add_listener(cut("aborted"))
        try:
            waits: list[asyncio.Future[Any]] = [capture.exited, stop]
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        finally:
            timer.cancel()
            dispose()
        if capture.exited.done() and not stop.done():
            return None
        return stop.result() if stop.done() else None


def shell_tool(ws: Workspace, *, timeout: float, output_cap: int, kill_grace: float) -> Tool:
    """The ``shell`` tool over ``ws`` (exclusive: it may change anything)."""
    shell = _Shell(ws, timeout, output_cap, kill_grace)
    return define_tool(
        name="shell",
        description=(
            "Run a shell command in the workspace root and return its output (stdout and "
            f"stderr merged, capped) and exit code. Commands time out after {timeout:g}s; "
            "background processes do not outlive the command."
        ),
        parameters=ShellArgs,
        execute=shell.run,
    )
