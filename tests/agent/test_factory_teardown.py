"""§7.2 teardown: dispose order, memoised failures, close of every agent (C7.2-20 … C7.2-27)."""

from __future__ import annotations

import asyncio
import gc
import weakref
from typing import Any

import pytest

from steerloop import (
    Agent,
    AgentScope,
    Disposer,
    Runtime,
    Tool,
    ToolExec,
    user_message,
)
from steerloop.session._store import MemoryStore
from steerloop.testing import (
    HANG,
    ScriptedAdapter,
    text_response,
    tool_call_response,
    wait_all_tasks_blocked,
)

from ..conftest import Harness, compact, within
from .factory_helpers import (
    OPTIONS,
    assert_unpublished,
    close_during_a_held_call,
    make,
    tool,
)

# --- C7.2-20 … C7.2-27: teardown -----------------------------------------------------------


def _traced_tool_registry(
    monkeypatch: pytest.MonkeyPatch,
    rt: Runtime,
    trace: list[str],
    fail: BaseException | None = None,
) -> None:
    """Record (and optionally fail) the undo of every tool registration."""
    original = rt.tools.register

    def register(t: Tool, *, owner: str | None = None) -> Disposer:
        inner = original(t, owner=owner)

        def undo() -> None:
            inner()
            trace.append(f"undo {t.name}")
            if fail is not None:
                raise fail

        return Disposer(undo)

    monkeypatch.setattr(rt.tools, "register", register)


def _traced_close(
    monkeypatch: pytest.MonkeyPatch,
    agent: Agent,
    trace: list[str],
    fail: BaseException | None = None,
) -> None:
    original = agent.session.close

    async def close() -> None:
        await original()
        trace.append("session close")
        if fail is not None:
            raise fail

    monkeypatch.setattr(agent.session, "close", close)


async def test_dispose_runs_steps_in_order(h: Harness, monkeypatch: pytest.MonkeyPatch) -> None:
    """C7.2-20: cancel(disposed) → when_idle → undo scope → close write handle →
    unregister agent (agent/disposed) → unregister session → drop bookkeeping."""
    rt = h.rt
    trace: list[str] = []
    _traced_tool_registry(monkeypatch, rt, trace)

    def setup(scope: AgentScope) -> None:
        scope.tools.register(tool("scoped_tool"))

    handle = await make(h, HANG, setup=setup)
    agent = handle.agent
    _traced_close(monkeypatch, agent, trace)
    original_cancel = agent.cancel

    def cancel(cause: Any, keep_inbox: bool = False) -> None:
        trace.append(f"cancel {cause.kind}")
        original_cancel(cause, keep_inbox)

    monkeypatch.setattr(agent, "cancel", cancel)

    def on_event(payload: Any) -> None:
        if payload.event.type == "turn/end":
            trace.append(f"turn/end {payload.event.data.reason.kind}")

    rt.hooks.on("session/event", on_event)
    rt.hooks.on(
        "agent/disposed",
        lambda p: trace.append(
            f"disposed agent={rt.agents.get('s-1')} session={rt.sessions.get('s-1') is not None}"
        ),
    )
    agent.followup(user_message("u1"))
    await wait_all_tasks_blocked()
    await within(handle.dispose())
    trace.append(f"returned session={rt.sessions.get('s-1')}")
    assert trace == [
        "cancel disposed",
        "turn/end aborted",
        "undo scoped_tool",
        "session close",
        "disposed agent=None session=True",
        "returned session=None",
    ]
    # Bookkeeping dropped: the id is free for a new lifecycle immediately.
    again = await rt.agents.restore_or_create(session_id="s-1", agent_options=OPTIONS)
    assert rt.agents.get("s-1") is again.agent


async def test_dispose_waits_for_publication(h: Harness) -> None:
    """C7.2-20: the first teardown step waits for publication to finish (a parent's dispose
    reaching a child whose agent/created listener still awaits)."""
    rt = h.rt
    parent = await make(h)
    entered = asyncio.Event()
    release = asyncio.Event()
    trace: list[str] = []

    async def listener(payload: Any) -> None:
        if payload.agent.id != "child":
            return
        entered.set()
        await release.wait()
        trace.append("child created end")

    rt.hooks.on("agent/created", listener)
    rt.hooks.on("agent/disposed", lambda p: trace.append(f"disposed {p.agent.id}"))
    creating = asyncio.ensure_future(
        rt.agents.create(session_id="child", agent_options=OPTIONS, parent=parent.agent)
    )
    await within(entered.wait())
    disposing = asyncio.ensure_future(parent.dispose())
    await wait_all_tasks_blocked()
    assert trace == []
    release.set()
    await within(disposing)
    assert trace == ["child created end", "disposed child", "disposed s-1"]
    assert (await within(creating)).agent.id == "child"
    assert_unpublished(rt, "child")


