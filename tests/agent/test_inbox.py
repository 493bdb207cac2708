"""§7.4 — one inbox, two targets, three ways to send (C7.4-1 … C7.4-24)."""

from __future__ import annotations

import asyncio
import math
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from steerloop import (
    CancelCause,
    MessageSource,
    ReasoningBlock,
    Runtime,
    SessionCorruptError,
    SessionEvent,
    ToolResult,
    UserMessage,
    define_tool,
    user_message,
)
from steerloop.agent._inbox import fold_inbox
from steerloop.llm._types import GenerateRequest
from steerloop.session._events import InboxSpliced
from steerloop.testing import (
    error_response,
    text_response,
    tool_call_response,
    wait_all_tasks_blocked,
)

from ..conftest import Harness, compact, events_of, label, settle, u, within
from ..support import Stuck, hanging

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


# --- sending and waking ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("call", "target", "wakes"),
    [
        ("followup", "next-turn", True),
        ("steer", "next-step", True),
        ("inject", "next-step", False),
        ("send-nt-wake", "next-turn", True),
        ("send-nt-quiet", "next-turn", False),
        ("send-ns-wake", "next-step", True),
        ("send-ns-quiet", "next-step", False),
    ],
)
async def test_send_mapping(h: Harness, call: str, target: str, wakes: bool) -> None:
    """C7.4-1: followup/steer/inject/send map to a target and a wake as in the table."""
    agent = await h.agent(text_response("ok"))
    m = u("m")
    if call.startswith("send"):
        _, short, mode = call.split("-")
        agent.send(m, "next-turn" if short == "nt" else "next-step", mode == "wake")
    else:
        getattr(agent, call)(m)
    assert spliced(agent)[0].target == target
    assert spliced(agent)[0].inserted == (m,)
    assert agent.status == ("running" if wakes else "idle")
    await settle(agent)
    assert len(h.adapter.requests) == (1 if wakes else 0)
    if wakes:
        assert compact(agent.session, only=["T"]) == ["T+1", "T-1:completed"]
    else:
        assert compact(agent.session) == [f"ins({'nt' if target == 'next-turn' else 'ns'},m)"]


async def test_idle_followup_opens_turn_before_returning(h: Harness) -> None:
    """C7.4-2: ins · T+1 · claim are in the log when followup() returns; hook order."""
    agent = await h.agent(text_response("ok"))
    trace = record(h.rt, "agent/inbox/inserted", "agent/status", "agent/inbox/claimed")
    agent.followup(u("u1"))
    assert compact(agent.session) == ["ins(nt,u1)", "T+1", "claim(nt,u1)"]
    assert trace == [("inserted", "u1"), ("status", "running"), ("claimed", ("u1", 1))]
    await settle(agent)
    assert compact(agent.session) == CANONICAL_1
    assert trace[-1] == ("status", "idle")


async def test_send_appends_at_end_of_target(h: Harness) -> None:
    """C7.4-2: a send's insertion is appended at the end of its target queue."""
    agent = await h.agent()
    a, b, c = u("a"), u("b"), u("c")
    agent.inject(a)
    agent.inject(b)
    agent.send(c, "next-turn", False)
    assert [(d.target, d.start) for d in spliced(agent)] == [
        ("next-step", 0),
        ("next-step", 1),
        ("next-turn", 0),
    ]
    assert agent.inbox.next_step == (a, b)
    assert agent.inbox.next_turn == (c,)


async def test_inject_on_idle_stays_pending(h: Harness) -> None:
    """C7.4-3: inject on idle writes ins(ns, m) only; status idle; m stays pending."""
    agent = await h.agent(text_response("never"))
    statuses = record(h.rt, "agent/status")
    m = u("m")
    agent.inject(m)
    assert compact(agent.session) == ["ins(ns,m)"]
    assert agent.status == "idle"
    await settle(agent)
    await wait_all_tasks_blocked()
    assert compact(agent.session) == ["ins(ns,m)"]
    assert agent.inbox.next_step == (m,)
    assert statuses == []
    assert h.adapter.requests == []


async def test_steer_on_idle_starts_turn(h: Harness) -> None:
    """C7.4-4: steer on idle starts a turn and m is admitted in its first step."""
    agent = await h.agent(text_response("ok"))
    agent.steer(u("m"))
    assert agent.status == "running"
    await settle(agent)
    assert compact(agent.session) == [
        "ins(ns,m)", "T+1", "claim(ns,m)", "S+1.1", "sys", "user(m)", "hdr(initial)", "ctx",
        "msg", "S-1.1", "T-1:completed",
    ]  # fmt: skip
    assert request_texts(h.adapter.requests[0]) == ["user:m"]


TWO_TURNS = [
    "T+1", "claim(nt,u1)", "user(u1)", "T-1:completed",
    "T+2", "claim(nt,u2)", "user(u2)", "T-2:completed",
]  # fmt: skip


