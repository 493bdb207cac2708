"""Typed hook handles (``steerloop.hooks``): each is its hook's name, with the bus's mode, and
a listener registered through one is called like one registered by the string name."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from steerloop import AgentOptions, PreStepDecision, Runtime, hooks, user_message
from steerloop._hooks import HOOK_MODES
from steerloop.agent._decisions import PreStepPayload, StatusPayload
from steerloop.testing import ScriptedAdapter, text_response


def test_one_handle_per_hook_of_the_bus_with_its_mode() -> None:
    """Every hook name of the bus has exactly one handle, and the handle says the bus's mode."""
    handles = {str(handle): handle for handle in hooks.HANDLES}
    assert len(handles) == len(hooks.HANDLES)
    assert set(handles) == set(HOOK_MODES)
    assert {name: h.mode for name, h in handles.items()} == HOOK_MODES
    assert str(hooks.PRE_STEP) == "agent/pre-step" and isinstance(hooks.PRE_STEP, str)


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
