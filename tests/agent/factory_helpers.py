"""Shared by the factory tests (test_factory_*.py): agent options, a trivial tool, make(),
a close begun while a tool call is held."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from steerloop import (
    AgentHandle,
    AgentOptions,
    Runtime,
    Tool,
    ToolExec,
    define_tool,
    user_message,
)
from steerloop.testing import tool_call_response, wait_all_tasks_blocked

from ..conftest import Harness, within
from ..support import Stuck

OPTIONS = AgentOptions(provider="mock", model="m")
EMPTY_ARGS: dict[str, Any] = {"type": "object", "properties": {}}


def tool(name: str, body: Callable[[Any, ToolExec], Any] | None = None) -> Tool:
    async def default(args: Any, exec: ToolExec) -> str:
        return name

    return define_tool(name=name, description="", parameters=EMPTY_ARGS, execute=body or default)


async def make(h: Harness, *script: Any, session_id: str = "s-1", **kwargs: Any) -> AgentHandle:
    """Like ``h.agent`` but returns the handle (for dispose)."""
    h.adapter.add(*script)
    return await h.rt.agents.create(session_id=session_id, agent_options=OPTIONS, **kwargs)


def assert_unpublished(rt: Runtime, session_id: str = "s-1") -> None:
    """Nothing of ``session_id`` is published: no agent, no session."""
    assert rt.agents.get(session_id) is None
    assert rt.sessions.get(session_id) is None
    assert rt.agents.list() == ()
    assert rt.sessions.list() == ()


async def close_during_a_held_call(h: Harness) -> tuple[asyncio.Future[None], Stuck]:
    """Start ``rt.close()`` while agent ``s-1``'s call ``c1`` of the tool ``slow`` is held in
    its body (``Stuck``: it ignores the abort and returns once released); returns the close,
    begun and with every task blocked, and the body to release."""
    stuck = Stuck()
    h.rt.tools.register(tool("slow", stuck))
    handle = await make(h, tool_call_response("c1", "slow", {}))
    handle.agent.followup(user_message("u1"))
    await within(stuck.entered.wait())
    closing = asyncio.ensure_future(h.rt.close())
    await wait_all_tasks_blocked()
    return closing, stuck
