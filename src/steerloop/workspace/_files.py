"""The file tools: read_file, write_file, edit, list_dir, glob, grep.

Bodies are synchronous and run in a worker thread (``asyncio.to_thread``) so a large read
or a tree walk does not stall the loop; walks check the call's signal between entries.
A ``WorkspaceError`` becomes a result with its own error code; anything else the body
raises becomes the pipeline's ``TOOL_FAILED``.
"""

from __future__ import annotations

import asyncio
import io
import os
import stat
from collections.abc import Callable, Generator, Iterable, Iterator
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field

from .. import AbortSignal
from ..messages import ImageBlock, TextBlock, ToolCallBlock, sniff_image
from ..tools import Tool, ToolExec, ToolResult, define_tool, error_result
from ._paths import (
    AMBIGUOUS_MATCH,
    BINARY_FILE,
    FILE_TOO_LARGE,
    HARD_LINKED,
    INVALID_PATTERN,
    NO_MATCH,
    NOT_A_DIRECTORY,
    NOT_A_FILE,
    NOT_FOUND,
    Workspace,
    WorkspaceError,
    split_pattern,
)
from ._reconcile import edit_landed, write_landed
from ._regex import Matcher, compile_glob, compile_regex

__all__ = ["file_tools"]

A = TypeVar("A", bound=BaseModel)

_SNIFF = 8192
_CHUNK = 65_536
_MAX_LINE = 500  # characters of a matching line grep shows
_NO_SIZE_LIMIT = 1 << 62
_PATH = "File path, relative to the workspace root (or absolute inside it)."