async def test_two_idle_followups_two_turns(h: Harness) -> None:
    """C7.4-5: followup(u1); followup(u2) on idle gives two turns in send order."""
    agent = await h.agent(text_response("r1"), text_response("r2"))
    statuses = record(h.rt, "agent/status")
    agent.followup(u("u1"))
    agent.followup(u("u2"))
    await settle(agent)
    assert compact(agent.session, only=["T", "claim", "user"]) == TWO_TURNS
    assert [request_texts(r)[-1] for r in h.adapter.requests] == ["user:u1", "user:u2"]
    assert statuses == [("status", "running"), ("status", "idle")]


async def test_second_followup_from_later_iteration(h: Harness) -> None:
    """C7.4-5: u2 sent from a later event-loop iteration (turn 1 in flight) gets turn 2."""
    release = asyncio.Event()
    streaming = asyncio.Event()

    async def first(request: GenerateRequest) -> Any:
        streaming.set()
        await release.wait()
        return text_response("r1")

    agent = await h.agent(first, text_response("r2"))
    agent.followup(u("u1"))
    await within(streaming.wait())
    agent.followup(u("u2"))
    release.set()
    await settle(agent)
    assert compact(agent.session, only=["T", "claim", "user"]) == TWO_TURNS
    assert len(h.adapter.requests) == 2
    assert "user:u2" not in request_texts(h.adapter.requests[0])


async def test_second_followup_from_inside_adapter(h: Harness) -> None:
    """C7.4-5: u2 sent from inside the adapter while turn 1 streams gets turn 2."""
    holder: list[Any] = []

    def first(request: GenerateRequest) -> Any:
        holder[0].followup(u("u2"))
        return text_response("r1")

    agent = await h.agent(first, text_response("r2"))
    holder.append(agent)
    agent.followup(u("u1"))
    await settle(agent)
    assert compact(agent.session, only=["T", "claim", "user"]) == TWO_TURNS
    assert request_texts(h.adapter.requests[1])[-1] == "user:u2"


async def test_steer_while_running_next_step_after_message(h: Harness) -> None:
    """C7.4-6: a steer during a text step is admitted in a new step of the same turn."""
    holder: list[Any] = []

    def first(request: GenerateRequest) -> Any:
        holder[0].steer(u("m"))
        return text_response("r1")

    agent = await h.agent(first, text_response("r2"))
    holder.append(agent)
    agent.followup(u("u1"))
    await settle(agent)
    assert compact(agent.session, only=["T", "S", "user", "msg", "claim", "ins"]) == [
        "ins(nt,u1)", "T+1", "claim(nt,u1)", "S+1.1", "user(u1)", "ins(ns,m)", "msg", "S-1.1",
        "claim(ns,m)", "S+1.2", "user(m)", "msg", "S-1.2", "T-1:completed",
    ]  # fmt: skip


async def test_steer_from_tool_admitted_after_results(h: Harness) -> None:
    """C7.4-6: a steer from a tool body lands after the step's tool/result, same turn."""
    holder: list[Any] = []

    async def body(args: Any, exec: Any) -> str:
        holder[0].steer(u("m"))
        return "done"

    h.rt.tools.register(gated_tool("work", body))
    agent = await h.agent(tool_call_response("c1", "work", {}), text_response("r2"))
    holder.append(agent)
    agent.followup(u("u1"))
    await settle(agent)
    assert compact(agent.session, only=["T", "S", "user", "result", "call", "claim(ns"]) == [
        "T+1", "S+1.1", "user(u1)", "call(c1)", "result(c1)", "S-1.1",
        "claim(ns,m)", "S+1.2", "user(m)", "S-1.2", "T-1:completed",
    ]  # fmt: skip
    assert request_texts(h.adapter.requests[1])[-1] == "user:m"


async def test_followup_while_running_waits_for_next_turn(h: Harness) -> None:
    """C7.4-6 counterexample: a followup at the same moment waits for the next turn."""
    holder: list[Any] = []

    async def body(args: Any, exec: Any) -> str:
        holder[0].followup(u("m"))
        return "done"

    h.rt.tools.register(gated_tool("work", body))
    agent = await h.agent(
        tool_call_response("c1", "work", {}), text_response("r2"), text_response("r3")
    )
    holder.append(agent)
    agent.followup(u("u1"))
    await settle(agent)
    assert compact(agent.session, only=["T", "S", "user", "result", "claim"]) == [
        "T+1", "claim(nt,u1)", "S+1.1", "user(u1)", "result(c1)", "S-1.1",
        "S+1.2", "S-1.2", "T-1:completed",
        "T+2", "claim(nt,m)", "S+2.1", "user(m)", "S-2.1", "T-2:completed",
    ]  # fmt: skip
    assert all("user:m" not in request_texts(r) for r in h.adapter.requests[:2])


async def test_inject_from_adapter_extends_last_step(h: Harness) -> None:
    """C7.4-7: an inject during a step that would be the last forces another step."""
    holder: list[Any] = []

    def first(request: GenerateRequest) -> Any:
        holder[0].inject(u("c"))
        return text_response("r1")

    agent = await h.agent(first, text_response("r2"))
    holder.append(agent)
    statuses = record(h.rt, "agent/status")
    agent.followup(u("u1"))
    await settle(agent)
    assert compact(agent.session, only=["T", "S", "user", "claim(ns"]) == [
        "T+1", "S+1.1", "user(u1)", "S-1.1", "claim(ns,c)", "S+1.2", "user(c)", "S-1.2",
        "T-1:completed",
    ]  # fmt: skip
    assert statuses == [("status", "running"), ("status", "idle")]


