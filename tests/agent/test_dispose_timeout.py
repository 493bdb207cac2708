"""A tool that ignores cancellation cannot hang teardown forever (issue 11, item 12).

``handle.dispose(timeout=...)`` and ``rt.close(timeout=...)``: after the timeout the calls
still running are recorded ``TOOL_OUTCOME_UNKNOWN``, the step and turn are closed
(``turn/end{aborted, disposed}``), teardown returns, and the stray task — left to the event
loop — can write nothing more and is reported (``agent/error`` with a ``TimeoutError``).
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from steerloop import AgentOptions, Runtime, ToolExec, define_tool, user_message
from steerloop.testing import text_response, tool_calls_response, wait_all_tasks_blocked

from ..conftest import Harness, compact, events_of, within
from ..logcheck import assert_well_formed


def stubborn(h: Harness, started: asyncio.Event, release: asyncio.Event) -> None:
    """A tool whose body never looks at its abort signal."""

    async def execute(args: Any, exec: ToolExec) -> str:
        started.set()
        await release.wait()
        return "late"

    h.rt.tools.register(
        define_tool(name="stubborn", description="", parameters={"type": "object"}, execute=execute)
    )


async def create(h: Harness, *script: Any, session_id: str = "s-1") -> Any:
    h.adapter.add(*script)
    options = AgentOptions(provider="mock", model="m")
    return await h.rt.agents.create(session_id=session_id, agent_options=options)


async def test_dispose_timeout_records_outcome_unknown_and_returns(h: Harness) -> None:
    started, release = asyncio.Event(), asyncio.Event()
    stubborn(h, started, release)
    errors: list[Any] = []
    h.rt.hooks.on("agent/error", errors.append)
    handle = await create(h, tool_calls_response([("c1", "stubborn", {})]), text_response("x"))
    agent = handle.agent
    agent.followup(user_message("u1"))
    await within(started.wait())
    await within(handle.dispose(timeout=0.05))
    assert compact(agent.session)[-5:] == [
        "msg", "call(c1)", "result(c1,TOOL_OUTCOME_UNKNOWN)", "S-1.1", "T-1:aborted",
    ]  # fmt: skip
    [result] = events_of(agent.session, "tool/result")
    assert result.data.error.code == "TOOL_OUTCOME_UNKNOWN"
    [end] = events_of(agent.session, "turn/end")
    assert end.data.reason.reason.kind == "disposed"
    assert [type(e.error) for e in errors] == [TimeoutError]
    assert agent.status == "idle" and h.rt.agents.get(agent.id) is None
    assert_well_formed(agent.session)
    length = len(agent.session.events)
    release.set()  # the stray body returns; nothing more reaches the log
    await wait_all_tasks_blocked()
    assert len(agent.session.events) == length and len(errors) == 1


async def test_handle_dispose_accepts_a_timeout(h: Harness) -> None:
    """``AgentHandle.dispose(timeout=...)`` (API.md); a bad timeout is a ValueError."""
    started, release = asyncio.Event(), asyncio.Event()
    stubborn(h, started, release)
    handle = await create(h, tool_calls_response([("c1", "stubborn", {})]))
    with pytest.raises(ValueError, match="timeout"):
        await handle.dispose(timeout=-1)
    handle.agent.followup(user_message("u1"))
    await within(started.wait())
    await within(handle.dispose(timeout=0.05))
    assert [e.data.reason.kind for e in events_of(handle.agent.session, "turn/end")] == ["aborted"]
    release.set()


async def test_runtime_close_timeout_bounds_every_agent() -> None:
    """``rt.close(timeout=...)`` returns although two agents run stubborn tools; a second
    close() with a timeout also bounds a close already under way."""
    rt = await Runtime.open()
    h = Harness(rt)
    started, release = asyncio.Event(), asyncio.Event()
    stubborn(h, started, release)
    a = await h.agent(tool_calls_response([("c1", "stubborn", {})]), session_id="a")
    b = await h.agent(tool_calls_response([("c2", "stubborn", {})]), session_id="b")
    a.followup(user_message("u1"))
    b.followup(user_message("u2"))
    await within(started.wait())
    await wait_all_tasks_blocked()
    first = asyncio.ensure_future(rt.close())  # unbounded: would wait for the tools forever
    await wait_all_tasks_blocked()
    await within(rt.close(timeout=0.05))
    assert first.done()
    for agent in (a, b):
        assert compact(agent.session)[-4:] == [
            "call(c1)" if agent is a else "call(c2)",
            "result(c1,TOOL_OUTCOME_UNKNOWN)" if agent is a else "result(c2,TOOL_OUTCOME_UNKNOWN)",
            "S-1.1",
            "T-1:aborted",
        ]
        [result] = events_of(agent.session, "tool/result")
        assert result.data.error.code == "TOOL_OUTCOME_UNKNOWN"
        assert_well_formed(agent.session)
    release.set()
