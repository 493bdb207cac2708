"""§7.4 sending and waking: the three sends, their targets, wakes latched during abort,
maintenance and teardown, message validation (C7.4-1 … C7.4-24)."""

from __future__ import annotations

import asyncio
import math
from typing import Any

import pytest

from steerloop import (
    CancelCause,
    MessageSource,
    ReasoningBlock,
    UserMessage,
    user_message,
)
from steerloop.llm._types import GenerateRequest
from steerloop.session._events import InboxSpliced
from steerloop.testing import (
    text_response,
    tool_call_response,
    wait_all_tasks_blocked,
)

from ..conftest import Harness, compact, settle, u, within
from ..support import Stuck, hanging
from .inbox_helpers import (
    CANONICAL_1,
    gated_tool,
    record,
    request_texts,
    spliced,
)

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
        seq = agent.send(m, "next-turn" if short == "nt" else "next-step", mode == "wake")
    else:
        seq = getattr(agent, call)(m)
    # The seq returned is the splice this call wrote (API.md round 3, "Service").
    written = agent.session.events[seq - 1]
    assert written.seq == seq and isinstance(written.data, InboxSpliced)
    assert written.data.inserted == (m,)
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


async def _sending_from_model(h: Harness, send: str, text: str) -> Any:
    """An agent whose first model request calls ``agent.<send>(u(text))`` before it answers
    ``r1``; its second answers ``r2``."""
    holder: list[Any] = []

    def first(request: GenerateRequest) -> Any:
        getattr(holder[0], send)(u(text))
        return text_response("r1")

    agent = await h.agent(first, text_response("r2"))
    holder.append(agent)
    return agent


async def _sending_from_tool(
    h: Harness, send: str, text: str, *script: Any, concludes: bool = False
) -> Any:
    """An agent whose model calls the tool ``work`` (call ``c1``) first, then answers as in
    ``script``; the tool's body calls ``agent.<send>(u(text))`` and returns ``done``."""
    holder: list[Any] = []

    async def body(args: Any, exec: Any) -> str:
        getattr(holder[0], send)(u(text))
        return "done"

    h.rt.tools.register(gated_tool("work", body, concludes=concludes))
    agent = await h.agent(tool_call_response("c1", "work", {}), *script)
    holder.append(agent)
    return agent


async def test_second_followup_from_inside_adapter(h: Harness) -> None:
    """C7.4-5: u2 sent from inside the adapter while turn 1 streams gets turn 2."""
    agent = await _sending_from_model(h, "followup", "u2")
    agent.followup(u("u1"))
    await settle(agent)
    assert compact(agent.session, only=["T", "claim", "user"]) == TWO_TURNS
    assert request_texts(h.adapter.requests[1])[-1] == "user:u2"


async def test_steer_while_running_next_step_after_message(h: Harness) -> None:
    """C7.4-6: a steer during a text step is admitted in a new step of the same turn."""
    agent = await _sending_from_model(h, "steer", "m")
    agent.followup(u("u1"))
    await settle(agent)
    assert compact(agent.session, only=["T", "S", "user", "msg", "claim", "ins"]) == [
        "ins(nt,u1)", "T+1", "claim(nt,u1)", "S+1.1", "user(u1)", "ins(ns,m)", "msg", "S-1.1",
        "claim(ns,m)", "S+1.2", "user(m)", "msg", "S-1.2", "T-1:completed",
    ]  # fmt: skip


async def test_steer_from_tool_admitted_after_results(h: Harness) -> None:
    """C7.4-6: a steer from a tool body lands after the step's tool/result, same turn."""
    agent = await _sending_from_tool(h, "steer", "m", text_response("r2"))
    agent.followup(u("u1"))
    await settle(agent)
    assert compact(agent.session, only=["T", "S", "user", "result", "call", "claim(ns"]) == [
        "T+1", "S+1.1", "user(u1)", "call(c1)", "result(c1)", "S-1.1",
        "claim(ns,m)", "S+1.2", "user(m)", "S-1.2", "T-1:completed",
    ]  # fmt: skip
    assert request_texts(h.adapter.requests[1])[-1] == "user:m"


async def test_followup_while_running_waits_for_next_turn(h: Harness) -> None:
    """C7.4-6 counterexample: a followup at the same moment waits for the next turn."""
    agent = await _sending_from_tool(h, "followup", "m", text_response("r2"), text_response("r3"))
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
    agent = await _sending_from_model(h, "inject", "c")
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
    agent = await _sending_from_tool(h, "inject", "c", text_response("r2"), concludes=True)
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


async def _end_maintenance(agent: Any, job: asyncio.Future[Any], release: asyncio.Event) -> None:
    """Let the maintenance job return, then settle the agent (a latched wake converges)."""
    release.set()
    await within(job)
    await settle(agent)


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
    await _end_maintenance(agent, job, release)
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
    await _end_maintenance(agent, job, release)
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
    await _end_maintenance(agent, job, release)
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


async def _streaming_first_turn(h: Harness) -> Any:
    """The handle of agent ``s-1`` once turn 1 (``followup(u1)``) streams its first request,
    which hangs; a second request would answer ``never``."""
    started, entry = hanging()
    h.adapter.add(entry, text_response("never"))
    handle = await h.rt.agents.create(session_id="s-1", agent_options=_options())
    handle.agent.followup(u("u1"))
    await within(started.wait())
    return handle


async def test_send_during_teardown_never_latches(h: Harness) -> None:
    """C7.4-14: a waking send after cancel(disposed) during teardown starts no turn."""
    handle = await _streaming_first_turn(h)
    agent = handle.agent
    signal = h.adapter.requests[0].signal
    assert signal is not None
    signal.add_listener(lambda reason: agent.followup(u("u2")))
    await within(handle.dispose())
    assert "ins(nt,u2)" in compact(agent.session)
    assert compact(agent.session, only=["T"]) == ["T+1", "T-1:aborted"]
    assert len(h.adapter.requests) == 1


async def test_wake_after_direct_disposed_cancel_never_latches(h: Harness) -> None:
    """C7.4-14: after cancel(CancelCause.disposed()) a waking send is not latched."""
    handle = await _streaming_first_turn(h)
    agent = handle.agent
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