async def test_inject_from_concluding_tool_extends_turn(h: Harness) -> None:
    """C7.4-7: an inject from a tool body whose result concludes the turn still runs a step."""
    holder: list[Any] = []

    async def body(args: Any, exec: Any) -> str:
        holder[0].inject(u("c"))
        return "done"

    h.rt.tools.register(gated_tool("work", body, concludes=True))
    agent = await h.agent(tool_call_response("c1", "work", {}), text_response("r2"))
    holder.append(agent)
    agent.followup(u("u1"))
    await settle(agent)
    assert compact(agent.session, only=["T", "S", "user", "result", "claim(ns"]) == [
        "T+1", "S+1.1", "user(u1)", "result(c1)", "S-1.1",
        "claim(ns,c)", "S+1.2", "user(c)", "S-1.2", "T-1:completed",
    ]  # fmt: skip
    assert request_texts(h.adapter.requests[1])[-2:] == ["tool:done", "user:c"]


async def test_inject_after_turn_closed_stays_pending(h: Harness) -> None:
    """C7.4-7 counterexample: an inject after the turn closed stays pending, starts nothing."""
    agent = await h.agent(text_response("r1"))
    agent.followup(u("u1"))
    await settle(agent)
    c = u("c")
    agent.inject(c)
    await settle(agent)
    assert compact(agent.session) == [*CANONICAL_1, "ins(ns,c)"]
    assert agent.inbox.next_step == (c,)
    assert agent.status == "idle"


async def _stuck_agent(h: Harness, *script: Any) -> tuple[Any, Stuck]:
    stuck = Stuck()
    h.rt.tools.register(gated_tool("stuck", stuck))
    agent = await h.agent(tool_call_response("c1", "stuck", {}), *script)
    agent.followup(u("u1"))
    await within(stuck.entered.wait())
    return agent, stuck


@pytest.mark.parametrize("call", ["steer", "followup"])
async def test_wake_during_abort_is_redirected_and_latched(h: Harness, call: str) -> None:
    """C7.4-8: a waking send while the signal is aborted goes to next-turn and is replayed."""
    agent, stuck = await _stuck_agent(h, text_response("r2"))
    agent.cancel(CancelCause.user())
    getattr(agent, call)(u("m"))
    assert compact(agent.session)[-1] == "ins(nt,m)"
    waiter = asyncio.ensure_future(agent.when_idle())
    stuck.release.set()
    await within(waiter)
    assert compact(agent.session, only=["T", "S", "user", "result", "claim", "ins"]) == [
        "ins(nt,u1)", "T+1", "claim(nt,u1)", "S+1.1", "user(u1)", "ins(nt,m)",
        "result(c1,ABORTED)", "S-1.1", "T-1:aborted",
        "T+2", "claim(nt,m)", "S+2.1", "user(m)", "S-2.1", "T-2:completed",
    ]  # fmt: skip
    assert agent.status == "idle"


async def test_inject_during_abort_parks(h: Harness) -> None:
    """C7.4-8 counterexample: inject in the abort window is neither redirected nor latched."""
    agent, stuck = await _stuck_agent(h, text_response("never"))
    agent.cancel(CancelCause.user())
    c = u("c")
    agent.inject(c)
    assert compact(agent.session)[-1] == "ins(ns,c)"
    stuck.release.set()
    await settle(agent)
    assert compact(agent.session, only=["T"]) == ["T+1", "T-1:aborted"]
    assert agent.inbox.next_step == (c,)
    assert len(h.adapter.requests) == 1


@pytest.mark.parametrize("hook", ["agent/inbox/inserted", "session/event"])
async def test_redirect_decided_before_insertion(h: Harness, hook: str) -> None:
    """C7.4-9: a re-entrant cancel(keep_inbox) during steer does not redirect or latch."""
    started, entry = hanging()
    agent = await h.agent(entry, text_response("never"))
    agent.followup(u("u1"))
    m = u("m")

    def listener(payload: Any) -> None:
        if hook == "session/event":
            data = payload.event.data
            if not (isinstance(data, InboxSpliced) and m in data.inserted):
                return
        elif payload.message is not m:
            return
        agent.cancel(CancelCause.user(), keep_inbox=True)

    h.rt.hooks.on(hook, listener)
    await within(started.wait())  # the turn is streaming, not just opened
    agent.steer(m)
    await settle(agent)
    log = compact(agent.session)
    assert "ins(ns,m)" in log
    assert "ins(nt,m)" not in log
    assert compact(agent.session, only=["T"]) == ["T+1", "T-1:aborted"]
    assert agent.inbox.next_step == (m,)
    assert len(h.adapter.requests) == 1


async def _maintenance(agent: Any) -> tuple[asyncio.Future[Any], asyncio.Event]:
    release = asyncio.Event()

    async def job(signal: Any) -> str:
        await release.wait()
        return "job"

    future = asyncio.ensure_future(agent.run_maintenance(job))
    return future, release


