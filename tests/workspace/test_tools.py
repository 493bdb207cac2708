"""The file tools: confinement to the root, and read/write/edit/list/glob/grep behaviour."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pydantic
import pytest

from steerloop import user_message
from steerloop.messages import ToolResultMessage
from steerloop.testing import text_response, tool_call_response
from steerloop.tools import Tool
from steerloop.workspace import WRITER_TOOLS, workspace_tools

from ..conftest import Harness, compact, label, settle
from .conftest import code, run, text

OUTSIDE = "PATH_OUTSIDE_WORKSPACE"


def write(path: Path, content: str | bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content)
    return path


# --- the tool set ------------------------------------------------------------------------


def test_tool_set_and_concurrency_classes(tools: dict[str, Tool]) -> None:
    """Readers are concurrency-safe; writers are exclusive (the default)."""
    assert list(tools) == ["read_file", "write_file", "edit", "list_dir", "glob", "grep", "shell"]
    safe = {name for name, tool in tools.items() if tool.is_concurrency_safe({})}
    assert safe == {"read_file", "list_dir", "glob", "grep"}
    assert set(tools) - safe == WRITER_TOOLS


def test_every_parameter_is_described_in_the_schema(tools: dict[str, Tool]) -> None:
    """The JSON schema the model sees describes every field and forbids unknown ones."""
    for tool in tools.values():
        schema = tool.parameters
        assert schema["type"] == "object", tool.name
        assert schema["additionalProperties"] is False, tool.name
        assert schema["properties"], tool.name
        for field, spec in schema["properties"].items():
            assert spec.get("description"), f"{tool.name}.{field}"
        assert tool.description


def test_bad_root_and_limits_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="does not exist"):
        workspace_tools(tmp_path / "missing")
    with pytest.raises(ValueError, match="not a directory"):
        workspace_tools(write(tmp_path / "file", "x"))
    with pytest.raises(ValueError, match="shell_timeout"):
        workspace_tools(tmp_path, shell_timeout=0)
    with pytest.raises(ValueError, match="output_cap"):
        workspace_tools(tmp_path, output_cap=-1)
    with pytest.raises(ValueError, match="output_cap"):
        workspace_tools(tmp_path, output_cap=1.5)  # type: ignore[arg-type]


def test_root_given_through_a_symlink_is_resolved(tmp_path: Path) -> None:
    """A root reached through a symlink works: its resolved form is the confinement."""
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "alias").symlink_to(real)
    assert workspace_tools(tmp_path / "alias")


# --- confinement ------------------------------------------------------------------------

# (tool, arguments) with "{p}" standing for the path under test.
PATH_CALLS: list[tuple[str, dict[str, Any]]] = [
    ("read_file", {"path": "{p}"}),
    ("write_file", {"path": "{p}", "content": "pwned\n"}),
    ("edit", {"path": "{p}", "old_string": "SECRET", "new_string": "pwned"}),
    ("list_dir", {"path": "{p}"}),
    ("grep", {"pattern": "SECRET", "path": "{p}"}),
    ("glob", {"pattern": "*", "path": "{p}"}),
]


def _fill(args: dict[str, Any], path: str) -> dict[str, Any]:
    return {k: v.replace("{p}", path) if isinstance(v, str) else v for k, v in args.items()}


def _outside_untouched(root: Path) -> None:
    outside = root.parent / "outside"
    assert sorted(p.name for p in outside.iterdir()) == ["secret.txt"]
    assert (outside / "secret.txt").read_text() == "SECRET\n"


@pytest.mark.parametrize(("name", "args"), PATH_CALLS, ids=[c[0] for c in PATH_CALLS])
@pytest.mark.parametrize("target", ["secret.txt", "."])
async def test_dotdot_escape_is_refused(
    tools: dict[str, Tool], root: Path, name: str, args: dict[str, Any], target: str
) -> None:
    result = await run(tools[name], **_fill(args, f"../outside/{target}"))
    assert result.is_error
    assert code(result) == OUTSIDE
    assert "outside the workspace" in text(result)
    _outside_untouched(root)


@pytest.mark.parametrize(("name", "args"), PATH_CALLS, ids=[c[0] for c in PATH_CALLS])
async def test_absolute_path_outside_is_refused(
    tools: dict[str, Tool], root: Path, name: str, args: dict[str, Any]
) -> None:
    result = await run(tools[name], **_fill(args, str(root.parent / "outside" / "secret.txt")))
    assert code(result) == OUTSIDE
    _outside_untouched(root)


async def test_dotdot_that_comes_back_inside_is_allowed(tools: dict[str, Tool], root: Path) -> None:
    write(root / "a.txt", "hello\n")
    result = await run(tools["read_file"], path="../ws/sub/../a.txt")
    assert not result.is_error
    assert text(result) == "     1\thello"


async def test_absolute_path_inside_is_allowed(tools: dict[str, Tool], root: Path) -> None:
    result = await run(tools["write_file"], path=str(root / "d" / "a.txt"), content="x")
    assert not result.is_error
    assert (root / "d" / "a.txt").read_text() == "x"


@pytest.mark.parametrize(("name", "args"), PATH_CALLS, ids=[c[0] for c in PATH_CALLS])
async def test_symlinked_file_pointing_outside_is_refused(
    tools: dict[str, Tool], root: Path, name: str, args: dict[str, Any]
) -> None:
    (root / "link.txt").symlink_to(root.parent / "outside" / "secret.txt")
    result = await run(tools[name], **_fill(args, "link.txt"))
    assert code(result) == OUTSIDE
    assert "resolves to" in text(result)
    _outside_untouched(root)


@pytest.mark.parametrize(("name", "args"), PATH_CALLS, ids=[c[0] for c in PATH_CALLS])
@pytest.mark.parametrize("below", ["secret.txt", "new/file.txt", "."])
async def test_symlinked_directory_pointing_outside_is_refused(
    tools: dict[str, Tool], root: Path, name: str, args: dict[str, Any], below: str
) -> None:
    """A symlinked parent directory cannot be used to reach (or create) anything outside."""
    (root / "out").symlink_to(root.parent / "outside", target_is_directory=True)
    result = await run(tools[name], **_fill(args, f"out/{below}"))
    assert code(result) == OUTSIDE
    _outside_untouched(root)


async def test_dangling_symlink_pointing_outside_cannot_be_written(
    tools: dict[str, Tool], root: Path
) -> None:
    (root / "dangling").symlink_to(root.parent / "outside" / "created.txt")
    result = await run(tools["write_file"], path="dangling", content="pwned")
    assert code(result) == OUTSIDE
    _outside_untouched(root)


async def test_symlinks_that_stay_inside_are_allowed(tools: dict[str, Tool], root: Path) -> None:
    write(root / "real" / "a.txt", "one\ntwo\n")
    (root / "alias.txt").symlink_to(root / "real" / "a.txt")
    (root / "dir").symlink_to("real", target_is_directory=True)  # relative link
    assert text(await run(tools["read_file"], path="alias.txt")) == "     1\tone\n     2\ttwo"
    assert text(await run(tools["read_file"], path="dir/a.txt")) == "     1\tone\n     2\ttwo"
    assert text(await run(tools["list_dir"], path="dir")) == "a.txt"
    result = await run(tools["edit"], path="alias.txt", old_string="two", new_string="2")
    assert not result.is_error
    assert (root / "real" / "a.txt").read_text() == "one\n2\n"
    assert not (await run(tools["write_file"], path="dir/b.txt", content="b")).is_error
    assert (root / "real" / "b.txt").read_text() == "b"


async def test_walks_do_not_follow_links_outside(tools: dict[str, Tool], root: Path) -> None:
    """glob and grep over the root neither list nor read what links outside point to."""
    write(root / "inside.txt", "SECRET inside\n")
    (root / "link.txt").symlink_to(root.parent / "outside" / "secret.txt")
    (root / "out").symlink_to(root.parent / "outside", target_is_directory=True)
    assert text(await run(tools["grep"], pattern="SECRET")) == "inside.txt:1:SECRET inside"
    assert text(await run(tools["glob"], pattern="**/*")) == "inside.txt"
    assert text(await run(tools["glob"], pattern="**/secret.txt")) == "(no matches)"


async def test_refusal_reaches_the_model_through_the_agent(h: Harness, root: Path) -> None:
    """Through the pipeline the refusal is the call's result, with its own code."""
    for tool in workspace_tools(root):
        h.rt.tools.register(tool)
    agent = await h.agent(
        tool_call_response("c1", "read_file", {"path": "../outside/secret.txt"}),
        text_response("done"),
    )
    agent.followup(user_message("u1"))
    await settle(agent)
    assert compact(agent.session, only=("call(", "result(", "T-")) == [
        "call(c1)",
        f"result(c1,{OUTSIDE})",
        "T-1:completed",
    ]
    message = h.adapter.requests[1].messages[-1]
    assert isinstance(message, ToolResultMessage)
    assert message.is_error
    assert "outside the workspace" in label(message)
    assert "SECRET" not in label(message)


