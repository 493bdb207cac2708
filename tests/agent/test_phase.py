"""§7.3 — phase, status, ``when_idle`` and maintenance (C7.3-1 … C7.3-13)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import pytest

from steerloop import (
    AbortSignal,
    AgentOptions,
    CancelCause,
    LlmError,
    Runtime,
    SessionEvent,
    define_tool,
)
from steerloop.testing import (
    HANG,
    error_response,
    raise_after,
    text_response,
    tool_call_response,
    wait_all_tasks_blocked,
)

from ..conftest import Harness, compact, events_of, settle, u, within
from ..support import Stuck, hanging

CANONICAL_1 = [
    "ins(nt,u1)", "T+1", "claim(nt,u1)", "S+1.1", "sys", "user(u1)", "hdr(initial)", "ctx",
    "msg", "S-1.1", "T-1:completed",
]  # fmt: skip


def statuses(rt: Runtime) -> list[str]:
    trace: list[str] = []
    rt.hooks.on("agent/status", lambda p: trace.append(p.status))
    return trace


def errors(rt: Runtime) -> list[tuple[int, int, BaseException]]:
    trace: list[tuple[int, int, BaseException]] = []
    rt.hooks.on("agent/error", lambda p: trace.append((p.turn, p.step, p.error)))
    return trace


def gated_job(
    result: Any = "done",
) -> tuple[Callable[[AbortSignal], Awaitable[Any]], asyncio.Event, list[AbortSignal]]:
    release = asyncio.Event()
    signals: list[AbortSignal] = []

    async def job(signal: AbortSignal) -> Any:
        signals.append(signal)
        await release.wait()
        return result

    return job, release, signals


def register_stuck(h: Harness) -> Stuck:
    stuck = Stuck()
    h.rt.tools.register(
        define_tool(name="stuck", description="stuck", parameters={"type": "object"}, execute=stuck)
    )
    return stuck


# --- status ----------------------------------------------------------------------------


async def test_new_agent_is_idle_without_status_event(h: Harness) -> None:
    """C7.3-1: a new agent is idle and emits no agent/status at creation."""
    trace = statuses(h.rt)
    agent = await h.agent()
    assert agent.status == "idle"
    await settle(agent)
    assert trace == []


async def test_waking_send_reports_running_synchronously(h: Harness) -> None:
    """C7.3-2: a waking send emits running before it returns; the driver ends with idle."""
    agent = await h.agent(text_response("r1"))
    trace = statuses(h.rt)
    seen_during: list[str] = []
    h.rt.hooks.on("agent/status", lambda p: seen_during.append(p.agent.status))
    agent.followup(u("u1"))
    assert trace == ["running"]
    assert agent.status == "running"
    await settle(agent)
    assert trace == ["running", "idle"]
    assert seen_during == ["running", "idle"]
    assert agent.status == "idle"


async def test_consecutive_turns_emit_one_running_one_idle(h: Harness) -> None:
    """C7.3-2: several turns of one driver emit no status events between them."""
    agent = await h.agent(text_response("r1"), text_response("r2"), text_response("r3"))
    trace = statuses(h.rt)
    agent.followup(u("u1"))
    agent.followup(u("u2"))
    agent.followup(u("u3"))
    await settle(agent)
    assert compact(agent.session, only=["T-"]) == [
        "T-1:completed", "T-2:completed", "T-3:completed",
    ]  # fmt: skip
    assert trace == ["running", "idle"]


async def test_maintenance_reports_idle_and_emits_nothing(h: Harness) -> None:
    """C7.3-3: entering and leaving maintenance emits no agent/status; status stays idle."""
    agent = await h.agent()
    trace = statuses(h.rt)
    job, release, _ = gated_job()
    result = agent.run_maintenance(job)
    assert agent.status == "idle"
    await wait_all_tasks_blocked()
    assert agent.status == "idle"
    release.set()
    assert await within(result) == "done"
    await settle(agent)
    assert trace == []
    assert agent.status == "idle"


async def test_maintenance_to_replayed_driver_emits_running_once(h: Harness) -> None:
    """C7.3-3: maintenance → replayed driver → idle emits exactly running, idle."""
    agent = await h.agent(text_response("r1"))
    trace = statuses(h.rt)
    job, release, _ = gated_job()
    result = agent.run_maintenance(job)
    agent.followup(u("u1"))
    assert trace == []
    release.set()
    await within(result)
    await settle(agent)
    assert trace == ["running", "idle"]


# --- maintenance -----------------------------------------------------------------------


async def test_run_maintenance_refused_while_running(h: Harness) -> None:
    """C7.3-4: run_maintenance on a running agent raises at once and changes nothing."""
    agent = await h.agent(HANG)
    agent.followup(u("u1"))
    calls: list[AbortSignal] = []

    async def job(signal: AbortSignal) -> None:
        calls.append(signal)

    before = compact(agent.session)
    with pytest.raises(RuntimeError):
        agent.run_maintenance(job)
    assert agent.status == "running"
    assert compact(agent.session) == before
    agent.cancel(CancelCause.user())
    await settle(agent)
    assert calls == []
    assert compact(agent.session, only=["T"]) == ["T+1", "T-1:aborted"]


async def test_run_maintenance_refused_during_maintenance(h: Harness) -> None:
    """C7.3-4: a second run_maintenance while one runs raises at once."""
    agent = await h.agent()
    job, release, signals = gated_job("first")
    first = agent.run_maintenance(job)
    calls: list[AbortSignal] = []

    async def second(signal: AbortSignal) -> None:
        calls.append(signal)

    with pytest.raises(RuntimeError):
        agent.run_maintenance(second)
    release.set()
    assert await within(first) == "first"
    assert calls == []
    assert len(signals) == 1
    assert list(agent.session.events) == []


async def test_run_maintenance_returns_result_with_live_signal(h: Harness) -> None:
    """C7.3-4: on an idle agent the job gets a signal and its result is returned."""
    agent = await h.agent()
    seen: list[AbortSignal] = []

    async def job(signal: AbortSignal) -> dict[str, int]:
        seen.append(signal)
        return {"answer": 42}

    assert await within(agent.run_maintenance(job)) == {"answer": 42}
    assert len(seen) == 1
    assert isinstance(seen[0], AbortSignal)
    assert seen[0].aborted is False
    assert agent.status == "idle"


async def test_run_maintenance_reraises_after_returning_to_idle(h: Harness) -> None:
    """C7.3-4: the job's exception is re-raised, and the agent is idle by then."""
    agent = await h.agent(text_response("r1"))

    class Boom(Exception):
        pass

    async def job(signal: AbortSignal) -> None:
        raise Boom("job failed")

    with pytest.raises(Boom, match="job failed"):
        await within(agent.run_maintenance(job))
    assert agent.status == "idle"
    await within(agent.when_idle())
    # idle again: another job may start and a followup runs a turn at once
    assert await within(agent.run_maintenance(_returning("again"))) == "again"
    agent.followup(u("u1"))
    assert compact(agent.session)[:3] == ["ins(nt,u1)", "T+1", "claim(nt,u1)"]
    await settle(agent)
    assert compact(agent.session) == CANONICAL_1