async def test_many_wakes_during_maintenance_one_replay(h: Harness) -> None:
    """C7.4-10: several wakes during maintenance replay once; the driver claims the queue."""
    agent = await h.agent(text_response("r1"), text_response("r2"))
    statuses = record(h.rt, "agent/status")
    job, release = await _maintenance(agent)
    agent.followup(u("u1"))
    agent.followup(u("u2"))
    agent.steer(u("s"))
    assert compact(agent.session) == ["ins(nt,u1)", "ins(nt,u2)", "ins(ns,s)"]
    release.set()
    assert await within(job) == "job"
    await settle(agent)
    assert compact(agent.session, only=["T", "claim", "user"]) == [
        "T+1", "claim(ns,s)", "claim(nt,u1)", "user(s)", "user(u1)", "T-1:completed",
        "T+2", "claim(nt,u2)", "user(u2)", "T-2:completed",
    ]  # fmt: skip
    assert statuses == [("status", "running"), ("status", "idle")]


async def test_latched_wake_with_removed_message_starts_nothing(h: Harness) -> None:
    """C7.4-11: a latched wake whose message was removed before convergence starts nothing."""
    agent = await h.agent(text_response("never"))
    job, release = await _maintenance(agent)
    m = u("m")
    agent.followup(m)
    assert agent.inbox.remove(m.id) is True
    release.set()
    await within(job)
    await settle(agent)
    assert compact(agent.session) == ["ins(nt,m)", "drop(nt,m)"]
    assert h.adapter.requests == []


async def test_latched_wake_cleared_by_cancel_starts_nothing(h: Harness) -> None:
    """C7.4-11: a latched wake whose input cancel() cleared starts nothing."""
    agent, stuck = await _stuck_agent(h, text_response("never"))
    agent.cancel(CancelCause.user())
    agent.followup(u("m"))
    agent.cancel(CancelCause.user())
    stuck.release.set()
    await settle(agent)
    assert compact(agent.session, only=["T", "ins(nt,m", "drop"]) == [
        "T+1", "ins(nt,m)", "drop(nt,m)", "T-1:aborted",
    ]  # fmt: skip
    assert len(h.adapter.requests) == 1


async def test_latched_wake_with_other_pending_input_replays(h: Harness) -> None:
    """C7.4-11: replay needs *some* pending input; a parked inject is enough."""
    agent = await h.agent(text_response("r1"))
    job, release = await _maintenance(agent)
    m = u("m")
    agent.inject(u("c"))
    agent.followup(m)
    agent.inbox.remove(m.id)
    release.set()
    await within(job)
    await settle(agent)
    assert compact(agent.session, only=["T", "claim", "user"]) == [
        "T+1", "claim(ns,c)", "user(c)", "T-1:completed",
    ]  # fmt: skip


async def test_idle_wake_opens_turn_even_if_message_removed(h: Harness) -> None:
    """C7.4-12: an idle wake whose message a listener removed still opens an empty turn."""
    agent = await h.agent(text_response("never"))
    h.rt.hooks.on("agent/inbox/inserted", lambda p: p.agent.inbox.remove(p.message.id))
    agent.followup(u("u1"))
    await settle(agent)
    assert compact(agent.session) == ["ins(nt,u1)", "drop(nt,u1)", "T+1", "T-1:completed"]
    assert h.adapter.requests == []


async def test_latched_wake_removed_by_listener_opens_no_turn(h: Harness) -> None:
    """C7.4-12 counterexample: the same removal of a latched wake gives no turn/start."""
    agent = await h.agent(text_response("never"))
    job, release = await _maintenance(agent)
    h.rt.hooks.on("agent/inbox/inserted", lambda p: p.agent.inbox.remove(p.message.id))
    agent.followup(u("u1"))
    release.set()
    await within(job)
    await settle(agent)
    assert compact(agent.session) == ["ins(nt,u1)", "drop(nt,u1)"]
    assert h.adapter.requests == []


async def test_status_listener_cancel_prevents_turn(h: Harness) -> None:
    """C7.4-13: cancel() from the agent/status(running) listener prevents the turn."""
    agent = await h.agent(text_response("never"))
    statuses: list[str] = []

    def on_status(payload: Any) -> None:
        statuses.append(payload.status)
        if payload.status == "running":
            payload.agent.cancel(CancelCause.user())

    h.rt.hooks.on("agent/status", on_status)
    agent.followup(u("u1"))
    assert agent.status == "idle"
    await settle(agent)
    assert compact(agent.session) == ["ins(nt,u1)", "drop(nt,u1)"]
    assert statuses == ["running", "idle"]
    assert h.adapter.requests == []


async def test_send_during_teardown_never_latches(h: Harness) -> None:
    """C7.4-14: a waking send after cancel(disposed) during teardown starts no turn."""
    started, entry = hanging()
    h.adapter.add(entry, text_response("never"))
    handle = await h.rt.agents.create(session_id="s-1", agent_options=_options())
    agent = handle.agent
    agent.followup(u("u1"))
    await within(started.wait())
    signal = h.adapter.requests[0].signal
    assert signal is not None
    signal.add_listener(lambda reason: agent.followup(u("u2")))
    await within(handle.dispose())
    assert "ins(nt,u2)" in compact(agent.session)
    assert compact(agent.session, only=["T"]) == ["T+1", "T-1:aborted"]
    assert len(h.adapter.requests) == 1


