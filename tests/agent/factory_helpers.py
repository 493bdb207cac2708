"""Shared by the factory tests (test_factory_*.py): agent options, a trivial tool, make()."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from steerloop import (
    AgentHandle,
    AgentOptions,
    Runtime,
    Tool,
    ToolExec,
    define_tool,
)

from ..conftest import Harness

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
