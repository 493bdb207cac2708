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

Escapees. A child that calls ``setsid`` leaves the group, and once the shell exits it is
reparented away from us, so neither the group nor the parent links find it. Every command
runs with a random marker variable in its environment, which every descendant inherits at
``exec``; the tree is ended by signalling the group and every process whose
``/proc/PID/environ`` holds the marker. (A cgroup would also catch a child that clears its
environment, but it needs a delegated writable cgroup, which neither containers nor desktop
sessions usually give a library; without ``/proc`` only the group is signalled.)

Secrets. The command sees only an allow-listed environment (``PATH``, ``HOME``, locale,
terminal, user and temp-dir variables) plus what the host configures, so API keys and
database passwords of the host process are not in it; and the values of the host's
secret-looking variables (names with KEY, TOKEN, SECRET, PASSWORD, …) are replaced by
``***`` in the output before it becomes the result (so before it is logged).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import secrets
import signal as signals
from collections.abc import Iterable, Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from .. import AbortSignal
from ..procs import marked_processes
from ..tools import Tool, ToolError, ToolExec, ToolResult, define_tool
from ._paths import Workspace

__all__ = ["DEFAULT_ENV_ALLOW", "shell_tool"]

#: Variables of the host environment a command sees (plus every ``LC_*``).
DEFAULT_ENV_ALLOW = frozenset(
    {"PATH", "HOME", "LANG", "LANGUAGE", "TERM", "USER", "LOGNAME", "SHELL", "TMPDIR", "TZ"}
)

_MARKER = "STEERLOOP_SHELL_CALL"
# Names whose values are credentials; their values are redacted from command output.
_SECRET_NAME = re.compile(r"KEY|TOKEN|SECRET|PASSW|CREDENTIAL|PRIVATE", re.IGNORECASE)
# Shorter values are not redacted: replacing a one-letter "key" would mangle every word.
MIN_SECRET_LENGTH = 8


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


def _signal_tree(pgid: int | None, marker: bytes, sig: int) -> bool:
    """Signal the group and every marked process; ``False`` when none was left."""
    any_left = pgid is not None and _signal_group(pgid, sig)
    for pid in marked_processes(marker):
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            continue
        any_left = True
    return any_left


async def _settled(capture: _Capture, timeout: float) -> None:
    """Wait (at most ``timeout``) until the shell has exited and the output pipe is closed."""
    await asyncio.wait([capture.exited, capture.drained], timeout=timeout)


async def _end_tree(pgid: int, marker: bytes, capture: _Capture, grace: float) -> None:
    """SIGTERM the group and the marked escapees, give them ``grace`` seconds, then SIGKILL
    whatever is left."""
    if not _signal_tree(pgid, marker, signals.SIGTERM):
        return
    await _settled(capture, grace)
    deadline = asyncio.get_running_loop().time() + grace
    # The shell and the pipe are done; escapees hold neither, so poll for them.
    while await asyncio.to_thread(marked_processes, marker):
        if asyncio.get_running_loop().time() >= deadline:
            break
        await asyncio.sleep(0.02)
    _signal_tree(pgid, marker, signals.SIGKILL)


class _Redactor:
    """Replaces the values of the host's secret-looking variables by ``***``."""

    def __init__(self, extra: Mapping[str, str]) -> None:
        self.extra = dict(extra)

    def values(self) -> list[str]:
        found = {
            value
            for source in (os.environ, self.extra)
            for name, value in source.items()
            if _SECRET_NAME.search(name) and len(value.strip()) >= MIN_SECRET_LENGTH
        }
        return sorted(found, key=len, reverse=True)  # a longer value first: no partial leak

    def __call__(self, text: str) -> str:
        # Values only: a shape pattern such as ``sk-...`` would also hit "disk-usage".
        for value in self.values():
            text = text.replace(value, "***")
        return text


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
    def __init__(
        self,
        ws: Workspace,
        timeout: float,
        cap: int,
        grace: float,
        env: Mapping[str, str],
        env_allow: Iterable[str],
    ) -> None:
        self.ws = ws
        self.timeout = timeout
        self.cap = cap
        self.grace = grace
        self.env = dict(env)
        self.env_allow = DEFAULT_ENV_ALLOW | frozenset(env_allow)
        self.redact = _Redactor(self.env)

    def environment(self, marker: str) -> dict[str, str]:
        """The command's environment: the allow-list of the host's, the configured, the marker."""
        env = {
            name: value
            for name, value in os.environ.items()
            if name in self.env_allow or name.startswith("LC_")
        }
        env.update(self.env)
        env[_MARKER] = marker
        return env

    async def run(self, args: ShellArgs, exec: ToolExec) -> ToolResult:
        abort = exec.signal
        abort.throw_if_aborted()
        loop = asyncio.get_running_loop()
        token = secrets.token_hex(16)
        marker = f"{_MARKER}={token}".encode()
        try:
            transport, capture = await loop.subprocess_shell(
                lambda: _Capture(self.cap),
                args.command,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.STDOUT,
                cwd=self.ws.root,
                env=self.environment(token),
                start_new_session=True,
            )
        except BaseException:
            # Cancelled while the transport was being set up: the command may already run
            # (and asyncio kills only the shell itself), so end whatever carries the marker.
            _signal_tree(None, marker, signals.SIGKILL)
            raise
        pgid = transport.get_pid()
        finished = False
        try:
            reason = await self._wait(capture, abort)
            # On a cut this ends the command itself; after a normal exit, what it left running.
            await _end_tree(pgid, marker, capture, self.grace)
            await capture.exited
            await _settled(capture, self.grace)
            finished = True
        finally:
            if not finished:
                # Cancelled from outside: no time to be polite, leave no process behind.
                _signal_tree(pgid, marker, signals.SIGKILL)
                # And see the shell reaped before returning: the child watcher reports the exit
                # through the loop, and a loop closed before that leaves the shell a zombie
                # (and its Popen warning "still running" when collected).
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(asyncio.shield(capture.exited), self.grace)
            transport.close()
        abort.throw_if_aborted()
        returncode = transport.get_returncode()
        report = self.redact(_report(capture, returncode))
        if reason == "timeout":
            return ToolResult(
                content=f"command timed out after {self.timeout:g}s; its process group was "
                f"killed\n{report}",
                is_error=True,
                error=ToolError("TOOL_FAILED", "TimeoutError"),
                meta={"exit_code": returncode, "timed_out": True},
            )
        return ToolResult(
            content=report,
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


def shell_tool(
    ws: Workspace,
    *,
    timeout: float,
    output_cap: int,
    kill_grace: float,
    env: Mapping[str, str] | None = None,
    env_allow: Iterable[str] = (),
) -> Tool:
    """The ``shell`` tool over ``ws`` (exclusive: it may change anything)."""
    shell = _Shell(ws, timeout, output_cap, kill_grace, env or {}, env_allow)
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
