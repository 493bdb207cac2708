"""A listener or an emission that does not fit its typed hook handle is a type error, and
``serial``/``waterfall`` results are typed by the handle (``steerloop.hooks``).

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

from steerloop import AgentScope, PreStepDecision, Runtime, ToolDecision, hooks
from steerloop.hooks import (
    ClaimedPayload, HookBus, PreStepPayload, StatusPayload, ToolHookPayload,
)


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


async def emit(
    bus: HookBus,
    status: StatusPayload,
    step: PreStepPayload,
    tool: ToolHookPayload,
    default: Callable[[], Awaitable[PreStepDecision]],
) -> None:
    bus.emit(hooks.STATUS, status)
    decision: ToolDecision | None = await bus.serial(hooks.TOOLS_PRE_EXECUTE, tool)
    entered: PreStepDecision = await bus.waterfall(hooks.PRE_STEP, step, default)
    sure: ToolDecision = await bus.serial(hooks.TOOLS_PRE_EXECUTE, tool)  # wrong
    other: ToolDecision = await bus.waterfall(hooks.PRE_STEP, step, default)  # wrong
    bus.emit(hooks.STATUS, step)  # wrong
    await bus.serial(hooks.TOOLS_PRE_EXECUTE, status)  # wrong
    await bus.waterfall(hooks.PRE_STEP, tool, default)  # wrong
    bus.emit("agent/status", status)  # wrong
    await bus.serial("tools/pre-execute", tool)  # wrong
"""


def test_listeners_and_emissions_are_checked_against_the_handle(
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
    assert all("snippet.py" in e for e in errors), stdout
    # A listener, handle or default of the wrong type is an argument error; a result is typed
    # by the handle (``serial`` may be ``None``); a payload of another hook leaves no type that
    # fits both the handle and the payload.
    for error in errors:
        code = error.rsplit("  ", 1)[-1]
        assert code in {"[arg-type]", "[assignment]", "[misc]"}, error
        assert code != "[misc]" or "Cannot infer value of type parameter" in error, error
    assert status == 1
