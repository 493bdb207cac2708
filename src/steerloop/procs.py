"""Child-process bookkeeping shared by plugins that start processes (the workspace shell,
MCP stdio servers): each marks its children's environment and finds them again by the mark
to end a whole tree, grandchildren included."""

from __future__ import annotations

from ._procs import marked_processes

__all__ = ["marked_processes"]