async def test_inside_disposed_listener(h: Harness) -> None:
    """C7.2-21: in agent/disposed the log ends with turn/end{aborted, disposed}, scoped tools
    are gone, rt.agents.get is None and rt.sessions.get still returns the session.
    Counterexample: a tool registered on rt.tools is still present."""
    rt = h.rt
    rt.tools.register(tool("global_tool"))
    seen: dict[str, Any] = {}

    def on_disposed(payload: Any) -> None:
        agent = payload.agent
        last = agent.session.events[-1]
        seen["last"] = (last.type, last.data.reason.kind, last.data.reason.reason.kind)
        seen["compact"] = compact(agent.session, only=("T",))
        seen["scoped"] = rt.tools.get("scoped_tool")
        seen["global"] = rt.tools.get("global_tool") is not None
        seen["agent"] = rt.agents.get(agent.id)
        seen["session"] = rt.sessions.get(agent.id) is agent.session

    rt.hooks.on("agent/disposed", on_disposed)

    def setup(scope: AgentScope) -> None:
        scope.tools.register(tool("scoped_tool"))

    handle = await make(h, HANG, setup=setup)
    handle.agent.followup(user_message("u1"))
    await wait_all_tasks_blocked()
    await within(handle.dispose())
    assert seen == {
        "last": ("turn/end", "aborted", "disposed"),
        "compact": ["T+1", "T-1:aborted"],
        "scoped": None,
        "global": True,
        "agent": None,
        "session": True,
    }


async def test_draining_tool_can_use_scope_until_quiescent(h: Harness) -> None:
    """C7.2-22: a tool body draining after its signal aborted can still call other scoped
    tools and read scoped state; the scope is undone strictly after when_idle()."""
    rt = h.rt
    draining = asyncio.Event()
    release = asyncio.Event()
    trace: list[str] = []

    async def helper(args: Any, exec: ToolExec) -> str:
        return "helped"

    async def slow(args: Any, exec: ToolExec) -> str:
        await exec.signal.wait()
        draining.set()
        await release.wait()
        found = rt.tools.get("helper", exec.agent.id)
        trace.append(f"helper visible={found is not None}")
        assert found is not None
        trace.append(await found.execute({}, exec))
        trace.append(f"section={'SCOPED' in await rt.system_prompt.assemble(exec.agent)}")
        return "drained"

    def setup(scope: AgentScope) -> None:
        scope.tools.register(tool("slow", slow))
        scope.tools.register(tool("helper", helper))
        scope.system_prompt.add_section("mine", "SCOPED")

    rt.hooks.on(
        "agent/disposed",
        lambda p: trace.append(f"disposed helper={rt.tools.get('helper') is not None}"),
    )
    handle = await make(h, tool_call_response("c1", "slow", {}), setup=setup)
    handle.agent.followup(user_message("u1"))
    disposing: asyncio.Future[None] | None = None
    started = asyncio.Event()
    rt.hooks.on("session/event", lambda p: started.set() if p.event.type == "tool/call" else None)
    await within(started.wait())
    disposing = asyncio.ensure_future(handle.dispose())
    await within(draining.wait())
    await wait_all_tasks_blocked()
    assert not disposing.done()
    assert rt.tools.get("helper") is not None
    release.set()
    await within(disposing)
    assert trace == [
        "helper visible=True",
        "helped",
        "section=True",
        "disposed helper=False",
    ]
    assert compact(handle.agent.session, only=("result", "T")) == [
        "T+1",
        "result(c1,ABORTED)",
        "T-1:aborted",
    ]


async def test_dispose_is_memoised(h: Harness) -> None:
    """C7.2-23: concurrent and sequential dispose() calls run teardown once and share the
    outcome."""
    rt = h.rt
    disposed: list[str] = []
    rt.hooks.on("agent/disposed", lambda p: disposed.append(p.agent.id))
    handle = await make(h, HANG)
    handle.agent.followup(user_message("u1"))
    await wait_all_tasks_blocked()
    first = asyncio.ensure_future(handle.dispose())
    second = asyncio.ensure_future(handle.dispose())
    assert await within(asyncio.gather(first, second)) == [None, None]
    await within(handle.dispose())
    assert disposed == ["s-1"]
    assert compact(handle.agent.session, only=("T",)) == ["T+1", "T-1:aborted"]