class _Args(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ReadFileArgs(_Args):
    path: str = Field(description=_PATH)
    offset: int = Field(default=1, ge=1, description="First line to return (1-based).")
    limit: int | None = Field(
        default=None, ge=1, description="Most lines to return (default: up to the output cap)."
    )


class WriteFileArgs(_Args):
    path: str = Field(description=_PATH)
    content: str = Field(description="The complete new content of the file (UTF-8).")


class EditArgs(_Args):
    path: str = Field(description=_PATH)
    old_string: str = Field(
        min_length=1,
        description="Exact text to replace; must occur exactly once unless replace_all is set.",
    )
    new_string: str = Field(description="The replacement text.")
    replace_all: bool = Field(default=False, description="Replace every occurrence of old_string.")


class ListDirArgs(_Args):
    path: str = Field(default=".", description="Directory, relative to the workspace root.")


class GlobArgs(_Args):
    pattern: str = Field(
        min_length=1,
        description="Glob such as 'src/**/*.py': '*' and '?' stay within one path segment, "
        "'**/' spans directories.",
    )
    path: str = Field(default=".", description="Directory the pattern is relative to.")


class GrepArgs(_Args):
    pattern: str = Field(
        min_length=1,
        description="Regular expression (RE2 syntax, like Python's without lookaround or "
        "backreferences).",
    )
    path: str = Field(default=".", description="File or directory to search.")
    glob: str | None = Field(
        default=None,
        description="Only search files matching this glob ('*.py' matches the file name; a "
        "pattern with '/' matches the path below the searched directory).",
    )
    ignore_case: bool = Field(default=False, description="Match case-insensitively.")


def _failure(exc: WorkspaceError) -> ToolResult:
    return error_result(exc.code, str(exc))


def _tool(
    name: str,
    description: str,
    model: type[A],
    body: Callable[[A, Any], str | ToolResult],
    *,
    safe: bool,
    with_exec: bool = False,
    landed: Callable[[A], str | None] | None = None,
) -> Tool:
    """A file tool; its body gets the call's signal (or, ``with_exec``, the whole call)."""

    async def execute(args: A, exec: ToolExec) -> str | ToolResult:
        try:
            return await asyncio.to_thread(body, args, exec if with_exec else exec.signal)
        except WorkspaceError as exc:
            return _failure(exc)

    def reconcile(call: ToolCallBlock, exec: ToolExec) -> ToolResult | None:
        # Runs in a worker thread (a synchronous reconcile); see ``_reconcile``.
        assert landed is not None
        try:
            done = landed(exec.arguments)
        except (WorkspaceError, OSError, UnicodeDecodeError):
            return None
        return None if done is None else ToolResult(content=done)

    return define_tool(
        name=name,
        description=description,
        parameters=model,
        execute=execute,
        concurrency_safe=safe,
        reconcile=reconcile if landed is not None else None,
    )


def _is_binary(head: bytes) -> bool:
    return b"\0" in head


def _cap_note(cap: int, what: str) -> str:
    return f"[output capped at {cap} characters: {what}]"


class _Refused(Exception):
    """A file ``grep`` skips instead of failing the whole search (``code`` says why)."""

    def __init__(self, error: WorkspaceError) -> None:
        super().__init__(str(error))
        self.error = error


def _open_regular(path: Path, shown: str, flags: int, max_bytes: int) -> tuple[int, int]:
    """Open ``path`` (already resolved inside the root) and check what was opened.

    Returns ``(fd, size)``. The checks are made on the open descriptor, so the file cannot
    be swapped between check and use: it must be a regular file (``O_NONBLOCK`` keeps a FIFO
    from blocking the open), not a symlink (``O_NOFOLLOW``), have a single link, and be no
    larger than ``max_bytes``.

    Why a second hard link is refused for reads too: a hard link's other names cannot be
    found without searching every filesystem, so one of them may be outside the root (a
    secret linked in); the confinement promise is that a tool only ever reaches content
    below the root, and a multiply-linked file is content it cannot place. Writes through
    such a file would change the outside name as well.
    """
    try:
        fd = os.open(path, flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise WorkspaceError(NOT_FOUND, f"file {shown!r} does not exist") from None
    except OSError as exc:
        raise WorkspaceError(NOT_A_FILE, f"{shown!r} is not a regular file: {exc}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise WorkspaceError(NOT_A_FILE, f"{shown!r} is not a regular file")
        if st.st_nlink > 1:
            raise WorkspaceError(
                HARD_LINKED,
                f"{shown!r} has {st.st_nlink} hard links; its other names may be outside the "
                "workspace, so the file tools do not read or write it",
            )
        if st.st_size > max_bytes:
            raise WorkspaceError(
                FILE_TOO_LARGE,
                f"{shown!r} is {st.st_size} bytes, over the {max_bytes}-byte limit of the file "
                "tools",
            )
    except BaseException:
        os.close(fd)
        raise
    return fd, st.st_size


def _image(
    path: str, media_type: str, raw: io.BufferedReader[io.FileIO], accepted: bool
) -> ToolResult:
    """An image file for a model that takes images (the open descriptor read whole: the file
    was checked against the size limit when it was opened)."""
    if not accepted:
        raise WorkspaceError(
            BINARY_FILE, f"{path!r} is an image ({media_type}); the model does not accept images"
        )
    data = raw.read()
    try:
        block = ImageBlock(media_type, data, name=Path(path).name or None)
    except ValueError as exc:
        raise WorkspaceError(BINARY_FILE, f"{path!r} is not a readable image: {exc}") from None
    return ToolResult(content=[TextBlock(f"{path}: {block.describe()}"), block])


def _decode_line(data: bytes, cut: bool) -> str:
    """``data`` as strict UTF-8; a ``cut`` line may end inside a character."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        if cut and exc.reason == "unexpected end of data" and exc.start >= len(data) - 3:
            return data[: exc.start].decode("utf-8")
        raise


def _lines(stream: io.BufferedReader[io.FileIO], max_bytes: int) -> Iterator[tuple[bytes, int]]:
    """``(head, cut)`` per line, the ``\n`` and a trailing ``\r`` removed: at most
    ``max_bytes`` of the line are kept, ``cut`` counts the bytes dropped after them.

    Memory stays bounded by ``max_bytes`` plus one chunk whatever the line length.
    """
    while True:
        head = stream.readline(max_bytes + 1)
        if not head:
            return
        cut = 0
        if not head.endswith(b"\n") and len(head) > max_bytes:
            cut = len(head) - max_bytes
            head = head[:max_bytes]
            while True:  # skip the rest of an overlong line, chunk by chunk
                rest = stream.readline(_CHUNK)
                if not rest:
                    break
                if rest.endswith(b"\n"):
                    cut += len(rest) - 1
                    break
                cut += len(rest)
        elif head.endswith(b"\n"):
            head = head[:-1]
        if head.endswith(b"\r"):
            head = head[:-1]
        yield head, cut


class _Files:
    """The tool bodies over one workspace."""

    def __init__(self, ws: Workspace, output_cap: int, max_file_bytes: int, max_line: int) -> None:
        self.ws = ws
        self.cap = output_cap
        self.max_file_bytes = max_file_bytes
        self.max_line = max_line

    def _existing_file(self, path: str) -> Path:
        resolved = self.ws.resolve(path)
        if not resolved.exists():
            raise WorkspaceError(NOT_FOUND, f"file {path!r} does not exist")
        if resolved.is_dir():
            raise WorkspaceError(NOT_A_FILE, f"{path!r} is a directory, not a file")
        if not resolved.is_file():
            raise WorkspaceError(NOT_A_FILE, f"{path!r} is not a regular file")
        return resolved

    def read_any(self, args: ReadFileArgs, exec: ToolExec) -> str | ToolResult:
        """``read_file``: a text file's lines, or an image as an image block when the model
        that asked accepts images."""
        return self.read_file(args, exec.signal, "image" in exec.input_modalities)

    def read_file(
        self, args: ReadFileArgs, signal: AbortSignal, images: bool = False
    ) -> str | ToolResult:
        resolved = self._existing_file(args.path)
        fd, _ = _open_regular(resolved, args.path, os.O_RDONLY, self.max_file_bytes)
        shown: list[str] = []
        size = 0
        total = 0
        capped = False
        end = None if args.limit is None else args.offset + args.limit
        # A line is cut at max_line characters; UTF-8 needs at most 4 bytes a character.
        with io.BufferedReader(io.FileIO(fd, "r"), _CHUNK) as raw:
            head = raw.peek(_SNIFF)[:_SNIFF]
            media_type = sniff_image(head)
            if media_type is not None:
                return _image(args.path, media_type, raw, images)
            if _is_binary(head):
                raise WorkspaceError(BINARY_FILE, f"{args.path!r} is a binary file, not UTF-8 text")
            try:
                for total, (head, cut) in enumerate(_lines(raw, 4 * self.max_line), start=1):
                    if total % 4096 == 0:
                        signal.throw_if_aborted()
                    if total < args.offset or capped or (end is not None and total >= end):
                        continue
                    line = _decode_line(head, cut > 0)
                    if cut or len(line) > self.max_line:
                        more = cut + len(line[self.max_line :].encode("utf-8"))
                        line = f"{line[: self.max_line]}… [line cut: {more} more bytes]"
                    entry = f"{total:>6}\t{line}"
                    if size + len(entry) + 1 > self.cap and shown:
                        capped = True
                        continue
                    shown.append(entry)
                    size += len(entry) + 1
            except UnicodeDecodeError:
                raise WorkspaceError(
                    BINARY_FILE, f"{args.path!r} is not valid UTF-8 text"
                ) from None
        if total == 0:
            return f"({args.path} is empty)"
        if not shown:
            return f"(no lines from line {args.offset}: {args.path} has {total} lines)"
        last = args.offset + len(shown) - 1
        out = "\n".join(shown)
        if capped:
            out += "\n" + _cap_note(
                self.cap, f"lines {args.offset}-{last} of {total}; use offset to read on"
            )
        elif args.offset > 1 or last < total:
            out += f"\n[lines {args.offset}-{last} of {total}]"
        return out

    def write_file(self, args: WriteFileArgs, signal: AbortSignal) -> str:
        resolved = self.ws.resolve(args.path)
        if resolved.is_dir():
            raise WorkspaceError(NOT_A_FILE, f"{args.path!r} is a directory, not a file")
        existed = resolved.exists()
        if existed and not resolved.is_file():
            raise WorkspaceError(NOT_A_FILE, f"{args.path!r} is not a regular file")
        resolved.parent.mkdir(parents=True, exist_ok=True)
        data = args.content.encode("utf-8")
        # No O_TRUNC: the descriptor is checked (regular, one link) before anything changes.
        fd, _ = _open_regular(resolved, args.path, os.O_WRONLY | os.O_CREAT, _NO_SIZE_LIMIT)
        with open(fd, "wb") as out:
            out.truncate(0)
            out.write(data)
        verb = "overwrote" if existed else "created"
        return f"{verb} {self.ws.display(resolved)} ({len(data)} bytes)"

    def edit(self, args: EditArgs, signal: AbortSignal) -> str:
        resolved = self._existing_file(args.path)
        fd, size = _open_regular(resolved, args.path, os.O_RDWR, self.max_file_bytes)
        with open(fd, "r+b") as file:
            data = file.read(size + 1)
            if _is_binary(data[:_SNIFF]):
                raise WorkspaceError(BINARY_FILE, f"{args.path!r} is a binary file, not UTF-8 text")
            try:
                text = data.decode("utf-8")
            except UnicodeDecodeError:
                raise WorkspaceError(
                    BINARY_FILE, f"{args.path!r} is not valid UTF-8 text"
                ) from None
            count = text.count(args.old_string)
            if count == 0:
                raise WorkspaceError(NO_MATCH, f"old_string was not found in {args.path!r}")
            if count > 1 and not args.replace_all:
                raise WorkspaceError(
                    AMBIGUOUS_MATCH,
                    f"old_string occurs {count} times in {args.path!r}; include more context to "
                    "make it unique, or set replace_all",
                )
            file.seek(0)
            file.truncate(0)
            file.write(text.replace(args.old_string, args.new_string).encode("utf-8"))
        plural = "occurrence" if count == 1 else "occurrences"
        return f"replaced {count} {plural} in {self.ws.display(resolved)}"

    def write_landed(self, args: WriteFileArgs) -> str | None:
        """``write_file``'s reconcile: what it did, if the file holds exactly its content."""
        resolved = self.ws.resolve(args.path)
        limit = len(args.content.encode("utf-8"))
        fd, _ = _open_regular(resolved, args.path, os.O_RDONLY, limit)
        with open(fd, "rb") as file:
            current = file.read(limit + 1)
        if not write_landed(current, args.content):
            return None
        return (
            f"wrote {self.ws.display(resolved)} ({limit} bytes); confirmed at recovery: the "
            "file holds exactly this content"
        )

    def edit_landed(self, args: EditArgs) -> str | None:
        """``edit``'s reconcile: what it did, if the file reads as after this edit."""
        resolved = self._existing_file(args.path)
        fd, size = _open_regular(resolved, args.path, os.O_RDONLY, self.max_file_bytes)
        with open(fd, "rb") as file:
            text = file.read(size + 1).decode("utf-8")
        if not edit_landed(text, args.old_string, args.new_string, args.replace_all):
            return None
        return (
            f"edited {self.ws.display(resolved)}; confirmed at recovery: the file reads as it "
            "does after this edit"
        )

    def list_dir(self, args: ListDirArgs, signal: AbortSignal) -> str:
        resolved = self.ws.resolve(args.path)
        if not resolved.exists():
            raise WorkspaceError(NOT_FOUND, f"directory {args.path!r} does not exist")
        if not resolved.is_dir():
            raise WorkspaceError(NOT_A_DIRECTORY, f"{args.path!r} is not a directory")
        entries: list[str] = []
        for child in sorted(resolved.iterdir(), key=lambda p: p.name):
            if child.is_symlink():
                entries.append(f"{child.name}@")
            elif child.is_dir():
                entries.append(f"{child.name}/")
            else:
                entries.append(child.name)
        if not entries:
            return f"({self.ws.display(resolved)} is empty)"
        return self._capped(entries, "entries", len(entries))

    def glob(self, args: GlobArgs, signal: AbortSignal) -> str:
        prefix, rest = split_pattern(args.pattern.removeprefix("./"))
        base = self.ws.resolve(str(Path(args.path) / prefix) if prefix else args.path)
        if not rest:
            return self.ws.display(base) if base.exists() else "(no matches)"
        if ".." in rest.split("/"):
            raise WorkspaceError(
                INVALID_PATTERN, "'..' may only appear before the first wildcard of a pattern"
            )
        if not base.is_dir():
            return "(no matches)"
        matcher = compile_glob(rest)
        found = [
            self.ws.display(path) + ("/" if is_dir else "")
            for path, is_dir in self.ws.walk(base, signal)
            if matcher.fullmatch(path.relative_to(base).as_posix())
        ]
        if not found:
            return "(no matches)"
        return self._capped(found, "matches", len(found))

    def grep(self, args: GrepArgs, signal: AbortSignal) -> str:
        regex = compile_regex(args.pattern, ignore_case=args.ignore_case)
        base = self.ws.resolve(args.path)
        if not base.exists():
            raise WorkspaceError(NOT_FOUND, f"{args.path!r} does not exist")
        files: Iterable[Path]
        single = False
        if base.is_dir():
            only = None if args.glob is None else compile_glob(args.glob.removeprefix("./"))
            by_name = args.glob is not None and "/" not in args.glob

            def wanted(path: Path) -> bool:
                if only is None:
                    return True
                subject = path.name if by_name else path.relative_to(base).as_posix()
                return only.fullmatch(subject) is not None

            files = (
                path for path, is_dir in self.ws.walk(base, signal) if not is_dir and wanted(path)
            )
        elif base.is_file():
            files = [base]
            single = True
        else:
            raise WorkspaceError(NOT_A_FILE, f"{args.path!r} is not a regular file")
        out: list[str] = []
        skipped: dict[str, int] = {}
        size = 0
        for path in files:
            signal.throw_if_aborted()
            try:
                hits = self._search(path, regex, signal)
                for line_no, line in hits:
                    entry = f"{self.ws.display(path)}:{line_no}:{line}"
                    if size + len(entry) + 1 > self.cap and out:
                        hits.close()
                        note = _cap_note(self.cap, f"{len(out)} matches shown; narrow the search")
                        return "\n".join([*out, note])
                    out.append(entry)
                    size += len(entry) + 1
            except _Refused as refused:
                if single:
                    raise refused.error from None
                skipped[refused.error.code] = skipped.get(refused.error.code, 0) + 1
        if skipped:
            out.append(_skip_note(skipped, self.max_file_bytes))
        return "\n".join(out) if out else "(no matches)"

    def _search(
        self, path: Path, regex: Matcher, signal: AbortSignal
    ) -> Generator[tuple[int, str], None, None]:
        """Matching ``(line number, line)`` of a text file; binary or unreadable files give none.

        Raises:
            _Refused: the file is too large or hard-linked (``grep`` reports how many).
        """
        try:
            fd, _ = _open_regular(path, self.ws.display(path), os.O_RDONLY, self.max_file_bytes)
        except WorkspaceError as exc:
            if exc.code in (HARD_LINKED, FILE_TOO_LARGE):
                raise _Refused(exc) from None
            return  # a FIFO, a device, a vanished or unreadable file: nothing to search
        with io.BufferedReader(io.FileIO(fd, "r"), _CHUNK) as raw:
            if _is_binary(raw.peek(_SNIFF)[:_SNIFF]):
                return
            try:
                for number, (head, _) in enumerate(_lines(raw, 4 * self.max_line), start=1):
                    if number % 4096 == 0:
                        signal.throw_if_aborted()
                    # Only the kept head of an overlong line is searched.
                    line = head.decode("utf-8", errors="replace")[: self.max_line]
                    if regex.search(line):
                        if len(line) > _MAX_LINE:
                            line = line[:_MAX_LINE] + "…"
                        yield number, line
            except OSError:
                return

    def _capped(self, items: list[str], noun: str, total: int) -> str:
        shown: list[str] = []
        size = 0
        for item in items:
            if size + len(item) + 1 > self.cap and shown:
                note = _cap_note(self.cap, f"{len(shown)} of {total} {noun} shown")
                return "\n".join([*shown, note])
            shown.append(item)
            size += len(item) + 1
        return "\n".join(shown)


def _skip_note(skipped: dict[str, int], max_bytes: int) -> str:
    why = {
        FILE_TOO_LARGE: f"over the {max_bytes}-byte limit",
        HARD_LINKED: "hard-linked (other names may be outside the workspace)",
    }
    parts = [f"{n} {why.get(code, code)}" for code, n in sorted(skipped.items())]
    return f"[files not searched: {'; '.join(parts)}]"


def file_tools(
    ws: Workspace, output_cap: int, max_file_bytes: int, max_line_chars: int
) -> list[Tool]:
    """The six file tools over ``ws``; readers are concurrency-safe, writers exclusive."""
    files = _Files(ws, output_cap, max_file_bytes, max_line_chars)
    return [
        _tool(
            "read_file",
            "Read a UTF-8 text file of the workspace. Lines come back prefixed by their line "
            "number and a tab (the prefix is not part of the file); use offset/limit for long "
            "files. An image file (PNG, JPEG, GIF, WEBP) comes back as the image.",
            ReadFileArgs,
            files.read_any,
            safe=True,
            with_exec=True,
        ),
        _tool(
            "write_file",
            "Write a UTF-8 text file of the workspace, replacing its content; missing parent "
            "directories are created.",
            WriteFileArgs,
            files.write_file,
            safe=False,
            landed=files.write_landed,
        ),
        _tool(
            "edit",
            "Replace an exact string in a file of the workspace. old_string must occur exactly "
            "once (include surrounding lines to make it unique) unless replace_all is set.",
            EditArgs,
            files.edit,
            safe=False,
            landed=files.edit_landed,
        ),
        _tool(
            "list_dir",
            "List a directory of the workspace: directories end with '/', symlinks with '@'.",
            ListDirArgs,
            files.list_dir,
            safe=True,
        ),
        _tool(
            "glob",
            "Find files and directories of the workspace by glob pattern; results are paths "
            "relative to the workspace root, sorted.",
            GlobArgs,
            files.glob,
            safe=True,
        ),
        _tool(
            "grep",
            "Search the text files of the workspace for a regular expression; each match comes "
            "back as 'path:line:text'.",
            GrepArgs,
            files.grep,
            safe=True,
        ),
    ]
