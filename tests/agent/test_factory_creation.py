"""§7.2 the creation transaction: publication order, created listeners, close during
creation (C7.2-13 … C7.2-18)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest

from steerloop import (
    Agent,
    AgentScope,
    user_message,
)
from steerloop.testing import (
    text_response,
    wait_all_tasks_blocked,
)

from ..conftest import Harness, compact, settle, within
from .factory_helpers import (
    OPTIONS,
    assert_unpublished,
    close_during_a_held_call,
    tool,
)

# --- C7.2-13 … C7.2-18: creation transaction -----------------------------------------------


async def test_publication_order(h: Harness) -> None:
    """C7.2-13: setup → commit → session registered → agent registered → agent/created
    listeners awaited one after another → agent/session-start → driver unlocked → return."""
    rt = h.rt
    trace: list[str] = []

    def where() -> str:
        session = rt.sessions.get("s-1") is not None
        return f"sessions={session} agents={rt.agents.get('s-1') is not None}"

    async def created_1(payload: Any) -> None:
        trace.append(f"created-1 {where()}")
        await asyncio.sleep(0)
        payload.agent.followup(user_message("u1"))
        trace.append("created-1 end")

    def created_2(payload: Any) -> Any:
        trace.append("created-2")

        async def later() -> None:
            await asyncio.sleep(0)
            trace.append("created-2 awaitable end")

        return later()

    def session_start(payload: Any) -> None:
        trace.append(f"session-start turns={compact(payload.agent.session, only=('T',))}")

    rt.hooks.on("agent/created", created_1)
    rt.hooks.on("agent/created", created_2)
    rt.hooks.on("agent/session-start", session_start)

    def setup(scope: AgentScope) -> Callable[[], None]:
        trace.append(f"setup {where()}")
        return lambda: trace.append(f"commit {where()}")

    h.adapter.add(text_response("a"))
    handle = await rt.agents.create(session_id="s-1", agent_options=OPTIONS, setup=setup)
    trace.append(f"returned turns={compact(handle.agent.session, only=('T',))}")
    assert trace == [
        "setup sessions=False agents=False",
        "commit sessions=False agents=False",
        "created-1 sessions=True agents=True",
        "created-1 end",
        "created-2",
        "created-2 awaitable end",
        "session-start turns=[]",
        "returned turns=['T+1']",
    ]
    await settle(handle.agent)


async def test_agent_is_in_maintenance_during_initialisation(h: Harness) -> None:
    """C7.2-14: during agent/created and agent/session-start the agent reports idle and
    run_maintenance raises; a followup is queued without a turn, then replayed once."""
    rt = h.rt
    observed: list[Any] = []

    async def job(signal: Any) -> None:
        return None

    def probe(name: str) -> Callable[[Any], None]:
        def listener(payload: Any) -> None:
            agent = payload.agent
            observed.append((name, agent.status))
            with pytest.raises(RuntimeError):
                agent.run_maintenance(job)
            if name == "created":
                agent.followup(user_message("u1"))
            observed.append((name, compact(agent.session)))

        return listener

    rt.hooks.on("agent/created", probe("created"))
    rt.hooks.on("agent/session-start", probe("session-start"))
    agent = await h.agent(text_response("a"))
    await settle(agent)

    assert observed == [
        ("created", "idle"),
        ("created", ["ins(nt,u1)"]),
        ("session-start", "idle"),
        ("session-start", ["ins(nt,u1)"]),
    ]
    assert compact(agent.session, only=("ins", "claim", "T")) == [
        "ins(nt,u1)",
        "T+1",
        "claim(nt,u1)",
        "T-1:completed",
    ]
    assert len(h.adapter.requests) == 1


async def test_inject_from_session_start_waits_for_a_waking_send(h: Harness) -> None:
    """C7.2-15: an inject from agent/session-start stages context without a turn; the first
    turn a later waking send opens admits it."""
    rt = h.rt
    rt.hooks.on("agent/session-start", lambda p: p.agent.inject(user_message("c1")))
    agent = await h.agent(text_response("a"))
    await settle(agent)
    assert compact(agent.session) == ["ins(ns,c1)"]
    assert h.adapter.requests == []

    agent.followup(user_message("u1"))
    await settle(agent)
    assert compact(agent.session, only=("ins", "claim", "T", "user")) == [
        "ins(ns,c1)",
        "ins(nt,u1)",
        "T+1",
        "claim(ns,c1)",
        "claim(nt,u1)",
        "user(c1)",
        "user(u1)",
        "T-1:completed",
    ]


@pytest.mark.parametrize("kind", ["sync", "async"])
async def test_raising_created_listener_rolls_back(h: Harness, kind: str) -> None:
    """C7.2-16: a failing agent/created listener rolls creation back: create() raises it,
    both registries are empty, agent/disposed pairs agent/created, the scope is undone."""
    rt = h.rt
    boom = LookupError("listener failed")
    trace: list[str] = []
    starts: list[str] = []

    def sync_listener(payload: Any) -> None:
        raise boom

    async def async_listener(payload: Any) -> None:
        await asyncio.sleep(0)
        raise boom

    rt.hooks.on("agent/created", lambda p: trace.append(f"created {p.agent.id}"))
    remove_failing = rt.hooks.on(
        "agent/created", sync_listener if kind == "sync" else async_listener
    )
    rt.hooks.on(
        "agent/disposed",
        lambda p: trace.append(
            f"disposed {p.agent.id} tool={rt.tools.get('scoped_tool') is not None} "
            f"agent={rt.agents.get(p.agent.id)} session={rt.sessions.get(p.agent.id) is not None}"
        ),
    )
    rt.hooks.on("agent/session-start", lambda p: starts.append(p.source))

    def setup(scope: AgentScope) -> None:
        scope.tools.register(tool("scoped_tool"))
        scope.hooks.on("agent/status", lambda p: trace.append("scoped status"))

    with pytest.raises(LookupError) as info:
        await rt.agents.create(session_id="s-1", agent_options=OPTIONS, setup=setup)
    assert info.value is boom
    # agent/disposed keeps its meaning: after the scope unwound, before the session detaches.
    assert trace == ["created s-1", "disposed s-1 tool=False agent=None session=True"]
    assert starts == []
    assert_unpublished(rt)
    assert rt.tools.get("scoped_tool") is None

    # The id is free again and the old scoped listener stays silent.
    remove_failing()
    agent = await h.agent(text_response("a"))
    agent.followup(user_message("u1"))
    await settle(agent)
    assert "scoped status" not in trace


async def test_close_waits_for_created_listener_before_teardown(h: Harness) -> None:
    """C7.2-17: rt.close() while an agent/created listener awaits: the listener finishes with
    scoped tools and the session usable; teardown begins only after it returned."""
    rt = h.rt
    entered = asyncio.Event()
    release = asyncio.Event()
    trace: list[str] = []

    async def listener(payload: Any) -> None:
        agent = payload.agent
        trace.append("listener start")
        entered.set()
        await release.wait()
        trace.append(
            f"listener resumed tool={rt.tools.get('scoped_tool', agent.id) is not None} "
            f"session={rt.sessions.get(agent.id) is agent.session}"
        )
        agent.inject(user_message("c1"))
        await asyncio.sleep(0)
        trace.append("listener end")

    rt.hooks.on("agent/created", listener)
    rt.hooks.on(
        "agent/disposed",
        lambda p: trace.append(f"disposed tool={rt.tools.get('scoped_tool') is not None}"),
    )

    def setup(scope: AgentScope) -> None:
        scope.tools.register(tool("scoped_tool"))

    creating = asyncio.ensure_future(
        rt.agents.create(session_id="s-1", agent_options=OPTIONS, setup=setup)
    )
    await within(entered.wait())
    closing = asyncio.ensure_future(rt.close())
    await wait_all_tasks_blocked()
    assert not closing.done()
    trace.append("release")
    release.set()
    await within(closing)
    assert trace == [
        "listener start",
        "release",
        "listener resumed tool=True session=True",
        "listener end",
        "disposed tool=False",
    ]
    handle = creating.result()
    assert compact(handle.agent.session) == ["ins(ns,c1)", "drop(ns,c1)"]
    assert_unpublished(rt)


async def test_close_during_setup_rolls_creation_back(h: Harness) -> None:
    """C7.2-18: rt.close() while create() waits on setup: create() raises RuntimeError,
    nothing is published, the partial scope is undone, close() returns after the rollback;
    later create/resume/restore_or_create raise RuntimeError."""
    rt = h.rt
    entered = asyncio.Event()
    never = asyncio.Event()
    created: list[Agent] = []
    rt.hooks.on("agent/created", lambda p: created.append(p.agent))

    async def setup(scope: AgentScope) -> None:
        scope.tools.register(tool("early"))
        entered.set()
        await never.wait()
        scope.tools.register(tool("late"))

    creating = asyncio.ensure_future(
        rt.agents.create(session_id="s-1", agent_options=OPTIONS, setup=setup)
    )
    await within(entered.wait())
    assert rt.tools.get("early") is not None
    await within(rt.close())

    assert creating.done()
    with pytest.raises(RuntimeError):
        creating.result()
    assert created == []
    assert_unpublished(rt)
    assert rt.tools.get("early") is None

    with pytest.raises(RuntimeError):
        await rt.agents.create(session_id="s-2", agent_options=OPTIONS)
    with pytest.raises(RuntimeError):
        await rt.agents.resume(resume_session_id="s-2", agent_options=OPTIONS)
    with pytest.raises(RuntimeError):
        await rt.agents.restore_or_create(session_id="s-2", agent_options=OPTIONS)

    # The abandoned setup finishing later leaves nothing registered behind.
    never.set()
    await wait_all_tasks_blocked()
    assert rt.tools.get("late") is None


async def test_create_after_close_began_raises(h: Harness) -> None:
    """C7.2-18: creation calls made while close() is still running raise RuntimeError."""
    rt = h.rt
    closing, stuck = await close_during_a_held_call(h)
    assert not closing.done()
    with pytest.raises(RuntimeError):
        await rt.agents.create(session_id="s-2", agent_options=OPTIONS)
    with pytest.raises(RuntimeError):
        await rt.agents.restore_or_create(session_id="s-2", agent_options=OPTIONS)
    stuck.release.set()
    await within(closing)
    assert rt.sessions.get("s-2") is None
