"""§7.1 registry and initiator: lookups, duplicates, initiator propagation, children, scoping."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from steerloop import (
    Agent,
    AgentOptions,
    AgentScope,
    CallConfig,
    CancelCause,
    PreStepDecision,
    RequestErrorAction,
    Runtime,
    ToolExec,
    define_tool,
    user_message,
)
from steerloop.testing import HANG, error_response, text_response, tool_call_response

from ..conftest import Harness, compact, settle, within

OPTIONS = AgentOptions(provider="mock", model="m")
EMPTY_ARGS: dict[str, Any] = {"type": "object", "properties": {}}


# --- C7.1-1 / C7.1-2 ----------------------------------------------------------------------


async def test_create_publishes_agent_and_session_under_one_id(h: Harness) -> None:
    """C7.1-1: agent.id == session.id == session_id; both registries return them."""
    handle = await h.rt.agents.create(session_id="s-1", agent_options=OPTIONS)
    agent = handle.agent
    assert agent.id == "s-1"
    assert agent.session.id == "s-1"
    assert h.rt.agents.get("s-1") is agent
    assert h.rt.sessions.get("s-1") is agent.session
    assert h.rt.agents.list() == (agent,)
    assert h.rt.sessions.list() == (agent.session,)


async def test_second_create_of_live_id_raises_and_changes_nothing(h: Harness) -> None:
    """C7.1-2: a duplicate create raises RuntimeError; the winner, its log and the registries
    are unchanged and no agent/created fires for the loser."""
    created: list[Agent] = []
    h.rt.hooks.on("agent/created", lambda p: created.append(p.agent))
    agent: Agent = await h.agent(text_response("a"))
    agent.followup(user_message("u1"))
    await settle(agent)
    before = list(agent.session.events)
    setup_calls: list[str] = []

    with pytest.raises(RuntimeError):
        await h.rt.agents.create(
            session_id="s-1",
            agent_options=OPTIONS,
            setup=lambda scope: setup_calls.append("setup"),
        )

    assert created == [agent]
    assert list(agent.session.events) == before
    assert h.rt.agents.get("s-1") is agent
    assert h.rt.sessions.get("s-1") is agent.session
    assert h.rt.agents.list() == (agent,)
    assert setup_calls == []


async def test_second_create_while_first_is_in_setup_raises(h: Harness) -> None:
    """C7.1-2: an id reserved by an unfinished creation is live too; the loser fires no
    agent/created and the first creation completes undisturbed."""
    created: list[Agent] = []
    h.rt.hooks.on("agent/created", lambda p: created.append(p.agent))
    entered = asyncio.Event()
    release = asyncio.Event()

    async def setup(scope: AgentScope) -> None:
        entered.set()
        await release.wait()

    first = asyncio.ensure_future(
        h.rt.agents.create(session_id="s-1", agent_options=OPTIONS, setup=setup)
    )
    await within(entered.wait())
    with pytest.raises(RuntimeError):
        await h.rt.agents.create(session_id="s-1", agent_options=OPTIONS)
    assert created == []
    release.set()
    handle = await within(first)
    assert created == [handle.agent]
    assert h.rt.agents.get("s-1") is handle.agent


# --- C7.1-3 / C7.1-4 / C7.1-5 -------------------------------------------------------------


async def test_initiator_is_the_driving_agent_in_tools_hooks_and_tasks(h: Harness) -> None:
    """C7.1-3: tool bodies, driver-invoked listeners and tasks created from them see the
    agent as initiator (current_initiator and require_initiator)."""
    rt = h.rt
    seen: dict[str, list[Any]] = {}

    def record(where: str) -> None:
        seen.setdefault(where, []).append(
            (rt.agents.current_initiator(), rt.agents.require_initiator())
        )

    async def body(args: Any, exec: ToolExec) -> str:
        record("tool")

        async def child() -> None:
            await asyncio.sleep(0)
            record("tool-task")

        await asyncio.get_running_loop().create_task(child())
        return "ok"

    rt.tools.register(
        define_tool(name="probe", description="", parameters=EMPTY_ARGS, execute=body)
    )

    async def pre_step(payload: Any, next_: Any) -> PreStepDecision:
        record("agent/pre-step")
        result: PreStepDecision = await next_()
        return result

    async def request(payload: Any, next_: Any) -> CallConfig:
        record("agent/request")
        result: CallConfig = await next_()
        return result

    retried: list[bool] = []

    async def request_error(payload: Any, next_: Any) -> RequestErrorAction | None:
        record("agent/request-error")
        if not retried:
            retried.append(True)
            return RequestErrorAction.retry()
        result: RequestErrorAction | None = await next_()
        return result

    async def turn_stopping(payload: Any) -> None:
        record("agent/turn-stopping")

        async def child() -> None:
            record("turn-stopping-task")

        await asyncio.ensure_future(child())

    async def pre_execute(payload: Any) -> None:
        record("tools/pre-execute")

    async def post_execute(payload: Any, next_: Any) -> Any:
        record("tools/post-execute")
        return await next_()

    def on_result(payload: Any) -> None:
        record("tools/result")

    def on_event(payload: Any) -> None:
        if payload.event.type == "turn/start":
            record("session/event")

    rt.hooks.on("agent/pre-step", pre_step)
    rt.hooks.on("agent/request", request)
    rt.hooks.on("agent/request-error", request_error)
    rt.hooks.on("agent/turn-stopping", turn_stopping)
    rt.hooks.on("tools/pre-execute", pre_execute)
    rt.hooks.on("tools/post-execute", post_execute)
    rt.hooks.on("tools/result", on_result)
    rt.hooks.on("session/event", on_event)

    agent = await h.agent(
        error_response("overloaded", "try again", retryable=True),
        tool_call_response("c1", "probe", {}),
        text_response("done"),
    )
    agent.followup(user_message("u1"))
    await settle(agent)
    await rt.hooks.drain()

    assert compact(agent.session, only=("T", "result")) == ["T+1", "result(c1)", "T-1:completed"]
    expected = {
        "tool",
        "tool-task",
        "agent/pre-step",
        "agent/request",
        "agent/request-error",
        "agent/turn-stopping",
        "turn-stopping-task",
        "tools/pre-execute",
        "tools/post-execute",
        "tools/result",
        "session/event",
    }
    assert set(seen) == expected
    for where, pairs in seen.items():
        assert pairs, where
        for current, required in pairs:
            assert current is agent, where
            assert required is agent, where


async def test_no_initiator_outside_any_driver(rt: Runtime) -> None:
    """C7.1-4: top-level code and host timers have no initiator; require_initiator raises."""
    assert rt.agents.current_initiator() is None
    with pytest.raises(RuntimeError):
        rt.agents.require_initiator()

    results: list[Any] = []

    def timer() -> None:
        results.append(rt.agents.current_initiator())
        try:
            rt.agents.require_initiator()
        except RuntimeError as exc:
            results.append(exc)

    fired = asyncio.Event()
    loop = asyncio.get_running_loop()

    def tick() -> None:
        timer()
        fired.set()

    loop.call_soon(tick)
    await within(fired.wait())
    assert results[0] is None
    assert isinstance(results[1], RuntimeError)


async def test_no_initiator_outside_driver_even_with_live_agent(h: Harness) -> None:
    """C7.1-4: an agent being live does not make top-level code one of its initiators."""
    agent = await h.agent(text_response("a"))
    agent.followup(user_message("u1"))
    assert h.rt.agents.current_initiator() is None
    await settle(agent)
    assert h.rt.agents.current_initiator() is None
    with pytest.raises(RuntimeError):
        h.rt.agents.require_initiator()


async def test_without_initiator_block_in_tool_body(h: Harness) -> None:
    """C7.1-5: inside without_initiator() (and tasks created in it) there is no initiator;
    leaving the block restores it. Counterexample: a task created outside the block in the
    same tool body still sees the agent."""
    rt = h.rt
    seen: dict[str, Any] = {}

    async def body(args: Any, exec: ToolExec) -> str:
        seen["before"] = rt.agents.current_initiator()
        with rt.agents.without_initiator():
            seen["inside"] = rt.agents.current_initiator()
            with pytest.raises(RuntimeError):
                rt.agents.require_initiator()

            async def inner() -> None:
                seen["inside-task"] = rt.agents.current_initiator()

            inside_task = asyncio.ensure_future(inner())
        seen["after"] = rt.agents.current_initiator()

        async def outer() -> None:
            seen["outside-task"] = rt.agents.current_initiator()

        await asyncio.gather(inside_task, asyncio.ensure_future(outer()))
        return "ok"

    rt.tools.register(
        define_tool(name="probe", description="", parameters=EMPTY_ARGS, execute=body)
    )
    agent = await h.agent(tool_call_response("c1", "probe", {}), text_response("done"))
    agent.followup(user_message("u1"))
    await settle(agent)

    assert seen == {
        "before": agent,
        "inside": None,
        "inside-task": None,
        "after": agent,
        "outside-task": agent,
    }


async def test_without_initiator_restores_when_the_block_raises(h: Harness) -> None:
    """C7.1-5: leaving the block by an exception restores the previous value too (the
    agent, inside a tool body), and blocks nest."""
    rt = h.rt
    seen: list[Any] = []

    async def body(args: Any, exec: ToolExec) -> str:
        with pytest.raises(ValueError), rt.agents.without_initiator():
            with rt.agents.without_initiator():
                seen.append(rt.agents.current_initiator())
            seen.append(rt.agents.current_initiator())
            raise ValueError("leave early")
        seen.append(rt.agents.current_initiator())
        return "ok"

    rt.tools.register(
        define_tool(name="probe", description="", parameters=EMPTY_ARGS, execute=body)
    )
    agent = await h.agent(tool_call_response("c1", "probe", {}), text_response("done"))
    agent.followup(user_message("u1"))
    await settle(agent)
    assert seen == [None, None, agent]
    assert rt.agents.current_initiator() is None


# --- C7.1-6 -------------------------------------------------------------------------------


async def test_children_by_explicit_parent_and_by_initiator(h: Harness) -> None:
    """C7.1-6: a child made with parent= or from a parent's tool is listed in children();
    disposing it removes it and leaves the parent live."""
    rt = h.rt
    parent: Agent = await h.agent(tool_call_response("c1", "spawn", {}), text_response("done"))
    spawned: list[Any] = []

    async def spawn(args: Any, exec: ToolExec) -> str:
        handle = await rt.agents.create(session_id="s-child-2", agent_options=OPTIONS)
        spawned.append(handle)
        return "ok"

    rt.tools.register(
        define_tool(name="spawn", description="", parameters=EMPTY_ARGS, execute=spawn)
    )
    explicit = await rt.agents.create(session_id="s-child-1", agent_options=OPTIONS, parent=parent)
    assert rt.agents.children(parent) == (explicit.agent,)

    parent.followup(user_message("u1"))
    await settle(parent)
    (implicit,) = spawned
    assert implicit.agent.parent is parent
    assert rt.agents.children(parent) == (explicit.agent, implicit.agent)
    assert rt.agents.children(explicit.agent) == ()

    await within(explicit.dispose())
    assert rt.agents.children(parent) == (implicit.agent,)
    assert rt.agents.get("s-1") is parent
    await within(implicit.dispose())
    assert rt.agents.children(parent) == ()
    assert rt.agents.get("s-1") is parent
    assert rt.sessions.get("s-1") is parent.session


async def test_top_level_agent_has_no_parent(h: Harness) -> None:
    """C7.1-6 (counterexample): an agent created outside any driver has no parent edge."""
    a = await h.agent()
    b = await h.agent(session_id="s-2")
    assert a.parent is None and b.parent is None
    assert h.rt.agents.children(a) == ()


# --- C7.1-12 / C7.1-13 --------------------------------------------------------------------


async def test_scoped_listener_sees_only_its_own_agent(h: Harness) -> None:
    """C7.1-12: a scope.hooks listener of agent A never sees B's payloads; an rt.hooks
    listener sees both."""
    rt = h.rt
    scoped: list[tuple[str, str]] = []
    global_: list[tuple[str, str]] = []
    rt.hooks.on("agent/status", lambda p: global_.append((p.agent.id, p.status)))

    def setup(scope: AgentScope) -> None:
        scope.hooks.on("agent/status", lambda p: scoped.append((p.agent.id, p.status)))

    a = await h.agent(text_response("a"), session_id="a", setup=setup)
    b = await h.agent(text_response("b"), session_id="b")
    a.followup(user_message("u1"))
    b.followup(user_message("u2"))
    await settle(a)
    await settle(b)

    assert scoped == [("a", "running"), ("a", "idle")]
    assert sorted(global_) == sorted(
        [("a", "running"), ("a", "idle"), ("b", "running"), ("b", "idle")]
    )


async def test_dispose_undoes_scoped_registrations_only(h: Harness) -> None:
    """C7.1-13: after dispose, scoped tools and prompt sections are gone and scoped listeners
    are never called again; registrations made on rt directly stay."""
    rt = h.rt

    async def body(args: Any, exec: ToolExec) -> str:
        return "ok"

    scoped_calls: list[str] = []
    global_calls: list[str] = []
    rt.tools.register(
        define_tool(name="shared", description="", parameters=EMPTY_ARGS, execute=body)
    )
    rt.system_prompt.add_section("global", "GLOBAL")
    rt.hooks.on("agent/status", lambda p: global_calls.append(p.agent.id))

    def setup(scope: AgentScope) -> None:
        scope.tools.register(
            define_tool(name="mine", description="", parameters=EMPTY_ARGS, execute=body)
        )
        scope.system_prompt.add_section("mine", "MINE")
        scope.hooks.on("agent/status", lambda p: scoped_calls.append(p.agent.id))
        scope.hooks.on("session/event", lambda p: scoped_calls.append(p.event.type))

    handle = await rt.agents.create(session_id="s-1", agent_options=OPTIONS, setup=setup)
    assert rt.tools.get("mine") is not None
    assert "MINE" in await rt.system_prompt.assemble(handle.agent)
    await within(handle.dispose())

    assert rt.tools.get("mine") is None
    assert rt.tools.get("shared") is not None
    assert await rt.system_prompt.assemble(handle.agent) == "GLOBAL"
    scoped_calls.clear()

    # A second agent with the same id drives a turn: the old scope's listeners stay silent.
    h.adapter.add(text_response("b"))
    again = await rt.agents.create(session_id="s-1", agent_options=OPTIONS)
    again.agent.followup(user_message("u1"))
    await settle(again.agent)
    assert scoped_calls == []
    assert "s-1" in global_calls
    assert [t.name for t in h.adapter.requests[-1].tools] == ["shared"]


async def test_cancel_is_not_dispose(h: Harness) -> None:
    """C7.1-13 (counterexample): cancelling a turn keeps the scope; only dispose undoes it."""
    rt = h.rt

    async def body(args: Any, exec: ToolExec) -> str:
        return "ok"

    def setup(scope: AgentScope) -> None:
        scope.tools.register(
            define_tool(name="mine", description="", parameters=EMPTY_ARGS, execute=body)
        )

    agent = await h.agent(HANG, setup=setup)
    agent.followup(user_message("u1"))
    agent.cancel(CancelCause.user())
    await settle(agent)
    assert rt.tools.get("mine") is not None
