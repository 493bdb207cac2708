"""Shared fixtures: a runtime, a scripted agent factory and a compact log notation.

``compact(session)`` renders the log in the notation of CONTRACTS.md, e.g.
``["ins(nt,u1)", "T+1", "claim(nt,u1)", "S+1.1", "sys", "user(u1)", "hdr(initial)", "ctx",
"msg", "S-1.1", "T-1:completed"]``; messages are labelled by their first text block.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any

import pytest

from steerloop import AgentOptions, Runtime, Session, SessionEvent
from steerloop.messages import TextBlock, UserMessage
from steerloop.testing import ScriptedAdapter

SETTLE_TIMEOUT = 5.0


@pytest.fixture
async def rt() -> AsyncIterator[Runtime]:
    runtime = await Runtime.open()
    try:
        yield runtime
    finally:
        await asyncio.wait_for(runtime.close(), SETTLE_TIMEOUT)


class Harness:
    """A runtime with a scripted adapter registered for provider ``mock``."""

    def __init__(self, rt: Runtime) -> None:
        self.rt = rt
        self.adapter = ScriptedAdapter()
        rt.llm.register_adapter(["mock"], self.adapter)

    async def agent(self, *script: Any, session_id: str = "s-1", **kwargs: Any) -> Any:
        self.adapter.add(*script)
        options = kwargs.pop("agent_options", AgentOptions(provider="mock", model="m"))
        handle = await self.rt.agents.create(session_id=session_id, agent_options=options, **kwargs)
        return handle.agent


@pytest.fixture
async def h(rt: Runtime) -> Harness:
    return Harness(rt)


async def settle(agent: Any, timeout: float = SETTLE_TIMEOUT) -> None:
    """``await agent.when_idle()`` with a timeout so a hang fails."""
    await asyncio.wait_for(agent.when_idle(), timeout)


async def within(awaitable: Awaitable[Any], timeout: float = SETTLE_TIMEOUT) -> Any:
    return await asyncio.wait_for(awaitable, timeout)


def label(message: Any) -> str:
    for block in message.content:
        if isinstance(block, TextBlock):
            return block.text
    return message.id


def _short(target: str) -> str:
    return "nt" if target == "next-turn" else "ns"


def render(event: SessionEvent, queues: dict[str, list[Any]] | None = None) -> list[str]:
    """One event in CONTRACTS.md notation; ``queues`` (the folded inbox) names removals."""
    d = event.data
    t = event.type
    if t == "agent/inbox/spliced":
        queues = queues if queues is not None else {"next-turn": [], "next-step": []}
        queue = queues[d.target]
        removed = queue[d.start : d.start + d.removed_count]
        queue[d.start : d.start + d.removed_count] = list(d.inserted)
        verb = "drop" if d.outcome == "canceled" else "claim"
        out = [f"{verb}({_short(d.target)},{label(m)})" for m in removed]
        out += [f"ins({_short(d.target)},{label(m)})" for m in d.inserted]
        return out
    if t == "turn/start":
        return [f"T+{d.turn}"]
    if t == "turn/end":
        return [f"T-{d.turn}:{d.reason.kind}"]
    if t == "step/start":
        return [f"S+{d.turn}.{d.step}"]
    if t == "step/end":
        return [f"S-{d.turn}.{d.step}"]
    if t == "system/message":
        return ["sys"]
    if t == "user/message":
        return [f"user({label(d)})"]
    if t == "request/header":
        return [f"hdr({d.reason})"]
    if t == "request/context":
        return ["ctx"]
    if t == "assistant/message":
        return ["msg(interrupted)" if d.interrupted else "msg"]
    if t == "assistant/attempt":
        return ["attempt"]
    if t == "tool/call":
        return [f"call({d.call_id})"]
    if t == "tool/result":
        code = f",{d.error.code}" if d.error is not None else ""
        return [f"result({d.message.call_id}{code})"]
    return [t]


def compact(session: Session, *, only: Sequence[str] | None = None) -> list[str]:
    """The log in CONTRACTS.md notation; ``only`` keeps the items starting with a prefix."""
    queues: dict[str, list[Any]] = {"next-turn": [], "next-step": []}
    out = [item for event in session.events for item in render(event, queues)]
    if only is not None:
        out = [item for item in out if item.startswith(tuple(only))]
    return out


def types(session: Session) -> list[str]:
    return [e.type for e in session.events]


def events_of(session: Session, type: str) -> list[SessionEvent]:
    return [e for e in session.events if e.type == type]


def gate() -> asyncio.Event:
    return asyncio.Event()


Recorder = Callable[..., None]


def texts(messages: Sequence[Any]) -> list[str]:
    return [f"{m.role}:{label(m)}" for m in messages]


def u(text: str) -> UserMessage:
    from steerloop import user_message

    return user_message(text)


@pytest.fixture
async def store_rt() -> AsyncIterator[Runtime]:
    """A runtime over a fresh ``memory://`` store (``rt.sessions.persistence``)."""
    runtime = await Runtime.open(store="memory://")
    try:
        yield runtime
    finally:
        await asyncio.wait_for(runtime.close(), SETTLE_TIMEOUT)


@pytest.fixture
async def hs(store_rt: Runtime) -> Harness:
    """Like ``h``, but the runtime persists sessions in a ``MemoryStore``."""
    return Harness(store_rt)
