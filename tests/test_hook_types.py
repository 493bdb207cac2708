"""A listener that does not fit its typed hook handle is a type error (``steerloop.hooks``).

mypy runs once over one small snippet: each line marked ``# wrong`` must be reported, and the
well-typed registrations around them must not be. Its cache lives in the system's temporary
directory across runs (incremental, so a warm run takes seconds, not a full analysis).
"""

from __future__ import annotations

import re
import tempfile
from pathlib import Path

import pytest
from mypy import api

ROOT = Path(__file__).resolve().parents[1]

SNIPPET = """\
from collections.abc import Awaitable, Callable

from steerloop import AgentScope, PreStepDecision, Runtime, hooks
from steerloop.agent._decisions import ClaimedPayload, PreStepPayload, StatusPayload


def on_status(payload: StatusPayload) -> None: ...
def on_claimed(payload: ClaimedPayload) -> None: ...
async def pre_step(
    payload: PreStepPayload, next: Callable[[], Awaitable[PreStepDecision]]
) -> PreStepDecision:
    return await next()


def register(rt: Runtime, scope: AgentScope) -> None:
    rt.hooks.on(hooks.STATUS, on_status)
    rt.hooks.on(hooks.PRE_STEP, pre_step)
    rt.hooks.on("agent/status", on_claimed)  # a plain name is not checked
    scope.hooks.on(hooks.INBOX_CLAIMED, on_claimed)
    rt.hooks.on(hooks.STATUS, on_claimed)  # wrong
    rt.hooks.on(hooks.PRE_STEP, on_status)  # wrong
    scope.hooks.on(hooks.STATUS, on_claimed)  # wrong
"""


def test_a_listener_of_the_wrong_payload_type_fails_mypy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    snippet = tmp_path / "snippet.py"
    snippet.write_text(SNIPPET)
    # This tree's sources, not whatever steerloop is installed.
    monkeypatch.setenv("MYPYPATH", str(ROOT / "src"))
    stdout, stderr, status = api.run(
        [
            "--config-file",
            str(ROOT / "pyproject.toml"),
            "--cache-dir",
            str(Path(tempfile.gettempdir()) / "steerloop-hook-types-mypy-cache"),
            "--no-error-summary",
            "--show-error-codes",
            str(snippet),
        ]
    )
    assert stderr == ""
    errors = [line for line in stdout.splitlines() if ": error: " in line]
    lines = {int(m.group(1)) for e in errors if (m := re.match(r".*snippet\.py:(\d+): ", e))}
    wrong = {n for n, text in enumerate(SNIPPET.splitlines(), 1) if text.endswith("# wrong")}
    assert lines == wrong, stdout
    assert all("[arg-type]" in e and "snippet.py" in e for e in errors), stdout
    assert status == 1
