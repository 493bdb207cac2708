"""Workspace tools: files, search and a shell confined to one directory, and the approval policy.

```python
from steerloop.workspace import install_approval, workspace_tools

for tool in workspace_tools("/path/to/repo"):
    rt.tools.register(tool)
install_approval(rt, "ask", ask=prompt_the_user)
```

Every path a file tool takes is resolved against the root (symlinks followed) and must stay
inside it; otherwise the call returns an error result with code ``PATH_OUTSIDE_WORKSPACE``.
Refusals use the tool's own codes (``NOT_FOUND``, ``NOT_A_FILE``, ``NOT_A_DIRECTORY``,
``BINARY_FILE``, ``NO_MATCH``, ``AMBIGUOUS_MATCH``, ``INVALID_PATTERN``, ``INVALID_PATH``);
a shell timeout is ``TOOL_FAILED`` named ``TimeoutError``.
"""

from __future__ import annotations

from pathlib import Path

from ..tools import Tool
from ._approval import WRITER_TOOLS, ApprovalMode, install_approval
from ._files import file_tools
from ._paths import Workspace
from ._shell import shell_tool

__all__ = ["WRITER_TOOLS", "ApprovalMode", "install_approval", "workspace_tools"]


def workspace_tools(
    root: str | Path,
    *,
    shell_timeout: float = 120,
    output_cap: int = 30_000,
    kill_grace: float = 2.0,
) -> list[Tool]:
    """The built-in tools over the directory ``root``.

    ``read_file``, ``list_dir``, ``glob`` and ``grep`` are concurrency-safe; ``write_file``,
    ``edit`` and ``shell`` are exclusive.

    Args:
        root: an existing directory; resolved once, symlinks included.
        shell_timeout: seconds a shell command may run before its process group is killed.
        output_cap: the most characters a tool returns (bytes of raw output for ``shell``).
        kill_grace: seconds between SIGTERM and SIGKILL when a command's group is ended.

    Raises:
        ValueError: ``root`` is not an existing directory, or a limit is not positive.
    """
    for name, value in (
        ("shell_timeout", shell_timeout),
        ("output_cap", output_cap),
        ("kill_grace", kill_grace),
    ):
        if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
            raise ValueError(f"{name} must be a positive number, not {value!r}")
    if not isinstance(output_cap, int):
        raise ValueError(f"output_cap must be an integer, not {output_cap!r}")
    ws = Workspace(root)
    return [
        *file_tools(ws, output_cap),
        shell_tool(ws, timeout=shell_timeout, output_cap=output_cap, kill_grace=kill_grace),
    ]