def _returning(value: Any) -> Callable[[AbortSignal], Awaitable[Any]]:
    async def job(signal: AbortSignal) -> Any:
        return value

    return job


async def test_cancel_during_maintenance_aborts_and_clears(h: Harness) -> None:
    """C7.3-5: cancel() aborts the job's signal with the cause and clears inbox and latch."""
    agent = await h.agent(text_response("never"))
    seen: list[Any] = []
    started = asyncio.Event()

    async def job(signal: AbortSignal) -> str:
        started.set()
        await signal.wait()
        seen.append(signal.reason)
        return "stopped"

    result = agent.run_maintenance(job)
    await within(started.wait())
    agent.inject(u("c"))
    agent.followup(u("u1"))
    cause = CancelCause.hook("budget")
    agent.cancel(cause)
    assert await within(result) == "stopped"
    await settle(agent)
    assert seen == [cause]
    assert compact(agent.session) == ["ins(ns,c)", "ins(nt,u1)", "drop(ns,c)", "drop(nt,u1)"]
    assert not agent.inbox.has_pending
    assert h.adapter.requests == []
    assert agent.status == "idle"


async def test_cancel_keep_inbox_during_maintenance_forgets_wake(h: Harness) -> None:
    """C7.3-5: with keep_inbox the queue survives, but the latched wake is forgotten."""
    agent = await h.agent(text_response("r1"))
    job, release, signals = gated_job()
    result = agent.run_maintenance(job)
    m = u("u1")
    agent.followup(m)
    agent.cancel(CancelCause.user(), keep_inbox=True)
    release.set()
    await within(result)
    await settle(agent)
    assert signals[0].aborted and signals[0].reason == CancelCause.user()
    assert compact(agent.session) == ["ins(nt,u1)"]
    assert agent.inbox.next_turn == (m,)
    assert h.adapter.requests == []


