"""A new user's first run with a key (issue 28): README's next step after the quick start
names the exact command that installs the provider SDK it needs, and the error of a missing
SDK names the full command, not cut off (it was ``(pip install 'stee…``)."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from tests.cli.helpers import CLI, Tmux, clean_env, run_cli

pytestmark = pytest.mark.timeout(120)

README = Path(__file__).resolve().parents[2] / "README.md"


def without_openai(tmp_path: Path, **extra: str) -> dict[str, str]:
    """A user's environment where ``import openai`` fails as on a base install."""
    blocker = tmp_path / "blocker" / "openai"
    blocker.mkdir(parents=True)
    (blocker / "__init__.py").write_text("raise ImportError(\"No module named 'openai'\")\n")
    env = clean_env(tmp_path, None, **extra)
    env["PYTHONPATH"] = os.pathsep.join([str(blocker.parent), env.get("PYTHONPATH", "")])
    return env


async def test_a_missing_sdk_names_the_whole_command(tmp_path: Path) -> None:
    env = without_openai(tmp_path, DEEPSEEK_API_KEY="sk-test")
    code, out, err = await run_cli("run", "hi", "--store", "memory://", env=env, cwd=tmp_path)
    said = " ".join((out + err).split())
    assert code == 1, said
    assert "provider 'deepseek' is unavailable" in said
    assert "pip install 'openai>=1.66', the extra steerloop[openai]" in said
    assert "Traceback" not in said


async def test_chat_shows_the_whole_command_in_the_terminal(tmp_path: Path, tmux: Tmux) -> None:
    env = without_openai(tmp_path, DEEPSEEK_API_KEY="sk-test")
    await tmux.start([*CLI, "chat", "--store", "memory://"], env=env, cwd=tmp_path)
    await tmux.wait_screen("steerloop chat", "deepseek/deepseek-chat")
    await tmux.type("hello")
    screen = await tmux.wait_screen("turn 1 error")
    assert "pip install 'openai>=1.66', the extra steerloop[openai]" in " ".join(screen.split())
    await tmux.send("C-d")


def test_readme_next_step_says_the_exact_install_command() -> None:
    """After the two quick-start commands, the next step with a key installs the SDK the
    provider needs with the checkout's own extra, then runs chat."""
    text = README.read_text(encoding="utf-8")
    quick = text[text.index("## Quick start") : text.index("## Using it")]
    assert re.search(r'pip install -e "\.\[openai\]" && DEEPSEEK_API_KEY=\S+ steerloop chat', quick)