async def test_wake_after_direct_disposed_cancel_never_latches(h: Harness) -> None:
    """C7.4-14: after cancel(CancelCause.disposed()) a waking send is not latched."""
    started, entry = hanging()
    h.adapter.add(entry, text_response("never"))
    handle = await h.rt.agents.create(session_id="s-1", agent_options=_options())
    agent = handle.agent
    agent.followup(u("u1"))
    await within(started.wait())
    agent.cancel(CancelCause.disposed())
    agent.followup(u("u2"))
    await settle(agent)
    assert compact(agent.session, only=["T", "ins"]) == [
        "ins(nt,u1)", "T+1", "ins(nt,u2)", "T-1:aborted",
    ]  # fmt: skip
    await within(handle.dispose())
    assert compact(agent.session, only=["T"]) == ["T+1", "T-1:aborted"]
    assert len(h.adapter.requests) == 1


def _options() -> Any:
    from steerloop import AgentOptions

    return AgentOptions(provider="mock", model="m")


def _bad_messages() -> list[UserMessage]:
    return [
        user_message([ReasoningBlock("r", replay_state=object())]),
        user_message([ReasoningBlock("r", replay_state=math.nan)]),
        user_message("x", source=MessageSource(kind="user", extra={"k": {1, 2}})),
    ]


@pytest.mark.parametrize("index", range(3))
@pytest.mark.parametrize("call", ["followup", "steer", "inject", "send"])
async def test_non_json_message_rejected(h: Harness, call: str, index: int) -> None:
    """C7.4-15: a non-JSON-serialisable message is rejected with ValueError, nothing written."""
    agent = await h.agent(text_response("never"))
    bad = _bad_messages()[index]
    statuses = record(h.rt, "agent/status", "agent/inbox/inserted")
    with pytest.raises(ValueError):
        if call == "send":
            agent.send(bad, "next-turn", True)
        else:
            getattr(agent, call)(bad)
    assert list(agent.session.events) == []
    assert not agent.inbox.has_pending
    assert statuses == []
    assert agent.status == "idle"


# --- splice normalisation and validation -----------------------------------------------


async def _filled(h: Harness, n: int = 5) -> tuple[Any, list[UserMessage]]:
    agent = await h.agent()
    messages = [u(chr(ord("a") + i)) for i in range(n)]
    for m in messages:
        agent.inbox.append("next-turn", m)
    return agent, messages


@pytest.mark.parametrize(
    ("start", "delete_count", "norm_start", "norm_removed"),
    [
        (1, 2, 1, 2),
        (1.9, 2.9, 1, 2),
        (-1, 1, 4, 1),
        (-1.5, 5, 4, 1),
        (-2, math.inf, 3, 2),
        (-7, 1, 0, 1),
        (-(10**30), 2, 0, 2),
        (7, 1, 5, 0),
        (10**30, 3, 5, 0),
        (math.inf, 2, 5, 0),
        (-math.inf, 2, 0, 2),
        (math.nan, 2, 0, 2),
        (-0.5, 1, 0, 1),
        (2, math.inf, 2, 3),
        (2, math.nan, 2, 0),
        (2, -3, 2, 0),
        (2, -math.inf, 2, 0),
        (2, 10**30, 2, 3),
        (0, 5.99, 0, 5),
        (3, 1e300, 3, 2),
    ],
)
async def test_splice_normalisation(
    h: Harness, start: Any, delete_count: Any, norm_start: int, norm_removed: int
) -> None:
    """C7.4-16: start/delete_count follow the documented normalisation; the event logs it."""
    agent, messages = await _filled(h)
    x = u("x")
    removed = agent.inbox.splice("next-turn", start, delete_count, [x])
    assert removed == messages[norm_start : norm_start + norm_removed]
    event = spliced(agent)[-1]
    assert (event.start, event.removed_count, event.inserted) == (norm_start, norm_removed, (x,))
    expected = list(messages)
    expected[norm_start : norm_start + norm_removed] = [x]
    assert list(agent.inbox.next_turn) == expected
    assert event.outcome == ("canceled" if norm_removed else None)


@pytest.mark.parametrize("bad", ["1", None, [1], object()])
async def test_splice_rejects_non_numbers(h: Harness, bad: Any) -> None:
    """C7.4-16: start/delete_count must be numbers; anything else raises ValueError."""
    agent, messages = await _filled(h, 2)
    before = len(agent.session.events)
    with pytest.raises(ValueError):
        agent.inbox.splice("next-turn", bad, 1)
    with pytest.raises(ValueError):
        agent.inbox.splice("next-turn", 0, bad)
    assert len(agent.session.events) == before
    assert list(agent.inbox.next_turn) == messages


async def test_splice_rejects_unknown_target(h: Harness) -> None:
    """C7.4-16: an unknown target raises ValueError and writes nothing."""
    agent = await h.agent()
    with pytest.raises(ValueError):
        agent.inbox.splice("later", 0, 0, [u("x")])
    assert list(agent.session.events) == []


