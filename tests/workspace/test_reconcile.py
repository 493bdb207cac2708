"""``write_file`` and ``edit`` reconcile an unknown outcome from the file alone (issue 24);
``shell`` cannot and has no ``reconcile``.

A write is reported done only when the file shows it: ``write_file`` by the content's hash,
``edit`` when the file is this edit's result and not a text it would still apply to.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from hypothesis import assume, given
from hypothesis import strategies as st

from steerloop import ToolResult
from steerloop.messages import ToolCallBlock
from steerloop.tools import Tool
from steerloop.workspace._reconcile import edit_landed, write_landed

from .conftest import make_exec, run, text


def reconcile(tool: Tool, **args: Any) -> ToolResult | None:
    """Ask ``tool``'s reconcile as recovery does (validated arguments, the call block)."""
    assert tool.reconcile is not None
    block = ToolCallBlock(id="c1", name=tool.name, arguments="{}")
    answer = tool.reconcile(block, make_exec(tool, tool.validate(args)))
    assert answer is None or isinstance(answer, ToolResult)
    return answer


def test_only_the_writers_with_a_file_to_show_reconcile(tools: dict[str, Tool]) -> None:
    """``write_file`` and ``edit`` reconcile; ``shell`` does not (a command leaves nothing
    that says whether it ran); readers never need to."""
    assert {name for name, tool in tools.items() if tool.reconcile is not None} == {
        "write_file",
        "edit",
    }


async def test_write_file_landed_is_confirmed(root: Path, tools: dict[str, Tool]) -> None:
    """After the write, the file holds exactly the content: a success naming the file."""
    await run(tools["write_file"], path="a/b.txt", content="hello\n")
    answer = reconcile(tools["write_file"], path="a/b.txt", content="hello\n")
    assert answer is not None and not answer.is_error
    assert text(answer) == (
        "wrote a/b.txt (6 bytes); confirmed at recovery: the file holds exactly this content"
    )


def test_write_file_not_landed_stays_unknown(root: Path, tools: dict[str, Tool]) -> None:
    """Missing file, old content, a torn (shorter) write, a longer file, a directory, a path
    outside the root: all unknown (``None``)."""
    tool = tools["write_file"]
    assert reconcile(tool, path="new.txt", content="x") is None
    (root / "old.txt").write_text("before")
    assert reconcile(tool, path="old.txt", content="after!") is None
    (root / "torn.txt").write_text("hel")
    assert reconcile(tool, path="torn.txt", content="hello") is None
    (root / "long.txt").write_text("hello world")
    assert reconcile(tool, path="long.txt", content="hello") is None
    (root / "dir").mkdir()
    assert reconcile(tool, path="dir", content="x") is None
    assert reconcile(tool, path="../outside/secret.txt", content="SECRET\n") is None


def test_write_file_refuses_a_hard_linked_file(root: Path, tools: dict[str, Tool]) -> None:
    """The confinement rules of the body hold for its reconcile (a second name may lie
    outside the root)."""
    (root / "linked.txt").write_text("same")
    os.link(root / "linked.txt", root / "other.txt")
    assert reconcile(tools["write_file"], path="linked.txt", content="same") is None


async def test_edit_landed_is_confirmed(root: Path, tools: dict[str, Tool]) -> None:
    """After the edit the file reads as the edit left it; before it, the edit still applies
    (unknown)."""
    (root / "f.py").write_text("x = 1\ny = 2\n")
    edit = tools["edit"]
    args: dict[str, Any] = {"path": "f.py", "old_string": "y = 2", "new_string": "y = 3"}
    assert reconcile(edit, **args) is None
    await run(edit, None, **args)
    answer = reconcile(edit, **args)
    assert answer is not None
    assert text(answer) == (
        "edited f.py; confirmed at recovery: the file reads as it does after this edit"
    )


def test_edit_of_a_file_that_is_gone_or_binary_stays_unknown(
    root: Path, tools: dict[str, Tool]
) -> None:
    edit = tools["edit"]
    assert reconcile(edit, path="gone.py", old_string="a", new_string="b") is None
    (root / "bin").write_bytes(b"\xff\xfe b")
    assert reconcile(edit, path="bin", old_string="a", new_string="b") is None


def test_write_landed_compares_content() -> None:
    assert write_landed("é".encode(), "é")
    assert not write_landed(b"e", "é")
    assert not write_landed(b"", "x")


def test_edit_landed_cases() -> None:
    """The edges: a replacement containing its target is undecidable once it occurs once;
    ``replace_all`` leaves no target; a deletion is judged by what is left."""
    assert edit_landed("a = 2", "a = 1", "a = 2", False)
    assert not edit_landed("a = 1", "a = 1", "a = 2", False)  # the edit would still apply
    assert not edit_landed("ab", "a", "ab", False)  # "a" -> "ab" leaves one "a": undecidable
    assert edit_landed("b c", "a", "b", False)  # what "a c" became (or was already)
    assert edit_landed("b b", "a", "b", True)  # every "a" gone, "b"s in their place
    assert not edit_landed("a b", "a", "b", True)  # an "a" is left: not (all) done
    assert edit_landed("xy", "-", "", True)  # deletion: no "-" left
    assert not edit_landed("x-y", "-", "", True)


@given(
    prefix=st.text(alphabet="ab\n", max_size=12),
    suffix=st.text(alphabet="ab\n", max_size=12),
    old=st.text(alphabet="abc", min_size=1, max_size=3),
    new=st.text(alphabet="abcd", max_size=3),
)
def test_an_applied_edit_is_never_mistaken_for_a_pending_one(
    prefix: str, suffix: str, old: str, new: str
) -> None:
    """For any text the edit accepts (exactly one ``old``): the text itself is never
    reported as landed, and its edited form is reported landed exactly when it does not
    itself contain ``old`` exactly once (then it could be a text still to edit)."""
    before = prefix + old + suffix
    assume(before.count(old) == 1 and old != new)
    after = before.replace(old, new)
    assert not edit_landed(before, old, new, False)
    assert edit_landed(after, old, new, False) == (after.count(old) != 1)