# --- read_file ----------------------------------------------------------------------------


async def test_read_file_numbers_lines(tools: dict[str, Tool], root: Path) -> None:
    write(root / "a.txt", "alpha\r\nbeta\n\ngamma")
    assert text(await run(tools["read_file"], path="a.txt")) == (
        "     1\talpha\n     2\tbeta\n     3\t\n     4\tgamma"
    )


async def test_read_file_offset_and_limit(tools: dict[str, Tool], root: Path) -> None:
    write(root / "a.txt", "".join(f"line{i}\n" for i in range(1, 11)))
    result = await run(tools["read_file"], path="a.txt", offset=4, limit=2)
    assert text(result) == "     4\tline4\n     5\tline5\n[lines 4-5 of 10]"
    result = await run(tools["read_file"], path="a.txt", offset=9)
    assert text(result) == "     9\tline9\n    10\tline10\n[lines 9-10 of 10]"
    result = await run(tools["read_file"], path="a.txt", offset=20)
    assert not result.is_error
    assert text(result) == "(no lines from line 20: a.txt has 10 lines)"


async def test_read_file_errors(tools: dict[str, Tool], root: Path) -> None:
    write(root / "bin.dat", b"\x89PNG\x00\x01\x02")
    write(root / "latin1.txt", "caf\xe9\n".encode("latin-1"))
    (root / "sub").mkdir()
    cases = {
        "missing.txt": ("NOT_FOUND", "does not exist"),
        "sub": ("NOT_A_FILE", "is a directory"),
        "bin.dat": ("BINARY_FILE", "binary file"),
        "latin1.txt": ("BINARY_FILE", "not valid UTF-8"),
    }
    for path, (expected, words) in cases.items():
        result = await run(tools["read_file"], path=path)
        assert result.is_error, path
        assert code(result) == expected, path
        assert words in text(result), path