async def test_splice_returns_removed_and_noop_is_silent(h: Harness) -> None:
    """C7.4-17: splice returns the removed messages; a no-op writes and fires nothing."""
    agent, messages = await _filled(h, 3)
    trace = record(h.rt, "agent/inbox/inserted", "agent/inbox/discarded")
    events: list[Any] = []
    h.rt.hooks.on("session/event", lambda p: events.append(p.event))
    assert agent.inbox.splice("next-turn", 0, 0) == []
    assert agent.inbox.splice("next-turn", 3, 2, []) == []
    assert agent.inbox.splice("next-turn", math.inf, math.inf) == []
    assert agent.inbox.splice("next-step", 0, math.inf) == []
    assert agent.inbox.splice("next-turn", 1, -1, ()) == []
    assert events == [] and trace == []
    assert len(agent.session.events) == 3
    assert agent.inbox.splice("next-turn", 1, math.inf) == messages[1:]
    assert trace == [("discarded", "b"), ("discarded", "c")]
    assert len(events) == 1


@pytest.mark.parametrize("where", ["same-queue", "other-queue", "twice-in-items"])
async def test_duplicate_pending_id_rejected(h: Harness, where: str) -> None:
    """C7.4-18: inserting an id already pending in either queue raises ValueError."""
    agent = await h.agent()
    a, b = u("a"), u("b")
    agent.inbox.append("next-turn", a)
    agent.inbox.append("next-step", b)
    before = list(agent.session.events)
    trace = record(h.rt, "agent/inbox/inserted")
    with pytest.raises(ValueError):
        if where == "same-queue":
            agent.inbox.splice("next-turn", 1, 0, [UserMessage(id=a.id, content=a.content)])
        elif where == "other-queue":
            agent.inbox.append("next-turn", b)
        else:
            c = u("c")
            agent.inbox.splice("next-step", 0, 0, [c, c])
    assert list(agent.session.events) == before
    assert agent.inbox.next_turn == (a,) and agent.inbox.next_step == (b,)
    assert trace == []


async def test_duplicate_send_rejected(h: Harness) -> None:
    """C7.4-18: sending a message whose id is pending raises ValueError and wakes nothing."""
    agent = await h.agent(text_response("never"))
    m = u("m")
    agent.inject(m)
    with pytest.raises(ValueError):
        agent.followup(m)
    z = u("z")
    agent.send(z, "next-turn", False)
    with pytest.raises(ValueError):
        agent.inbox.replace(z.id, m)
    assert compact(agent.session) == ["ins(ns,m)", "ins(nt,z)"]
    assert agent.status == "idle"


async def test_append_prepend_are_splices_at_ends(h: Harness) -> None:
    """C7.4-19: append/prepend are splices at n and 0."""
    agent = await h.agent()
    a, b, c = u("a"), u("b"), u("c")
    agent.inbox.append("next-step", a)
    agent.inbox.append("next-step", b)
    agent.inbox.prepend("next-step", c)
    assert [
        (d.target, d.start, d.removed_count, d.inserted, d.outcome) for d in spliced(agent)
    ] == [
        ("next-step", 0, 0, (a,), None),
        ("next-step", 1, 0, (b,), None),
        ("next-step", 0, 0, (c,), None),
    ]
    assert agent.inbox.next_step == (c, a, b)


async def test_replace_rewrites_in_place(h: Harness) -> None:
    """C7.4-19: replace is one canceled splice with removed_count=1; False when not pending."""
    agent = await h.agent()
    a, b, c = u("a"), u("b"), u("c")
    agent.inbox.append("next-turn", a)
    agent.inbox.append("next-turn", b)
    trace = record(h.rt, "agent/inbox/inserted", "agent/inbox/discarded")
    b2 = u("b2")
    assert agent.inbox.replace(b.id, b2) is True
    event = spliced(agent)[-1]
    assert (event.target, event.start, event.removed_count, event.inserted, event.outcome) == (
        "next-turn", 1, 1, (b2,), "canceled",
    )  # fmt: skip
    assert agent.inbox.next_turn == (a, b2)
    assert trace == [("discarded", "b"), ("inserted", "b2")]
    count = len(agent.session.events)
    assert agent.inbox.replace(b.id, c) is False
    assert agent.inbox.replace("nope", c) is False
    assert len(agent.session.events) == count
    same_id = UserMessage(id=a.id, content=c.content)
    assert agent.inbox.replace(a.id, same_id) is True
    assert agent.inbox.next_turn == (same_id, b2)


def _ev(seq: int, data: InboxSpliced) -> SessionEvent:
    return SessionEvent(seq=seq, time=0, type="agent/inbox/spliced", data=data)


