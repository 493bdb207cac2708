"""Confinement: every path a workspace tool touches resolves inside the workspace root.

A path is joined to the root when relative, then resolved with every symlink followed
(``Path.resolve``, which also follows dangling links and symlinked parent directories);
the result must be the root or lie below it. Tools then work on the resolved path, so a
symlink inside the root that points inside is usable and one that points out is refused.
The check is made at call time: a link swapped between the check and the I/O is outside
what this guards against (the shell tool is not confined by paths at all).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path

from .. import AbortSignal

__all__ = [
    "AMBIGUOUS_MATCH",
    "BINARY_FILE",
    "FILE_TOO_LARGE",
    "HARD_LINKED",
    "INVALID_PATH",
    "INVALID_PATTERN",
    "NOT_A_DIRECTORY",
    "NOT_A_FILE",
    "NOT_FOUND",
    "NO_MATCH",
    "PATH_OUTSIDE_WORKSPACE",
    "Workspace",
    "WorkspaceError",
    "split_pattern",
]

PATH_OUTSIDE_WORKSPACE = "PATH_OUTSIDE_WORKSPACE"
INVALID_PATH = "INVALID_PATH"
NOT_FOUND = "NOT_FOUND"
NOT_A_FILE = "NOT_A_FILE"
NOT_A_DIRECTORY = "NOT_A_DIRECTORY"
BINARY_FILE = "BINARY_FILE"
NO_MATCH = "NO_MATCH"
AMBIGUOUS_MATCH = "AMBIGUOUS_MATCH"
INVALID_PATTERN = "INVALID_PATTERN"
HARD_LINKED = "HARD_LINKED"
FILE_TOO_LARGE = "FILE_TOO_LARGE"

# Directories the tree walks of ``glob`` and ``grep`` never enter.
SKIPPED_DIRS = frozenset({".git"})

_GLOB_CHARS = re.compile(r"[*?\[]")


class WorkspaceError(Exception):
    """A refusal a workspace tool reports as a result with its own error ``code``."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


class Workspace:
    """A directory the tools are confined to; ``root`` is fully resolved."""

    def __init__(self, root: str | Path) -> None:
        try:
            resolved = Path(root).resolve(strict=True)
        except (OSError, RuntimeError) as exc:
            raise ValueError(f"workspace root {str(root)!r} does not exist: {exc}") from None
        if not resolved.is_dir():
            raise ValueError(f"workspace root {str(root)!r} is not a directory")
        self.root = resolved

    def resolve(self, path: str) -> Path:
        """``path`` (relative to the root, or absolute) resolved; refused when outside."""
        if "\0" in path:
            raise WorkspaceError(INVALID_PATH, f"path {path!r} contains a NUL character")
        candidate = Path(path)
        if not candidate.is_absolute():
            candidate = self.root / candidate
        try:
            resolved = candidate.resolve()
        except (OSError, RuntimeError) as exc:
            raise WorkspaceError(INVALID_PATH, f"cannot resolve path {path!r}: {exc}") from None
        if not self.contains(resolved):
            raise WorkspaceError(
                PATH_OUTSIDE_WORKSPACE,
                f"path {path!r} is outside the workspace {self.root} (it resolves to {resolved})",
            )
        return resolved

    def contains(self, resolved: Path) -> bool:
        return resolved == self.root or resolved.is_relative_to(self.root)

    def inside(self, path: Path) -> bool:
        """Whether ``path`` (found by a walk) still resolves inside the root."""
        try:
            return self.contains(path.resolve())
        except (OSError, RuntimeError):
            return False

    def display(self, path: Path) -> str:
        """``path`` (below the root) as the model sees it: relative, with ``/``."""
        return path.relative_to(self.root).as_posix() or "."

    def walk(self, base: Path, signal: AbortSignal) -> Iterator[tuple[Path, bool]]:
        """``(path, is_dir)`` below ``base`` depth-first, each directory's entries by name.

        Symlinked directories are listed but not entered; entries whose target resolves
        outside the root are left out; ``.git`` is not entered; unreadable directories are
        skipped.
        """
        signal.throw_if_aborted()
        try:
            with os.scandir(base) as it:
                entries = sorted(it, key=lambda e: e.name)
        except OSError:
            return
        for entry in entries:
            path = Path(entry.path)
            link = entry.is_symlink()
            if link and not self.inside(path):
                continue
            is_dir = entry.is_dir()
            yield path, is_dir
            if is_dir and not link and entry.name not in SKIPPED_DIRS:
                yield from self.walk(path, signal)


def split_pattern(pattern: str) -> tuple[str, str]:
    """Split a glob into its literal leading directories and the wildcard remainder."""
    parts = pattern.split("/")
    for i, part in enumerate(parts):
        if _GLOB_CHARS.search(part):
            prefix = "/".join(parts[:i])
            if pattern.startswith("/") and not prefix:
                prefix = "/"
            return prefix, "/".join(parts[i:])
    return pattern, ""