async def test_read_file_empty_and_invalid_arguments(tools: dict[str, Tool], root: Path) -> None:
    write(root / "empty.txt", "")
    assert text(await run(tools["read_file"], path="empty.txt")) == "(empty.txt is empty)"
    with pytest.raises(pydantic.ValidationError):
        tools["read_file"].validate({"path": "a", "offset": 0})
    with pytest.raises(pydantic.ValidationError):
        tools["read_file"].validate({"path": "a", "bogus": 1})


async def test_read_file_output_is_capped(root: Path) -> None:
    tools = {t.name: t for t in workspace_tools(root, output_cap=100)}
    write(root / "big.txt", "".join(f"{i:03}-----------\n" for i in range(1, 101)))
    out = text(await run(tools["read_file"], path="big.txt"))
    lines = out.split("\n")
    assert lines[-1] == (
        "[output capped at 100 characters: lines 1-4 of 100; use offset to read on]"
    )
    assert lines[:-1] == [f"{i:>6}\t{i:03}-----------" for i in range(1, 5)]


# --- write_file and edit --------------------------------------------------------------------


async def test_write_file_creates_parents_and_overwrites(
    tools: dict[str, Tool], root: Path
) -> None:
    result = await run(tools["write_file"], path="a/b/c.txt", content="héllo\n")
    assert text(result) == "created a/b/c.txt (7 bytes)"
    assert (root / "a" / "b" / "c.txt").read_bytes() == "héllo\n".encode()
    result = await run(tools["write_file"], path="a/b/c.txt", content="")
    assert text(result) == "overwrote a/b/c.txt (0 bytes)"
    assert (root / "a" / "b" / "c.txt").read_bytes() == b""


async def test_write_file_onto_a_directory_is_refused(tools: dict[str, Tool], root: Path) -> None:
    (root / "sub").mkdir()
    for path in ("sub", "."):
        result = await run(tools["write_file"], path=path, content="x")
        assert code(result) == "NOT_A_FILE", path
    assert list((root / "sub").iterdir()) == []