@pytest.mark.parametrize(
    "bad",
    [
        InboxSpliced(target="next-turn", start=2, removed_count=0, inserted=()),
        InboxSpliced(target="next-turn", start=1, removed_count=1),
        InboxSpliced(target="next-turn", start=0, removed_count=2),
        InboxSpliced(target="next-turn", start=-1, removed_count=1),
        InboxSpliced(target="next-turn", start=0, removed_count=-1, inserted=()),
        InboxSpliced(target="next-step", start=0, removed_count=1),
        InboxSpliced(target="next-turn", start=0.5, removed_count=0),  # type: ignore[arg-type]
        InboxSpliced(target="next-turn", start=0, removed_count=1.0),  # type: ignore[arg-type]
        InboxSpliced(target="nowhere", start=0),  # type: ignore[arg-type]
    ],
)
def test_fold_rejects_impossible_range(bad: InboxSpliced) -> None:
    """C7.4-20: a splice outside the queue makes fold_inbox raise naming the seq."""
    a = u("a")
    events = [_ev(1, InboxSpliced(target="next-turn", start=0, inserted=(a,))), _ev(2, bad)]
    with pytest.raises(SessionCorruptError, match=r"seq 2\b"):
        fold_inbox(events)


@pytest.mark.parametrize("where", ["same-queue", "other-queue", "within-items"])
def test_fold_rejects_duplicate_pending_id(where: str) -> None:
    """C7.4-20: a splice making a pending id appear twice makes fold_inbox raise."""
    a = u("a")
    twin = UserMessage(id=a.id, content=u("twin").content)
    first = _ev(1, InboxSpliced(target="next-turn", start=0, inserted=(a,)))
    if where == "same-queue":
        bad = InboxSpliced(target="next-turn", start=1, inserted=(twin,))
    elif where == "other-queue":
        bad = InboxSpliced(target="next-step", start=0, inserted=(twin,))
    else:
        b = u("b")
        bad = InboxSpliced(target="next-step", start=0, inserted=(b, b))
    with pytest.raises(SessionCorruptError, match=r"seq 5\b"):
        fold_inbox([first, _ev(5, bad)])


def test_fold_accepts_possible_log() -> None:
    """C7.4-20: a valid log folds to its queues (claims, drops, in-place rewrites)."""
    a, b, c = u("a"), u("b"), u("c")
    a2 = UserMessage(id=a.id, content=u("a2").content)
    events = [
        _ev(1, InboxSpliced(target="next-turn", start=0, inserted=(a, b))),
        _ev(2, InboxSpliced(target="next-step", start=0, inserted=(c,))),
        _ev(3, InboxSpliced(target="next-turn", start=0, removed_count=1, inserted=(a2,))),
        _ev(4, InboxSpliced(target="next-step", start=0, removed_count=1)),
        _ev(
            5,
            InboxSpliced(target="next-turn", start=1, removed_count=1, outcome="canceled"),
        ),
    ]
    queues = fold_inbox(events)
    assert queues == {"next-turn": [a2], "next-step": []}


async def test_fold_of_live_log_equals_inbox(h: Harness) -> None:
    """C7.4-20: the fold of a live log (sends, claims, drops) equals the live inbox."""
    agent = await h.agent(text_response("r1"))
    agent.inject(u("c"))
    agent.followup(u("u1"))
    agent.followup(u("u2"))
    agent.inbox.remove(agent.inbox.next_turn[0].id)
    await settle(agent)
    agent.send(u("q"), "next-turn", False)
    queues = fold_inbox(agent.session.events)
    assert queues == {"next-turn": list(agent.inbox.next_turn), "next-step": []}
    assert [label(m) for m in queues["next-turn"]] == ["q"]


# --- claim, remove, discard -----------------------------------------------------------


async def test_claim_order_and_hooks(h: Harness) -> None:
    """C7.4-21: a first-step claim takes all next-step, then the first next-turn message."""
    agent = await h.agent(text_response("r1"), text_response("r2"))
    trace = record(h.rt, "agent/inbox/claimed", "agent/inbox/discarded")
    agent.inject(u("c"))
    agent.followup(u("u1"))
    agent.followup(u("u2"))
    await settle(agent)
    assert compact(agent.session, only=["T", "claim", "user", "drop"]) == [
        "T+1", "claim(ns,c)", "claim(nt,u1)", "user(c)", "user(u1)", "T-1:completed",
        "T+2", "claim(nt,u2)", "user(u2)", "T-2:completed",
    ]  # fmt: skip
    claims = [d for d in spliced(agent) if d.removed_count]
    assert [(d.target, d.start, d.removed_count, d.outcome) for d in claims] == [
        ("next-step", 0, 1, None),
        ("next-turn", 0, 1, None),
        ("next-turn", 0, 1, None),
    ]
    assert trace == [("claimed", ("c", 1)), ("claimed", ("u1", 1)), ("claimed", ("u2", 2))]


async def test_claim_takes_all_next_step_in_one_splice(h: Harness) -> None:
    """C7.4-21: every next-step message is claimed, in queue order."""
    agent = await h.agent(text_response("r1"))
    agent.inject(u("c1"))
    agent.inject(u("c2"))
    agent.steer(u("s"))
    await settle(agent)
    assert compact(agent.session, only=["claim", "user"]) == [
        "claim(ns,c1)", "claim(ns,c2)", "claim(ns,s)", "user(c1)", "user(c2)", "user(s)",
    ]  # fmt: skip


