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
``BINARY_FILE``, ``NO_MATCH``, ``AMBIGUOUS_MATCH``, ``INVALID_PATTERN``, ``INVALID_PATH``,
``FILE_TOO_LARGE``, ``HARD_LINKED``). A regular file with more than one hard link is neither
read nor written (its other names may lie outside the root). Regexes and globs are matched by
RE2, in linear time, so no pattern can stall the process;
a shell timeout is ``TOOL_FAILED`` named ``TimeoutError``. Shell commands get a scrubbed
environment, their output has the host's secret values redacted, and every process a
command started (also one that left the group with ``setsid``) is ended with the call.

``write_file``, ``edit`` and ``shell`` start only once their call is durable (they are not
concurrency-safe). After a crash, ``write_file`` and ``edit`` reconcile a call whose outcome
is unknown from the file itself (``write_file``: the file's hash is the content's; ``edit``:
the file is this edit's result); ``shell`` cannot (nothing on disk says whether a command
ran), so its interrupted calls stay ``TOOL_OUTCOME_UNKNOWN``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path

from ..tools import Tool
from ._approval import WRITER_TOOLS, ApprovalMode, install_approval
from ._files import file_tools
from ._paths import Workspace
from ._shell import DEFAULT_ENV_ALLOW, shell_tool

__all__ = [
    "DEFAULT_ENV_ALLOW",
    "WRITER_TOOLS",
    "ApprovalMode",
    "install_approval",
    "workspace_tools",
]


def workspace_tools(
    root: str | Path,
    *,
    shell_timeout: float = 120,
    output_cap: int = 30_000,
    kill_grace: float = 2.0,
    max_file_bytes: int = 10 * 1024 * 1024,
    max_line_chars: int = 2_000,
    shell_env: Mapping[str, str] | None = None,
    shell_env_allow: Iterable[str] = (),
) -> list[Tool]:
    """The built-in tools over the directory ``root``.

    ``read_file``, ``list_dir``, ``glob`` and ``grep`` are concurrency-safe; ``write_file``,
    ``edit`` and ``shell`` are exclusive.

    Args:
        root: an existing directory; resolved once, symlinks included.
        shell_timeout: seconds a shell command may run before its process group is killed.
        output_cap: the most characters a tool returns (bytes of raw output for ``shell``).
        kill_grace: seconds between SIGTERM and SIGKILL when a command's group is ended.
        max_file_bytes: the largest file ``read_file`` and ``edit`` open (larger ones are
            refused with ``FILE_TOO_LARGE``; ``grep`` skips them and says how many).
        max_line_chars: the longest line ``read_file`` returns and ``grep`` searches; the
            rest of a longer line is read in bounded chunks and dropped, with a note.
        shell_env: variables set for every shell command (on top of the allow-list).
        shell_env_allow: names of host variables passed through to commands besides
            ``DEFAULT_ENV_ALLOW`` and ``LC_*``; nothing else of the host's environment (API
            keys, database passwords) reaches a command.

    Raises:
        ValueError: ``root`` is not an existing directory, or a limit is not positive.
    """
    for name, value in (
        ("shell_timeout", shell_timeout),
        ("output_cap", output_cap),
        ("kill_grace", kill_grace),
        ("max_file_bytes", max_file_bytes),
        ("max_line_chars", max_line_chars),
    ):
        if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
            raise ValueError(f"{name} must be a positive number, not {value!r}")
    for name, value in (
        ("output_cap", output_cap),
        ("max_file_bytes", max_file_bytes),
        ("max_line_chars", max_line_chars),
    ):
        if not isinstance(value, int):
            raise ValueError(f"{name} must be an integer, not {value!r}")
    ws = Workspace(root)
    return [
        *file_tools(ws, output_cap, max_file_bytes, max_line_chars),
        shell_tool(
            ws,
            timeout=shell_timeout,
            output_cap=output_cap,
            kill_grace=kill_grace,
            env=shell_env,
            env_allow=shell_env_allow,
        ),
    ]
