"""Issue 11 items 8-10: hostile arguments to the file tools (catastrophic patterns, huge
lines and files, hard links out of the root). Each test failed against the code before the
fix: ``re`` backtracked for minutes, whole lines were read into memory, hard links were
followed."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import tracemalloc
from pathlib import Path

import pytest

from steerloop.tools import Tool
from steerloop.workspace import workspace_tools

from .conftest import code, run, text

CHILD_TIMEOUT = 60.0


def run_in_child(root: Path, tool: str, args: dict[str, object]) -> str:
    """Run one tool call in a child interpreter, bounded by ``CHILD_TIMEOUT``.

    A backtracking regex holds the GIL, so nothing inside the test process (``wait_for``,
    pytest-timeout) could interrupt it; the child can be killed from outside.
    """
    script = textwrap.dedent(
        f"""
        import asyncio
        from steerloop import AbortController
        from steerloop.tools import ToolExec
        from steerloop.workspace import workspace_tools

        tool = next(t for t in workspace_tools({str(root)!r}) if t.name == {tool!r})
        args = {args!r}
        exec = ToolExec(call_id="c1", name=tool.name, arguments=args, raw_arguments="",
                        signal=AbortController().signal, agent=None)
        result = asyncio.run(tool.execute(tool.validate(args), exec))
        print(result if isinstance(result, str) else result.content, end="")
        """
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    try:
        done = subprocess.run(
            [sys.executable, "-c", script],
            capture_output=True,
            text=True,
            timeout=CHILD_TIMEOUT,
            env=env,
        )
    except subprocess.TimeoutExpired:
        raise AssertionError(f"{tool}{args} did not return within {CHILD_TIMEOUT}s") from None
    assert done.returncode == 0, done.stderr
    return done.stdout


# --- item 8: patterns ----------------------------------------------------------------------


def test_catastrophic_regex_returns(root: Path) -> None:
    """``(a+)+$`` against a line of 40 ``a`` and a ``!`` (exponential for a backtracking
    engine: the 29-character case stalled 13-22 s) returns with no match."""
    (root / "a.txt").write_text("a" * 40 + "!\nplain\n")
    assert run_in_child(root, "grep", {"pattern": "(a+)+$"}) == "(no matches)"
    assert run_in_child(root, "grep", {"pattern": "(a+)+!$"}) == "a.txt:1:" + "a" * 40 + "!"


def test_catastrophic_glob_returns(root: Path) -> None:
    """``*a*a*a*a*a*a*a*a*b`` against an 80-character name (never returned before)."""
    (root / ("a" * 80)).write_text("x")
    (root / ("a" * 8 + "b")).write_text("x")
    assert run_in_child(root, "glob", {"pattern": "*a*a*a*a*a*a*a*a*b"}) == "aaaaaaaab"
    assert run_in_child(root, "grep", {"pattern": "x", "glob": "*a*a*a*a*a*a*a*a*b"}) == (
        "aaaaaaaab:1:x"
    )


async def test_patterns_needing_backtracking_are_refused(
    tools: dict[str, Tool], root: Path
) -> None:
    """Backreferences and lookaround are INVALID_PATTERN, saying which syntax is taken."""
    (root / "a.txt").write_text("aa\n")
    for pattern in (r"(a)\1", r"a(?=a)", r"(?<!b)a"):
        result = await run(tools["grep"], pattern=pattern)
        assert code(result) == "INVALID_PATTERN", pattern
        assert "RE2 syntax" in text(result)


async def test_ignore_case_and_classes_still_work(tools: dict[str, Tool], root: Path) -> None:
    (root / "a.txt").write_text("Hello World\nhello\n")
    out = text(await run(tools["grep"], pattern=r"^hel+o\b", ignore_case=True))
    assert out == "a.txt:1:Hello World\na.txt:2:hello"


# --- item 9: bounded reads -----------------------------------------------------------------

ONE_LINE = 4 * 1024 * 1024  # a 4 MiB file without a newline


def small_limits(root: Path) -> dict[str, Tool]:
    tools = workspace_tools(root, max_file_bytes=8 * 1024 * 1024, max_line_chars=100)
    return {t.name: t for t in tools}


async def peak_of(coro: object) -> tuple[object, int]:
    """Run ``coro`` under tracemalloc; its result and the peak of traced allocations."""
    tracemalloc.start()
    try:
        result = await coro  # type: ignore[misc]
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return result, peak


async def test_read_file_of_one_huge_line_is_bounded(root: Path) -> None:
    """``read_file(limit=1)`` of a 4 MiB line keeps ``max_line_chars`` and reads the rest in
    chunks (before: the whole line was decoded into memory)."""
    tools = small_limits(root)
    (root / "big.txt").write_bytes(b"y" * ONE_LINE)
    result, peak = await peak_of(run(tools["read_file"], path="big.txt", limit=1))
    out = text(result)  # type: ignore[arg-type]
    assert out == "     1\t" + "y" * 100 + f"… [line cut: {ONE_LINE - 100} more bytes]"
    assert peak < 1024 * 1024, peak


async def test_grep_of_one_huge_line_is_bounded(root: Path) -> None:
    """grep reads an overlong line in chunks and searches only its first ``max_line_chars``."""
    tools = small_limits(root)
    (root / "big.txt").write_bytes(b"needle" + b"y" * ONE_LINE + b"\nneedle too\n")
    result, peak = await peak_of(run(tools["grep"], pattern="needle"))
    assert text(result).split("\n") == [  # type: ignore[arg-type]
        "big.txt:1:needle" + "y" * 94,
        "big.txt:2:needle too",
    ]
    assert peak < 1024 * 1024, peak
    # The tail of the long line is not searched.
    (root / "big.txt").write_bytes(b"y" * ONE_LINE + b"needle\n")
    assert text(await run(tools["grep"], pattern="needle")) == "(no matches)"


async def test_files_over_the_size_limit_are_refused(root: Path) -> None:
    """read_file and edit refuse a file over ``max_file_bytes`` with FILE_TOO_LARGE; grep
    skips it and says so; the file is unchanged."""
    tools = {t.name: t for t in workspace_tools(root, max_file_bytes=1000)}
    content = "needle\n" * 200  # 1,400 bytes
    (root / "big.txt").write_text(content)
    (root / "small.txt").write_text("needle\n")
    for name, args in [
        ("read_file", {"path": "big.txt", "limit": 1}),
        (
            "edit",
            {"path": "big.txt", "old_string": "needle", "new_string": "x", "replace_all": True},
        ),
        ("grep", {"pattern": "needle", "path": "big.txt"}),
    ]:
        result = await run(tools[name], **args)  # type: ignore[arg-type]
        assert code(result) == "FILE_TOO_LARGE", name
        assert "1400 bytes, over the 1000-byte limit" in text(result), name
    assert text(await run(tools["grep"], pattern="needle")).split("\n") == [
        "small.txt:1:needle",
        "[files not searched: 1 over the 1000-byte limit]",
    ]
    assert (root / "big.txt").read_text() == content


async def test_a_cut_line_may_end_inside_a_character(root: Path) -> None:
    """A line cut at the byte bound inside a multi-byte character is still UTF-8 text."""
    tools = small_limits(root)
    (root / "u.txt").write_text("é" * 1000 + "\n")
    out = text(await run(tools["read_file"], path="u.txt"))
    assert out == "     1\t" + "é" * 100 + "… [line cut: 1800 more bytes]"


# --- item 10: hard links -------------------------------------------------------------------


@pytest.fixture
def linked(root: Path) -> Path:
    """``root/x`` is a hard link to ``outside/secret.txt``."""
    os.link(root.parent / "outside" / "secret.txt", root / "x")
    return root / "x"


async def test_hard_link_is_not_read(tools: dict[str, Tool], root: Path, linked: Path) -> None:
    for name, args in [
        ("read_file", {"path": "x"}),
        ("grep", {"pattern": "SECRET", "path": "x"}),
    ]:
        result = await run(tools[name], **args)  # type: ignore[arg-type]
        assert code(result) == "HARD_LINKED", name
        assert "SECRET" not in text(result)
        assert "2 hard links" in text(result)
    out = text(await run(tools["grep"], pattern="SECRET"))
    assert out == "[files not searched: 1 hard-linked (other names may be outside the workspace)]"


async def test_hard_link_is_not_written(tools: dict[str, Tool], root: Path, linked: Path) -> None:
    secret = root.parent / "outside" / "secret.txt"
    for name, args in [
        ("write_file", {"path": "x", "content": "pwned\n"}),
        ("edit", {"path": "x", "old_string": "SECRET", "new_string": "pwned"}),
    ]:
        result = await run(tools[name], **args)  # type: ignore[arg-type]
        assert code(result) == "HARD_LINKED", name
    assert secret.read_text() == "SECRET\n"
    assert linked.read_text() == "SECRET\n"


async def test_a_single_link_file_is_still_written(tools: dict[str, Tool], root: Path) -> None:
    """Once the other name is gone the file has one link and is an ordinary file again."""
    (root / "a.txt").write_text("one\n")
    os.link(root / "a.txt", root / "b.txt")
    assert code(await run(tools["write_file"], path="a.txt", content="two\n")) == "HARD_LINKED"
    (root / "b.txt").unlink()
    assert code(await run(tools["write_file"], path="a.txt", content="two\n")) is None
    assert (root / "a.txt").read_text() == "two\n"