async def test_discard_only_for_host_removals(h: Harness) -> None:
    """C7.4-22: claims fire no discarded; remove/clear/splice/replace/cancel do, once each."""
    agent = await h.agent(text_response("r1"))
    trace = record(h.rt, "agent/inbox/discarded")
    agent.followup(u("u1"))
    await settle(agent)
    assert trace == []
    inbox = agent.inbox
    for name in "abcdefgh":
        inbox.append("next-turn" if name in "abcdef" else "next-step", u(name))
    before = len(spliced(agent))
    assert inbox.remove(inbox.next_turn[0].id) is True  # a
    inbox.splice("next-turn", 0, 2)  # b, c
    inbox.replace(inbox.next_turn[0].id, u("d2"))  # d
    inbox.clear()  # g, h then d2, e, f
    assert trace == [("discarded", x) for x in ["a", "b", "c", "d", "g", "h", "d2", "e", "f"]]
    assert all(d.outcome == "canceled" for d in spliced(agent)[before:] if d.removed_count)
    assert [d.removed_count for d in spliced(agent)[before:]] == [1, 2, 1, 2, 3]
    inbox.append("next-step", u("i"))
    agent.cancel(CancelCause.user())
    assert trace[-1] == ("discarded", "i")
    assert spliced(agent)[-1].outcome == "canceled"


@pytest.mark.parametrize(
    ("step", "turn", "expected"),
    [
        (True, True, ["drop(ns,s1)", "drop(ns,s2)", "drop(nt,t1)"]),
        (True, False, ["drop(ns,s1)", "drop(ns,s2)"]),
        (False, True, ["drop(nt,t1)"]),
        (False, False, []),
    ],
)
async def test_clear_order(h: Harness, step: bool, turn: bool, expected: list[str]) -> None:
    """C7.4-23: clear empties next-step first, then next-turn; one event per non-empty queue."""
    agent = await h.agent()
    if turn:
        agent.inbox.append("next-turn", u("t1"))
    if step:
        agent.inbox.append("next-step", u("s1"))
        agent.inbox.append("next-step", u("s2"))
    before = len(agent.session.events)
    agent.inbox.clear()
    assert compact(agent.session)[before:] == expected
    assert len(agent.session.events) - before == int(step) + int(turn)
    assert not agent.inbox.has_pending


async def _blocked_pre_step(h: Harness) -> tuple[asyncio.Event, asyncio.Event]:
    entered, release = asyncio.Event(), asyncio.Event()

    async def pre_step(payload: Any, next_: Callable[[], Awaitable[Any]]) -> Any:
        entered.set()
        await release.wait()
        return await next_()

    h.rt.hooks.on("agent/pre-step", pre_step)
    return entered, release


async def test_remove_of_claimed_message_is_false(h: Harness) -> None:
    """C7.4-24: remove() of a claimed, not yet admitted message returns False; it is admitted."""
    agent = await h.agent(text_response("r1"))
    entered, release = await _blocked_pre_step(h)
    m = u("u1")
    agent.followup(m)
    await within(entered.wait())
    count = len(agent.session.events)
    assert agent.inbox.remove(m.id) is False
    assert agent.inbox.replace(m.id, u("z")) is False
    assert len(agent.session.events) == count
    release.set()
    await settle(agent)
    assert compact(agent.session) == CANONICAL_1


async def test_claimed_message_dropped_only_by_cancellation(h: Harness) -> None:
    """C7.4-24: a claimed message is kept out of the surface only by cancel (or pre-step)."""
    agent = await h.agent(text_response("never"))
    entered, release = await _blocked_pre_step(h)
    m = u("u1")
    agent.followup(m)
    await within(entered.wait())
    assert agent.inbox.remove(m.id) is False
    agent.cancel(CancelCause.user())
    release.set()
    await settle(agent)
    assert compact(agent.session) == ["ins(nt,u1)", "T+1", "claim(nt,u1)", "T-1:aborted"]
    assert agent.session.derive_messages() == []


async def test_error_turn_does_not_requeue(h: Harness) -> None:
    """C7.4-21, C7.4-24: a claim is final; a failed turn does not re-queue its input."""
    agent = await h.agent(error_response("E", "boom"))
    agent.followup(u("u1"))
    await settle(agent)
    assert compact(agent.session, only=["T", "claim", "ins"]) == [
        "ins(nt,u1)", "T+1", "claim(nt,u1)", "T-1:error",
    ]  # fmt: skip
    assert not agent.inbox.has_pending


async def test_session_event_listener_reads_pre_splice_state(h: Harness) -> None:
    """C7.4-2, C7.4-21: a session/event listener of a splice sees the inbox before it."""
    agent = await h.agent(text_response("r1"))
    seen: list[tuple[str, list[str], list[str]]] = []

    def listener(payload: Any) -> None:
        if payload.event.type == "agent/inbox/spliced":
            assert payload.session is agent.session
            inbox = agent.inbox
            seen.append(
                (
                    compact(agent.session)[-1],
                    [label(m) for m in inbox.next_turn],
                    [label(m) for m in inbox.next_step],
                )
            )

    h.rt.hooks.on("session/event", listener)
    agent.inject(u("c"))
    agent.followup(u("u1"))
    await settle(agent)
    assert seen == [
        ("ins(ns,c)", [], []),
        ("ins(nt,u1)", [], ["c"]),
        ("claim(ns,c)", ["u1"], ["c"]),
        ("claim(nt,u1)", ["u1"], []),
    ]