async def test_followup_during_maintenance_replays_after_job(h: Harness) -> None:
    """C7.3-6: followup during maintenance waits for the job; when_idle covers the replay."""
    agent = await h.agent(text_response("r1"))
    job, release, _ = gated_job()
    result = agent.run_maintenance(job)
    agent.followup(u("u1"))
    assert compact(agent.session) == ["ins(nt,u1)"]
    snapshots: list[list[str]] = []

    async def wait() -> None:
        await agent.when_idle()
        snapshots.append(compact(agent.session))

    waiter = asyncio.ensure_future(wait())
    await wait_all_tasks_blocked()
    assert not waiter.done()
    release.set()
    await within(result)
    await within(waiter)
    assert snapshots == [CANONICAL_1]


async def test_followup_removed_during_maintenance_no_replay(h: Harness) -> None:
    """C7.3-6 counterexample: u1 removed before the job finished starts no driver."""
    agent = await h.agent(text_response("never"))
    trace = statuses(h.rt)
    job, release, _ = gated_job()
    result = agent.run_maintenance(job)
    m = u("u1")
    agent.followup(m)
    agent.inbox.remove(m.id)
    release.set()
    await within(result)
    await settle(agent)
    assert compact(agent.session) == ["ins(nt,u1)", "drop(nt,u1)"]
    assert trace == []


# --- when_idle -------------------------------------------------------------------------


async def test_when_idle_returns_at_once_when_idle(h: Harness) -> None:
    """C7.3-7: when_idle() on an idle agent completes without suspending."""
    agent = await h.agent()
    agent.inject(u("c"))  # pending input, but no activity
    coro = agent.when_idle()
    with pytest.raises(StopIteration):
        coro.send(None)


async def test_when_idle_follows_relay_after_cancel(h: Harness) -> None:
    """C7.3-8: a waiter from before a cancel returns only after the replayed driver ended."""
    stuck = register_stuck(h)
    agent = await h.agent(tool_call_response("c1", "stuck", {}), text_response("r2"))
    agent.followup(u("u1"))
    await within(stuck.entered.wait())
    snapshots: list[list[str]] = []

    async def wait() -> None:
        await agent.when_idle()
        snapshots.append(compact(agent.session, only=["T"]))

    waiter = asyncio.ensure_future(wait())
    await wait_all_tasks_blocked()
    agent.cancel(CancelCause.user())
    agent.followup(u("u2"))
    stuck.release.set()
    await within(waiter)
    assert snapshots == [["T+1", "T-1:aborted", "T+2", "T-2:completed"]]
    assert agent.status == "idle"


