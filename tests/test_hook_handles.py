"""Typed hook handles (``steerloop.hooks``): each is its hook's name, with the bus's mode, and
a listener registered through one is called like one registered by the string name."""

from __future__ import annotations

import ast
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path

from steerloop import AgentOptions, PreStepDecision, Runtime, hooks, user_message
from steerloop.hooks import PreStepPayload, StatusPayload
from steerloop.testing import ScriptedAdapter, text_response


def test_one_handle_per_hook_of_the_bus_with_its_mode() -> None:
    """Every hook of a runtime's bus has exactly one handle, and the handle says its mode."""
    handles = {str(handle): handle for handle in hooks.HANDLES}
    assert len(handles) == len(hooks.HANDLES)
    bus = Runtime().hooks
    for name, handle in handles.items():
        assert bus.mode(name) == handle.mode, name
    assert str(hooks.PRE_STEP) == "agent/pre-step" and isinstance(hooks.PRE_STEP, str)
    assert {name: h.mode for name, h in handles.items()} == {
        "agent/created": "emit",
        "agent/disposed": "emit",
        "agent/status": "emit",
        "agent/error": "emit",
        "agent/session-start": "emit",
        "agent/inbox/inserted": "emit",
        "agent/inbox/claimed": "emit",
        "agent/inbox/discarded": "emit",
        "agent/assistant-stream": "emit",
        "agent/pre-step": "waterfall",
        "agent/request": "waterfall",
        "agent/request-error": "waterfall",
        "agent/turn-stopping": "serial",
        "agent/compact": "serial",
        "session/event": "emit",
        "tools/pre-execute": "serial",
        "tools/post-execute": "waterfall",
        "tools/result": "emit",
        "tools/approval-requested": "emit",
        "runtime/closing": "emit",
    }


async def test_listeners_through_handles_run_like_named_ones() -> None:
    seen: list[str] = []

    def on_status(payload: StatusPayload) -> None:
        seen.append(payload.status)

    async def pre_step(
        payload: PreStepPayload, next: Callable[[], Awaitable[PreStepDecision]]
    ) -> PreStepDecision:
        seen.append(f"pre-step {payload.step}")
        return PreStepDecision.enter(payload.messages)

    async with Runtime.open() as rt:
        rt.llm.register_adapter("mock", ScriptedAdapter([text_response("hi")]))
        rt.hooks.on(hooks.STATUS, on_status)
        rt.hooks.on(hooks.PRE_STEP, pre_step)
        handle = await rt.agents.create(
            session_id="s", agent_options=AgentOptions(provider="mock", model="m")
        )
        handle.agent.followup(user_message("go"))
        await handle.agent.when_idle()
    assert seen == ["running", "pre-step 1", "idle"]


SRC = Path(__file__).resolve().parents[1] / "src" / "steerloop"
HANDLE_TYPES = {"EmitHook", "SerialHook", "WaterfallHook"}
# The bus's methods that take a hook first; emission ones accept only a handle (typed).
BUS_METHODS = {"emit", "emit_awaited", "serial", "waterfall", "has", "on", "define", "mode"}


def _calls() -> Iterator[tuple[str, ast.Call]]:
    for path in sorted(SRC.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Call):
                yield f"{path.relative_to(SRC.parent)}:{node.lineno}", node


def _callee(call: ast.Call) -> str:
    func = call.func
    if isinstance(func, ast.Subscript):  # EmitHook[P]("name")
        func = func.value
    if isinstance(func, ast.Attribute):
        return func.attr
    return func.id if isinstance(func, ast.Name) else ""


def test_each_hook_is_declared_once_by_its_handle() -> None:
    """One declaration per hook: its typed handle, constructed once in the library; the
    runtime's handles and the plugins' own hooks are all among them."""
    declared: Counter[str] = Counter()
    for _, call in _calls():
        if _callee(call) in HANDLE_TYPES and call.args:
            arg = call.args[0]
            assert isinstance(arg, ast.Constant) and isinstance(arg.value, str)
            declared[arg.value] += 1
    assert {name for name, count in declared.items() if count > 1} == set()
    assert {str(handle) for handle in hooks.HANDLES} | {
        "llm/retry",
        "context/compaction-failed",
    } == set(declared)


def test_no_hook_is_named_by_a_string_inside_the_library() -> None:
    """Inside ``src/`` a hook is emitted, looked up and listened to through its handle, never
    by a string name (the string names are for users; mypy refuses a ``str`` to ``emit``,
    ``emit_awaited``, ``serial`` and ``waterfall`` anywhere)."""
    by_string = [
        where
        for where, call in _calls()
        if isinstance(call.func, ast.Attribute)
        and call.func.attr in BUS_METHODS
        and call.args
        and isinstance(call.args[0], ast.Constant | ast.JoinedStr)
        and (not isinstance(call.args[0], ast.Constant) or isinstance(call.args[0].value, str))
    ]
    assert by_string == []
