"""Processes found by a marker in their environment (Linux ``/proc``): how the shell tool and
the MCP client find the descendants of a process that left its process group."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["marked_processes"]


def marked_processes(marker: bytes) -> list[int]:
    """Pids of live processes whose environment holds ``marker`` (a ``NAME=value`` entry);
    none without ``/proc``. Our own process is never one."""
    found: list[int] = []
    me = os.getpid()
    try:
        entries = os.listdir("/proc")
    except OSError:
        return found
    for entry in entries:
        if not entry.isdigit() or int(entry) == me:
            continue
        try:
            environ = Path(f"/proc/{entry}/environ").read_bytes()
        except OSError:  # gone, or not ours to read
            continue
        if marker in environ.split(b"\0"):
            found.append(int(entry))
    return found