@pytest.mark.parametrize("observes_signal", [True, False])
async def test_when_idle_after_cancel_during_pre_step(h: Harness, observes_signal: bool) -> None:
    """C7.3-9: a waiter registered before a cancel during pre-step returns after the turn closed."""
    agent = await h.agent(text_response("never"))
    entered, release = asyncio.Event(), asyncio.Event()

    async def pre_step(payload: Any, next_: Callable[[], Awaitable[Any]]) -> Any:
        entered.set()
        if observes_signal:
            await payload.signal.wait()
        else:
            await release.wait()
        return await next_()

    h.rt.hooks.on("agent/pre-step", pre_step)
    agent.followup(u("u1"))
    await within(entered.wait())
    waiter = asyncio.ensure_future(agent.when_idle())
    await wait_all_tasks_blocked()
    agent.cancel(CancelCause.user())
    release.set()
    await within(waiter)
    assert compact(agent.session) == ["ins(nt,u1)", "T+1", "claim(nt,u1)", "T-1:aborted"]
    assert h.adapter.requests == []


# --- failures --------------------------------------------------------------------------


async def test_turn_error_is_contained(h: Harness) -> None:
    """C7.3-10: a failed turn does not make when_idle raise; the next followup runs normally."""
    agent = await h.agent(error_response("E_BOOM", "boom"), text_response("r2"))
    trace = errors(h.rt)
    agent.followup(u("u1"))
    await settle(agent)
    ends = events_of(agent.session, "turn/end")
    assert [e.data.reason.kind for e in ends] == ["error"]
    assert ends[0].data.reason.error.code == "E_BOOM"
    assert ends[0].data.reason.error.message == "boom"
    assert len(trace) == 1
    assert isinstance(trace[0][2], LlmError)
    agent.followup(u("u2"))
    await settle(agent)
    assert compact(agent.session, only=["T"]) == ["T+1", "T-1:error", "T+2", "T-2:completed"]
    assert len(trace) == 1


async def test_stream_raise_is_contained(h: Harness) -> None:
    """C7.3-10: an adapter that raises mid-stream ends the turn error; when_idle is normal."""
    boom = RuntimeError("adapter broke")
    agent = await h.agent(raise_after([], boom))
    trace = errors(h.rt)
    agent.followup(u("u1"))
    await settle(agent)
    ends = events_of(agent.session, "turn/end")
    assert ends[-1].data.reason.kind == "error"
    assert ends[-1].data.reason.error.code == "UNKNOWN"
    assert "adapter broke" in ends[-1].data.reason.error.message
    assert [(t, s) for t, s, _ in trace] == [(1, 1)]
    assert trace[0][2] is boom or boom in _chain(trace[0][2])


def _chain(exc: BaseException) -> list[BaseException]:
    out: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and current not in out:
        out.append(current)
        current = current.__cause__ or current.__context__
    if isinstance(exc, BaseExceptionGroup):
        out.extend(exc.exceptions)
    return out


async def test_agent_error_in_step_carries_turn_and_step(h: Harness) -> None:
    """C7.3-11: agent/error inside a step carries turn, step and the exception object."""
    agent = await h.agent(text_response("r1"), error_response("E1", "second fails"))
    trace = errors(h.rt)
    agent.followup(u("u1"))
    agent.followup(u("u2"))
    await settle(agent)
    assert [(t, s) for t, s, _ in trace] == [(2, 1)]
    error = trace[0][2]
    assert isinstance(error, LlmError)
    assert error.failure.code == "E1"


async def test_agent_error_outside_step_has_step_zero(h: Harness) -> None:
    """C7.3-11: a failure outside a step (pre-step) reports step 0 and the raised object."""
    agent = await h.agent(text_response("never"))
    trace = errors(h.rt)
    boom = ValueError("pre-step failed")

    async def pre_step(payload: Any, next_: Callable[[], Awaitable[Any]]) -> Any:
        raise boom

    h.rt.hooks.on("agent/pre-step", pre_step)
    agent.followup(u("u1"))
    await settle(agent)
    assert trace == [(1, 0, boom)]
    assert compact(agent.session, only=["T", "S"]) == ["T+1", "T-1:error"]


