"""The loop takes ids from its runtime's services, not from the process-wide factory."""

from __future__ import annotations

from steerloop import AgentOptions, Runtime, user_message
from steerloop._ids import counting_ids
from steerloop.testing import ScriptedAdapter, text_response

from ..conftest import settle


async def _loop_ids(rt: Runtime) -> list[str]:
    adapter = ScriptedAdapter()
    rt.llm.register_adapter(["mock"], adapter)
    adapter.add(text_response("hi"))
    handle = await rt.agents.create(
        session_id="s-1", agent_options=AgentOptions(provider="mock", model="m")
    )
    handle.agent.followup(user_message("u1"))
    await settle(handle.agent)
    ids = [
        e.data.message.id
        for e in handle.agent.session.events
        if e.type in ("system/message", "assistant/message")
    ]
    await handle.dispose()
    return ids


async def test_each_runtime_numbers_the_loop_messages_with_its_own_ids() -> None:
    """``Runtime(ids=...)`` reaches the loop through ``services.ids``: two runtimes, two
    independent counters, neither installed process-wide."""
    first = Runtime(ids=counting_ids())
    second = Runtime(ids=counting_ids())
    try:
        a = await _loop_ids(first)
        b = await _loop_ids(second)
    finally:
        await first.close()
        await second.close()
    assert a == b
    assert len(a) == 2 and all(i.startswith("msg_") and i[4:].isdigit() for i in a)
