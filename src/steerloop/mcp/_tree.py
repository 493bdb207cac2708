"""A stdio server's whole process tree, ended together: on close and before a reconnect.

A server may start children, and a child that calls ``setsid`` leaves the server's process
group; once the server exits it is reparented away from us, so neither the group nor the
parent links find it. Two mechanisms find every process of the tree:

* a **cgroup** (Linux cgroup v2 with a writable cgroup of our own, as root in a container
  or with a delegated user slice): the server enters a cgroup of its own before it runs
  (a ``/bin/sh`` wrapper writes its pid to ``cgroup.procs``, then ``exec``s the server), every
  descendant inherits it, and ``cgroup.kill`` ends them all at once;
* otherwise, a **marker**: a random ``STEERLOOP_MCP_TREE`` variable in the server's
  environment, which every descendant inherits at ``exec``; the tree is the server's process
  group plus every process whose ``/proc/PID/environ`` holds the marker (a process that
  clears its environment escapes this, which is why the cgroup comes first). Without
  ``/proc`` only the group is signalled.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import time
from pathlib import Path

from ..procs import marked_processes

__all__ = ["MARKER", "ProcessTree"]

MARKER = "STEERLOOP_MCP_TREE"
_CGROUP2 = "cgroup2"
_PREFIX = "steerloop-mcp-"
# The server enters its cgroup, then becomes the command (same pid, same group); the shell's
# own PWD is not passed on (the environment stays exactly the configured one).
_ENTER = 'echo $$ >"$0" 2>/dev/null; unset PWD OLDPWD; exec "$@"'


def _cgroup_root() -> Path | None:
    """The directory of our own cgroup v2, when one is mounted and we are in it."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
        mounts = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return None
    mine = next((line[3:] for line in lines if line.startswith("0::")), None)
    if mine is None:
        return None
    for mount in mounts:
        left, _, right = mount.partition(" - ")
        if right.split(" ", 1)[0] == _CGROUP2:
            fields = left.split()
            if len(fields) > 4 and fields[3] == "/":
                return Path(fields[4]) / mine.lstrip("/")
    return None


def _make_cgroup(token: str) -> Path | None:
    root = _cgroup_root()
    if root is None:
        return None
    _sweep(root)
    path = root / f"{_PREFIX}{os.getpid()}-{token}"
    try:
        path.mkdir()
    except OSError:
        return None
    if not os.access(path / "cgroup.procs", os.W_OK):
        _remove(path)
        return None
    return path


def _remove(path: Path) -> None:
    with contextlib.suppress(OSError):
        path.rmdir()


def _sweep(root: Path) -> None:
    """Remove the cgroups a process that is gone left behind (a kill it did not outlive, or
    a zombie that kept one busy until its reaping)."""
    with contextlib.suppress(OSError):
        for path in root.glob(f"{_PREFIX}*"):
            pid = path.name[len(_PREFIX) :].partition("-")[0]
            if pid.isdigit() and not Path(f"/proc/{pid}").exists():
                _remove(path)


class ProcessTree:
    """The processes of one stdio server start: how to start it inside, how to end them all."""

    def __init__(self, *, cgroup: bool = True) -> None:
        token = secrets.token_hex(12)
        self.marker = f"{MARKER}={token}"
        self.cgroup = _make_cgroup(token) if cgroup else None
        self.pgid: int | None = None

    def command(self, command: str, args: list[str]) -> tuple[str, list[str]]:
        """The command line that starts ``command`` inside the tree."""
        if self.cgroup is None:
            return command, args
        return "/bin/sh", ["-c", _ENTER, str(self.cgroup / "cgroup.procs"), command, *args]

    def environment(self, env: dict[str, str]) -> dict[str, str]:
        name, _, value = self.marker.partition("=")
        return {**env, name: value}

    def started(self, pid: int) -> None:
        """The server runs as ``pid``, the leader of its own process group."""
        self.pgid = pid

    def members(self) -> list[int]:
        """Pids of the tree's live processes (zombies included)."""
        pids: set[int] = set()
        if self.cgroup is not None:
            with contextlib.suppress(OSError):
                text = (self.cgroup / "cgroup.procs").read_text()
                pids.update(int(p) for p in text.split())
        pids.update(marked_processes(self.marker.encode()))
        return sorted(pids)

    def signal(self, sig: int) -> None:
        """Send ``sig`` to every process of the tree."""
        if self.cgroup is not None and sig == signal.SIGKILL:
            with contextlib.suppress(OSError):
                (self.cgroup / "cgroup.kill").write_text("1")
        if self.pgid is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.pgid, sig)
        for pid in self.members():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, sig)

    def kill(self, timeout: float = 5.0) -> bool:
        """SIGKILL the whole tree and wait (at most ``timeout``) until it is empty; returns
        whether it is. Blocking: run it in a worker thread from async code."""
        deadline = time.monotonic() + timeout
        while True:
            self.signal(signal.SIGKILL)
            if not self._running():
                break
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.01)
        if self.cgroup is not None:
            _remove(self.cgroup)
        return True

    def _running(self) -> bool:
        """Whether a process of the tree still runs (a zombie is over: it only waits to be
        reaped by its parent)."""
        for pid in self.members():
            try:
                state = Path(f"/proc/{pid}/stat").read_bytes()
            except OSError:
                continue
            if state[state.rfind(b")") + 2 : state.rfind(b")") + 3] != b"Z":
                return True
        return False
