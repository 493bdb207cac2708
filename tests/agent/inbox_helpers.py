"""Shared by the inbox tests (test_inbox_*.py): the canonical log, splice and hook records,
a gated tool."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from steerloop import (
    Runtime,
    ToolResult,
    define_tool,
)
from steerloop.llm._types import GenerateRequest
from steerloop.session._events import InboxSpliced

from ..conftest import events_of, label

CANONICAL_1 = [
    "ins(nt,u1)", "T+1", "claim(nt,u1)", "S+1.1", "sys", "user(u1)", "hdr(initial)", "ctx",
    "msg", "S-1.1", "T-1:completed",
]  # fmt: skip


def spliced(agent: Any) -> list[InboxSpliced]:
    return [e.data for e in events_of(agent.session, "agent/inbox/spliced")]


def record(rt: Runtime, *names: str) -> list[tuple[str, Any]]:
    """Record hook calls of ``names`` as ``(short name, label or status)`` in one list."""
    trace: list[tuple[str, Any]] = []

    def listener_for(name: str) -> Callable[[Any], None]:
        short = name.rsplit("/", 1)[-1]

        def listener(payload: Any) -> None:
            if name == "agent/status":
                trace.append((short, payload.status))
            elif name == "agent/inbox/claimed":
                trace.append((short, (label(payload.message), payload.turn)))
            else:
                trace.append((short, label(payload.message)))

        return listener

    for name in names:
        rt.hooks.on(name, listener_for(name))
    return trace


def gated_tool(
    name: str, body: Callable[[Any, Any], Awaitable[Any]], *, concludes: bool = False
) -> Any:
    async def execute(args: Any, exec: Any) -> Any:
        result = await body(args, exec)
        if concludes:
            return ToolResult(content=str(result), concludes_turn=True)
        return result

    return define_tool(name=name, description=name, parameters={"type": "object"}, execute=execute)


def request_texts(request: GenerateRequest) -> list[str]:
    return [f"{m.role}:{label(m)}" for m in request.messages]
