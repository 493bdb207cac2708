"""The names README and docs/ARCHITECTURE.md give the tools are the names the model sees."""

from __future__ import annotations

from pathlib import Path

from steerloop.goals import install_goals
from steerloop.testing import ScriptedAdapter
from steerloop.workspace import workspace_tools
from tests.support import open_harness

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", ROOT / "docs" / "ARCHITECTURE.md"]


def test_the_workspace_tools_are_named_as_registered(tmp_path: Path) -> None:
    names = [tool.name for tool in workspace_tools(tmp_path)]
    assert names == ["read_file", "write_file", "edit", "list_dir", "glob", "grep", "shell"]
    for doc in DOCS:
        text = doc.read_text(encoding="utf-8")
        assert ", ".join(names) in " ".join(text.split()), doc.name
        assert "read/write/edit/list" not in text


async def test_the_goal_tools_are_named_as_registered() -> None:
    async with open_harness() as harness:
        harness.rt.llm.register_adapter(["mock"], ScriptedAdapter([]))
        install_goals(harness.rt)
        names = {tool.name for tool in harness.rt.tools.list()}
    goal_tools = ["read_goal", "complete_goal", "block_goal"]
    assert set(goal_tools) <= names
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert ", ".join(goal_tools) in readme
    assert "await driver.when_settled(agent)" in readme  # how to wait for a goal
    architecture = (ROOT / "docs" / "ARCHITECTURE.md").read_text(encoding="utf-8")
    assert " / ".join(goal_tools) in architecture