async def test_dispose_memoises_the_failure(h: Harness, monkeypatch: pytest.MonkeyPatch) -> None:
    """C7.2-23: every caller, concurrent or later, sees the same exception object."""
    rt = h.rt
    disposed: list[str] = []
    rt.hooks.on("agent/disposed", lambda p: disposed.append(p.agent.id))
    handle = await make(h)
    boom = OSError("flush failed")
    trace: list[str] = []
    _traced_close(monkeypatch, handle.agent, trace, fail=boom)
    results = await within(
        asyncio.gather(handle.dispose(), handle.dispose(), return_exceptions=True)
    )
    assert results[0] is boom and results[1] is boom
    with pytest.raises(OSError) as info:
        await within(handle.dispose())
    assert info.value is boom
    assert trace == ["session close"]
    assert disposed == ["s-1"]


async def test_teardown_collects_failures_in_step_order(
    h: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """C7.2-24: undo and close both fail: registry removal and bookkeeping still happen, and
    dispose() raises an ExceptionGroup holding both errors in step order."""
    rt = h.rt
    trace: list[str] = []
    undo_error = ValueError("undo failed")
    close_error = OSError("close failed")
    _traced_tool_registry(monkeypatch, rt, trace, fail=undo_error)
    disposed: list[str] = []
    rt.hooks.on("agent/disposed", lambda p: disposed.append(p.agent.id))

    def setup(scope: AgentScope) -> None:
        scope.tools.register(tool("scoped_tool"))

    handle = await make(h, setup=setup)
    _traced_close(monkeypatch, handle.agent, trace, fail=close_error)
    with pytest.raises(ExceptionGroup) as info:
        await within(handle.dispose())
    assert list(info.value.exceptions) == [undo_error, close_error]
    assert trace == ["undo scoped_tool", "session close"]
    assert disposed == ["s-1"]
    assert_unpublished(rt)
    assert rt.tools.get("scoped_tool") is None
    again = await rt.agents.create(session_id="s-1", agent_options=OPTIONS)
    assert rt.agents.get("s-1") is again.agent


async def test_single_teardown_failure_is_not_wrapped(
    h: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """C7.2-24 (counterexample): a single failure is raised as itself."""
    rt = h.rt
    trace: list[str] = []
    undo_error = ValueError("undo failed")
    _traced_tool_registry(monkeypatch, rt, trace, fail=undo_error)

    def setup(scope: AgentScope) -> None:
        scope.tools.register(tool("scoped_tool"))

    handle = await make(h, setup=setup)
    _traced_close(monkeypatch, handle.agent, trace)
    with pytest.raises(ValueError) as info:
        await within(handle.dispose())
    assert info.value is undo_error
    assert trace == ["undo scoped_tool", "session close"]
    assert_unpublished(rt)


async def test_dispose_discards_queued_work(h: Harness) -> None:
    """C7.2-25: pending followups are removed with outcome="canceled" and no further turn
    starts once the current turn is aborted."""
    rt = h.rt
    discarded: list[str] = []
    rt.hooks.on("agent/inbox/discarded", lambda p: discarded.append(p.message.content[0].text))
    handle = await make(h, HANG, text_response("never"))
    agent = handle.agent
    agent.followup(user_message("u1"))
    await wait_all_tasks_blocked()
    agent.followup(user_message("u2"))
    agent.followup(user_message("u3"))
    await within(handle.dispose())
    assert compact(agent.session, only=("ins", "claim", "drop", "T")) == [
        "ins(nt,u1)",
        "T+1",
        "claim(nt,u1)",
        "ins(nt,u2)",
        "ins(nt,u3)",
        "drop(nt,u2)",
        "drop(nt,u3)",
        "T-1:aborted",
    ]
    assert discarded == ["u2", "u3"]
    assert len(h.adapter.requests) == 1


async def test_send_after_disposal_began_is_not_latched(h: Harness) -> None:
    """C7.2-26: a followup from an abort observer during disposal writes its ins event but
    starts no turn, and teardown issues no further model request."""
    rt = h.rt
    sent: list[str] = []

    def on_request(payload: Any, next_: Any) -> Any:
        agent = payload.agent

        def observer(reason: Any) -> None:
            agent.followup(user_message("late"))
            sent.append(reason.kind)

        payload.signal.add_listener(observer)
        return next_()

    rt.hooks.on("agent/request", on_request)
    handle = await make(h, HANG, text_response("never"))
    agent = handle.agent
    agent.followup(user_message("u1"))
    await wait_all_tasks_blocked()
    assert len(h.adapter.requests) == 1
    await within(handle.dispose())
    assert sent == ["disposed"]
    assert compact(agent.session, only=("ins", "claim", "drop", "T")) == [
        "ins(nt,u1)",
        "T+1",
        "claim(nt,u1)",
        "ins(nt,late)",
        "T-1:aborted",
    ]
    assert len(h.adapter.requests) == 1


async def test_close_disposes_every_agent_and_is_idempotent(h: Harness) -> None:
    """C7.2-27: rt.close() disposes every live agent per C7.2-20; closing again is a no-op."""
    rt = h.rt
    disposed: list[str] = []
    rt.hooks.on("agent/disposed", lambda p: disposed.append(p.agent.id))
    a = await make(h, HANG, session_id="a")
    b = await make(h, HANG, session_id="b")
    idle = await make(h, session_id="c")
    a.agent.followup(user_message("u1"))
    b.agent.followup(user_message("u2"))
    await wait_all_tasks_blocked()
    await within(rt.close())
    assert sorted(disposed) == ["a", "b", "c"]
    for handle in (a, b):
        assert compact(handle.agent.session, only=("T",)) == ["T+1", "T-1:aborted"]
        assert handle.agent.session.events[-1].data.reason.reason.kind == "disposed"
    assert compact(idle.agent.session) == []
    assert rt.agents.list() == () and rt.sessions.list() == ()
    await within(rt.close())
    assert sorted(disposed) == ["a", "b", "c"]


async def test_concurrent_close_callers_share_completion(h: Harness) -> None:
    """C7.2-27: a second close() while the first is still disposing awaits the same
    completion instead of returning early."""
    rt = h.rt
    first, stuck = await close_during_a_held_call(h)
    second = asyncio.ensure_future(rt.close())
    await wait_all_tasks_blocked()
    assert not first.done()
    assert not second.done()
    stuck.release.set()
    await within(asyncio.gather(first, second))
    assert_unpublished(rt)


async def test_close_waits_for_inflight_creation(h: Harness) -> None:
    """C7.2-27: close() waits for a creation whose agent/created listener is in flight, then
    disposes the agent it published."""
    rt = h.rt
    entered = asyncio.Event()
    release = asyncio.Event()
    disposed: list[str] = []

    async def listener(payload: Any) -> None:
        entered.set()
        await release.wait()

    rt.hooks.on("agent/created", listener)
    rt.hooks.on("agent/disposed", lambda p: disposed.append(p.agent.id))
    creating = asyncio.ensure_future(rt.agents.create(session_id="s-1", agent_options=OPTIONS))
    await within(entered.wait())
    closing = asyncio.ensure_future(rt.close())
    await wait_all_tasks_blocked()
    assert not closing.done()
    release.set()
    await within(closing)
    assert creating.done()
    assert disposed == ["s-1"]
    assert_unpublished(rt)


async def test_close_reports_several_failures_together(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """C7.2-27: failures of several agents are reported in one ExceptionGroup; the outcome
    is memoised, so a later close() reports the same group."""
    rt = await Runtime.open()
    rt.llm.register_adapter(["mock"], ScriptedAdapter())
    errors = {"a": OSError("a failed"), "b": OSError("b failed")}
    handles = []
    for session_id, error in errors.items():
        handle = await rt.agents.create(session_id=session_id, agent_options=OPTIONS)
        _traced_close(monkeypatch, handle.agent, [], fail=error)
        handles.append(handle)
    await rt.agents.create(session_id="ok", agent_options=OPTIONS)

    with pytest.raises(ExceptionGroup) as info:
        await within(rt.close())
    assert sorted(map(str, info.value.exceptions)) == ["a failed", "b failed"]
    assert rt.agents.list() == () and rt.sessions.list() == ()
    with pytest.raises(ExceptionGroup) as again:
        await within(rt.close())
    assert again.value is info.value


async def test_session_start_source_resume_for_restored_lifecycles() -> None:
    """C7.1-14: resume() and the restore path of restore_or_create() fire
    agent/session-start once with source "resume", after agent/created."""
    runtime = await Runtime.open(store="memory://")
    try:
        trace: list[tuple[str, str]] = []
        runtime.hooks.on("agent/created", lambda p: trace.append(("created", p.agent.id)))
        runtime.hooks.on(
            "agent/session-start", lambda p: trace.append(("start:" + p.source, p.agent.id))
        )
        first = await runtime.agents.create(session_id="s-1", agent_options=OPTIONS)
        await within(first.dispose())
        resumed = await runtime.agents.resume(resume_session_id="s-1", agent_options=OPTIONS)
        await within(resumed.dispose())
        restored = await runtime.agents.restore_or_create(session_id="s-1", agent_options=OPTIONS)
        await within(restored.dispose())
        assert trace == [
            ("created", "s-1"),
            ("start:startup", "s-1"),
            ("created", "s-1"),
            ("start:resume", "s-1"),
            ("created", "s-1"),
            ("start:resume", "s-1"),
        ]
    finally:
        await within(runtime.close())


async def test_failed_creation_leaves_no_stored_artifact() -> None:
    """C7.1-10 / C7.2-16: with a persistent store, a raising setup or a raising agent/created
    listener leaves no artifact; a following restore_or_create takes the create path."""
    runtime = await Runtime.open(store="memory://")
    try:
        store = runtime.sessions.persistence
        assert store is not None
        starts: list[str] = []
        runtime.hooks.on("agent/session-start", lambda p: starts.append(p.source))

        def failing_setup(scope: AgentScope) -> None:
            raise KeyError("setup failed")

        with pytest.raises(KeyError):
            await runtime.agents.create(
                session_id="s-1", agent_options=OPTIONS, setup=failing_setup
            )
        assert not await store.exists("s-1")

        def failing_listener(payload: Any) -> None:
            payload.agent.inject(user_message("c1"))
            raise LookupError("listener failed")

        remove = runtime.hooks.on("agent/created", failing_listener)
        with pytest.raises(LookupError):
            await runtime.agents.create(session_id="s-1", agent_options=OPTIONS)
        remove()
        assert not await store.exists("s-1")

        handle = await runtime.agents.restore_or_create(session_id="s-1", agent_options=OPTIONS)
        assert starts == ["startup"]
        assert compact(handle.agent.session) == []
    finally:
        await within(runtime.close())


async def test_disposed_listener_sees_the_whole_log_stored() -> None:
    """C7.2-21: with a persistent store, inside agent/disposed the store already holds every
    event of the log (the write handle was flushed and closed)."""
    runtime = await Runtime.open(store="memory://")
    adapter = ScriptedAdapter([HANG])
    runtime.llm.register_adapter(["mock"], adapter)
    try:
        store = runtime.sessions.persistence
        assert isinstance(store, MemoryStore)
        seen: list[tuple[int, int]] = []

        def on_disposed(payload: Any) -> None:
            seen.append((len(store.raw(payload.agent.id)), len(payload.agent.session.events)))

        runtime.hooks.on("agent/disposed", on_disposed)
        handle = await runtime.agents.create(session_id="s-1", agent_options=OPTIONS)
        handle.agent.followup(user_message("u1"))
        await wait_all_tasks_blocked()
        await within(handle.dispose())
        (stored, logged) = seen[0]
        assert stored == logged
        assert compact(handle.agent.session, only=("T",)) == ["T+1", "T-1:aborted"]
        reloaded = await store.load("s-1")
        assert [e.type for e in reloaded] == [e.type for e in handle.agent.session.events]
    finally:
        await within(runtime.close())


async def test_a_disposed_agent_and_its_session_are_freed_without_the_cycle_collector(
    h: Harness,
) -> None:
    """C7.2-20's last step (drop runtime bookkeeping) and C7.1-13 (scoped registrations
    gone), seen from memory: once disposed and unreferenced, an agent, its session (holding
    the log) and its inbox are freed by reference counting alone — nothing of theirs,
    scope included, forms a reference cycle.

    Counterexample this pins: the inbox, the phase machine's callbacks and the scope's parts
    each referred back to their owner, so every session a service unloaded waited, log and
    all, for a full collection (80-120 ms pauses at ~150k tracked objects in the service
    bench); measured here with the collector off.
    """

    def setup(scope: AgentScope) -> None:
        scope.tools.register(tool("t"))
        scope.hooks.on("agent/status", lambda payload: None)
        scope.system_prompt.add_section("s", lambda ctx: "section")

    collecting = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        handle = await make(
            h, tool_call_response("c1", "t", {}), text_response("done"), setup=setup
        )
        handle.agent.followup(user_message("u1"))
        await within(handle.agent.when_idle())
        handle.agent.inbox.append("next-turn", user_message("left pending"))
        agent = handle.agent
        owned: list[weakref.ref[Any]] = [
            weakref.ref(agent),
            weakref.ref(agent.session),
            weakref.ref(agent.inbox),
        ]
        del agent
        await within(handle.dispose())
        del handle
        await wait_all_tasks_blocked()
        assert [ref() for ref in owned] == [None, None, None]
    finally:
        if collecting:
            gc.enable()