async def test_edit_replaces_a_unique_string(tools: dict[str, Tool], root: Path) -> None:
    write(root / "a.py", "def f():\r\n    return 1\r\n")
    result = await run(tools["edit"], path="a.py", old_string="return 1", new_string="return 2")
    assert text(result) == "replaced 1 occurrence in a.py"
    assert (root / "a.py").read_bytes() == b"def f():\r\n    return 2\r\n"  # line endings kept


async def test_edit_refuses_missing_and_ambiguous_strings(
    tools: dict[str, Tool], root: Path
) -> None:
    write(root / "a.txt", "x = 1\nx = 1\n")
    result = await run(tools["edit"], path="a.txt", old_string="y = 1", new_string="y = 2")
    assert code(result) == "NO_MATCH"
    assert "not found" in text(result)
    result = await run(tools["edit"], path="a.txt", old_string="x = 1", new_string="x = 2")
    assert code(result) == "AMBIGUOUS_MATCH"
    assert "occurs 2 times" in text(result)
    assert (root / "a.txt").read_text() == "x = 1\nx = 1\n"


async def test_edit_replace_all(tools: dict[str, Tool], root: Path) -> None:
    write(root / "a.txt", "x = 1\nx = 1\n")
    result = await run(
        tools["edit"], path="a.txt", old_string="1", new_string="22", replace_all=True
    )
    assert text(result) == "replaced 2 occurrences in a.txt"
    assert (root / "a.txt").read_text() == "x = 22\nx = 22\n"


async def test_edit_errors(tools: dict[str, Tool], root: Path) -> None:
    write(root / "bin.dat", b"\x00abc")
    result = await run(tools["edit"], path="missing.txt", old_string="a", new_string="b")
    assert code(result) == "NOT_FOUND"
    result = await run(tools["edit"], path="bin.dat", old_string="abc", new_string="x")
    assert code(result) == "BINARY_FILE"
    assert (root / "bin.dat").read_bytes() == b"\x00abc"
    with pytest.raises(pydantic.ValidationError):
        tools["edit"].validate({"path": "a", "old_string": "", "new_string": "x"})


# --- list_dir and glob --------------------------------------------------------------------------


async def test_list_dir(tools: dict[str, Tool], root: Path) -> None:
    write(root / "b.txt", "")
    write(root / "a" / "x.txt", "")
    write(root / ".hidden", "")
    (root / "link").symlink_to("b.txt")
    (root / "empty").mkdir()
    assert text(await run(tools["list_dir"])) == ".hidden\na/\nb.txt\nempty/\nlink@"
    assert text(await run(tools["list_dir"], path="a")) == "x.txt"
    assert text(await run(tools["list_dir"], path="empty")) == "(empty is empty)"
    assert code(await run(tools["list_dir"], path="b.txt")) == "NOT_A_DIRECTORY"
    assert code(await run(tools["list_dir"], path="nope")) == "NOT_FOUND"


@pytest.fixture
def tree(root: Path) -> Path:
    for path in ("top.py", "README.md", "src/a.py", "src/pkg/b.py", "src/pkg/c.txt", ".git/x.py"):
        write(root / path, "")
    return root


@pytest.mark.parametrize(
    ("pattern", "path", "expected"),
    [
        ("*.py", ".", ["top.py"]),
        ("**/*.py", ".", ["src/a.py", "src/pkg/b.py", "top.py"]),
        ("src/**/*.py", ".", ["src/a.py", "src/pkg/b.py"]),
        ("./src/*", ".", ["src/a.py", "src/pkg/"]),
        ("*.py", "src", ["src/a.py"]),
        ("src/pkg/?.[pt]*", ".", ["src/pkg/b.py", "src/pkg/c.txt"]),
        ("src/pkg/[!b]*", ".", ["src/pkg/c.txt"]),
        ("README.md", ".", ["README.md"]),
        ("*.rs", ".", ["(no matches)"]),
        ("nope/*.py", ".", ["(no matches)"]),
    ],
)
async def test_glob(
    tools: dict[str, Tool], tree: Path, pattern: str, path: str, expected: list[str]
) -> None:
    assert text(await run(tools["glob"], pattern=pattern, path=path)).split("\n") == expected