async def test_cancel_never_emits_agent_error(h: Harness) -> None:
    """C7.3-11: cancellation (mid-stream, in tools, before a step) emits no agent/error."""
    stuck = register_stuck(h)
    started, entry = hanging()
    agent = await h.agent(entry, tool_call_response("c1", "stuck", {}))
    trace = errors(h.rt)
    agent.followup(u("u1"))
    await within(started.wait())
    agent.cancel(CancelCause.user())
    await settle(agent)
    agent.followup(u("u2"))
    await within(stuck.entered.wait())
    agent.cancel(CancelCause.hook("stop"))
    stuck.release.set()
    await settle(agent)
    agent.followup(u("u3"))
    agent.cancel(CancelCause.user())
    await settle(agent)
    assert compact(agent.session, only=["T-"]) == ["T-1:aborted", "T-2:aborted", "T-3:aborted"]
    assert trace == []


async def test_raising_listeners_are_contained(h: Harness) -> None:
    """C7.3-12: raising agent/status, agent/error and session/event listeners change nothing."""
    calls: list[str] = []

    def raiser(name: str) -> Callable[[Any], None]:
        def listener(payload: Any) -> None:
            calls.append(name)
            raise RuntimeError(f"listener of {name} broke")

        return listener

    for name in ("agent/status", "agent/error", "session/event"):
        h.rt.hooks.on(name, raiser(name))
    agent = await h.agent(
        text_response("r1"), error_response("E", "model failed"), text_response("r3")
    )
    agent.followup(u("u1"))
    agent.followup(u("u2"))
    await settle(agent)
    agent.followup(u("u3"))
    await settle(agent)
    assert compact(agent.session, only=["T", "S"]) == [
        "T+1", "S+1.1", "S-1.1", "T-1:completed",
        "T+2", "S+2.1", "S-2.1", "T-2:error",
        "T+3", "S+3.1", "S-3.1", "T-3:completed",
    ]  # fmt: skip
    assert {"agent/status", "agent/error", "session/event"} <= set(calls)
    assert calls.count("agent/error") == 1
    assert calls.count("agent/status") == 4
    assert agent.status == "idle"


async def test_new_agent_numbers_after_last_turn_in_log() -> None:
    """C7.3-13: an agent over an existing log numbers turns after its last turn/start."""
    from steerloop.testing import ScriptedAdapter

    rt = await Runtime.open(store="memory://")
    try:
        adapter = ScriptedAdapter([text_response("r1"), text_response("r3")])
        rt.llm.register_adapter(["mock"], adapter)
        options = AgentOptions(provider="mock", model="m")
        handle = await rt.agents.create(session_id="s-1", agent_options=options)
        agent = handle.agent
        agent.followup(u("u1"))
        await settle(agent)
        # turn 2 has no step: its message is removed by a listener during the send
        dispose = rt.hooks.on("agent/inbox/inserted", lambda p: p.agent.inbox.remove(p.message.id))
        agent.followup(u("u2"))
        dispose()
        await settle(agent)
        assert compact(agent.session, only=["T", "S"]) == [
            "T+1", "S+1.1", "S-1.1", "T-1:completed", "T+2", "T-2:completed",
        ]  # fmt: skip
        await within(handle.dispose())
        resumed = (await rt.agents.resume(resume_session_id="s-1", agent_options=options)).agent
        resumed.followup(u("u3"))
        assert _turn_numbers(resumed.session.events)[-1] == 3
        await settle(resumed)
        assert compact(resumed.session, only=["T"])[-2:] == ["T+3", "T-3:completed"]
    finally:
        await asyncio.wait_for(rt.close(), 5)


def _turn_numbers(events: Sequence[SessionEvent]) -> list[int]:
    return [e.data.turn for e in events if e.type == "turn/start"]