async def test_glob_absolute_pattern_inside_and_outside(tools: dict[str, Tool], tree: Path) -> None:
    inside = await run(tools["glob"], pattern=f"{tree}/src/*.py")
    assert text(inside) == "src/a.py"
    outside = await run(tools["glob"], pattern=f"{tree.parent}/outside/*")
    assert code(outside) == OUTSIDE
    assert code(await run(tools["glob"], pattern="../outside/*")) == OUTSIDE
    assert code(await run(tools["glob"], pattern="*/../../outside/*")) == "INVALID_PATTERN"


async def test_glob_output_is_capped(root: Path) -> None:
    tools = {t.name: t for t in workspace_tools(root, output_cap=40)}
    for i in range(10):
        write(root / f"file{i}.txt", "")
    lines = text(await run(tools["glob"], pattern="*.txt")).split("\n")
    assert lines == [
        *(f"file{i}.txt" for i in range(4)),
        "[output capped at 40 characters: 4 of 10 matches shown]",
    ]


# --- grep -------------------------------------------------------------------------------------


async def test_grep_reports_line_numbered_matches(tools: dict[str, Tool], tree: Path) -> None:
    write(tree / "src/a.py", "import os\n\ndef main():\n    os.exit(0)\n")
    write(tree / "notes.txt", "os is an os\n")
    write(tree / "blob.bin", b"os\x00os")
    write(tree / ".git/config", "os\n")
    result = await run(tools["grep"], pattern=r"\bos\b")
    assert text(result).split("\n") == [
        "notes.txt:1:os is an os",
        "src/a.py:1:import os",
        "src/a.py:4:    os.exit(0)",
    ]


async def test_grep_filters(tools: dict[str, Tool], tree: Path) -> None:
    write(tree / "src/a.py", "TODO one\n")
    write(tree / "src/pkg/c.txt", "todo two\n")
    write(tree / "top.py", "TODO three\n")
    grep = tools["grep"]
    assert text(await run(grep, pattern="TODO", glob="*.py")).split("\n") == [
        "src/a.py:1:TODO one",
        "top.py:1:TODO three",
    ]
    assert text(await run(grep, pattern="TODO", glob="src/**")).split("\n") == [
        "src/a.py:1:TODO one"
    ]
    assert text(await run(grep, pattern="todo", path="src", ignore_case=True)).split("\n") == [
        "src/a.py:1:TODO one",
        "src/pkg/c.txt:1:todo two",
    ]
    assert text(await run(grep, pattern="TODO", path="top.py")) == "top.py:1:TODO three"
    assert text(await run(grep, pattern="FIXME")) == "(no matches)"


async def test_grep_errors(tools: dict[str, Tool], root: Path) -> None:
    result = await run(tools["grep"], pattern="(unclosed")
    assert code(result) == "INVALID_PATTERN"
    assert "invalid regex" in text(result)
    assert code(await run(tools["grep"], pattern="x", path="missing")) == "NOT_FOUND"


async def test_grep_output_is_capped(root: Path) -> None:
    tools = {t.name: t for t in workspace_tools(root, output_cap=60)}
    write(root / "a.txt", "hit\n" * 50)
    lines = text(await run(tools["grep"], pattern="hit")).split("\n")
    assert lines == [
        *(f"a.txt:{i}:hit" for i in range(1, 6)),
        "[output capped at 60 characters: 5 matches shown; narrow the search]",
    ]


async def test_grep_truncates_long_lines(tools: dict[str, Tool], root: Path) -> None:
    write(root / "long.txt", "x" * 2000 + "\n")
    out = text(await run(tools["grep"], pattern="x"))
    assert out == "long.txt:1:" + "x" * 500 + "…"


async def test_special_files_are_not_opened(tools: dict[str, Tool], root: Path) -> None:
    """A FIFO is refused by read/write/edit and skipped by grep (opening it would block)."""
    os.mkfifo(root / "pipe")
    write(root / "a.txt", "needle\n")
    for name, args in [
        ("read_file", {"path": "pipe"}),
        ("write_file", {"path": "pipe", "content": "x"}),
        ("edit", {"path": "pipe", "old_string": "a", "new_string": "b"}),
        ("grep", {"pattern": "needle", "path": "pipe"}),
    ]:
        result = await run(tools[name], **args)  # type: ignore[arg-type]
        assert code(result) == "NOT_A_FILE", name
        assert "not a regular file" in text(result), name
    assert text(await run(tools["grep"], pattern="needle")) == "a.txt:1:needle"
