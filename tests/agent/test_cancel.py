"""Cancel (§7.8): what it clears, what it aborts, and what it cannot stop."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from steerloop import AgentOptions, CancelCause, ToolError, ToolResult, user_message
from steerloop.llm.chunks import BlockEnd, BlockStart, ReasoningDelta, TextDelta, ToolCallDelta
from steerloop.messages import AssistantMessage, ReasoningBlock, TextBlock, ToolResultMessage
from steerloop.testing import (
    HANG,
    hang_after,
    text_response,
    tool_call_response,
    tool_calls_response,
    wait_all_tasks_blocked,
)
from steerloop.tools import ToolExec

from ..conftest import Harness, compact, events_of, label, settle
from ..support import Bench, reason_of


def chunk_seen(h: Harness) -> asyncio.Event:
    """Set once the first live stream chunk of any attempt was delivered."""
    seen = asyncio.Event()

    def on_frame(payload: Any) -> None:
        if payload.frame.kind == "chunk":
            seen.set()

    h.rt.hooks.on("agent/assistant-stream", on_frame)
    return seen


async def wait(event: asyncio.Event) -> None:
    await asyncio.wait_for(event.wait(), 5)


# --- C7.8-1 .. C7.8-5: inbox and latch ----------------------------------------------------


async def test_cancel_clears_the_inbox_then_aborts(h: Harness) -> None:
    """C7.8-1: cancel drops next-step then next-turn (one discarded hook each) before the
    turn's signal aborts; no further turn starts."""
    streaming = chunk_seen(h)
    agent = await h.agent(HANG)
    discarded: list[tuple[str, bool]] = []
    h.rt.hooks.on(
        "agent/inbox/discarded",
        lambda p: discarded.append((label(p.message), h.adapter.requests[0].signal.aborted)),  # type: ignore[union-attr]
    )
    agent.followup(user_message("u1"))
    await wait(streaming)
    agent.followup(user_message("u2"))
    agent.inject(user_message("c"))
    agent.cancel(CancelCause.user())
    await settle(agent)
    assert compact(agent.session) == [
        "ins(nt,u1)", "T+1", "claim(nt,u1)", "S+1.1", "sys", "user(u1)", "hdr(initial)", "ctx",
        "ins(nt,u2)", "ins(ns,c)", "drop(ns,c)", "drop(nt,u2)",
        "msg(interrupted)", "S-1.1", "T-1:aborted",
    ]  # fmt: skip
    assert discarded == [("c", False), ("u2", False)]
    assert agent.inbox.next_turn == () and agent.inbox.next_step == ()
    assert len(h.adapter.requests) == 1


async def test_cancel_forgets_a_latched_wake() -> None:
    """C7.8-1: a wake latched during a slow abort is forgotten by a second cancel, even
    when the input is kept: no turn starts after the drain."""
    from ..support import open_harness

    async with open_harness() as h:
        bench = Bench()
        h.rt.tools.register(bench.tool("slow"))
        bench.gate("c1")
        agent = await h.agent(tool_call_response("c1", "slow", {}), text_response("never"))
        agent.followup(user_message("u1"))
        await bench.wait_started("c1")
        agent.cancel(CancelCause.user())
        agent.followup(user_message("u2"))  # redirected and latched (C7.8-17)
        agent.cancel(CancelCause.user(), keep_inbox=True)
        bench.release("c1")
        await settle(agent)
        assert compact(agent.session)[-5:] == [
            "call(c1)", "ins(nt,u2)", "result(c1,ABORTED)", "S-1.1", "T-1:aborted",
        ]  # fmt: skip
        assert "T+2" not in compact(agent.session)
        assert [label(m) for m in agent.inbox.next_turn] == ["u2"]
        assert agent.status == "idle"


async def test_cancel_on_idle_agent_writes_nothing(h: Harness) -> None:
    """C7.8-2: cancel() on an idle agent with an empty inbox writes and emits nothing;
    the next followup runs a normal turn."""
    agent = await h.agent(text_response("hi"))
    before = len(agent.session.events)
    emitted: list[str] = []
    for name in ("agent/status", "agent/inbox/discarded", "session/event", "agent/error"):
        h.rt.hooks.on(name, lambda p, name=name: emitted.append(name))
    agent.cancel(CancelCause.user())
    assert len(agent.session.events) == before
    assert emitted == []
    agent.followup(user_message("u1"))
    await settle(agent)
    assert compact(agent.session)[before:] == [
        "ins(nt,u1)", "T+1", "claim(nt,u1)", "S+1.1", "sys", "user(u1)", "hdr(initial)", "ctx",
        "msg", "S-1.1", "T-1:completed",
    ]  # fmt: skip
    assert h.adapter.requests[0].signal is not None
    assert not h.adapter.requests[0].signal.aborted


async def test_cancel_on_idle_agent_drops_pending_inject(h: Harness) -> None:
    """C7.8-3: cancel() on an idle agent removes a pending inject and starts no turn."""
    agent = await h.agent()
    discarded: list[str] = []
    h.rt.hooks.on("agent/inbox/discarded", lambda p: discarded.append(label(p.message)))
    agent.inject(user_message("c"))
    agent.cancel(CancelCause.user())
    await settle(agent)
    assert compact(agent.session) == ["ins(ns,c)", "drop(ns,c)"]
    assert discarded == ["c"]
    assert not agent.inbox.has_pending
    assert h.adapter.requests == []


async def test_keep_inbox_parks_queued_input(h: Harness) -> None:
    """C7.8-4: keep_inbox=True aborts the turn but keeps both queues; nothing starts until
    another waking send."""
    streaming = chunk_seen(h)
    agent = await h.agent(HANG, text_response("second"))
    agent.followup(user_message("u1"))
    await wait(streaming)
    agent.followup(user_message("u2"))
    agent.inject(user_message("c"))
    agent.cancel(CancelCause.user(), keep_inbox=True)
    await settle(agent)
    await wait_all_tasks_blocked()
    log = compact(agent.session)
    assert log[-3:] == ["msg(interrupted)", "S-1.1", "T-1:aborted"]
    assert "drop(nt,u2)" not in log and "drop(ns,c)" not in log
    assert [label(m) for m in agent.inbox.next_turn] == ["u2"]
    assert [label(m) for m in agent.inbox.next_step] == ["c"]
    assert len(h.adapter.requests) == 1
    assert agent.status == "idle"
    agent.followup(user_message("u3"))
    await settle(agent)
    assert compact(agent.session)[len(log) :][:2] == ["ins(nt,u3)", "T+2"]
    assert reason_of(agent, 2).kind == "completed"


async def test_keep_inbox_does_not_return_claimed_input(h: Harness) -> None:
    """C7.8-5: an idle followup then cancel(keep_inbox=True) gives
    ins · T+1 · claim · T-1:aborted; u1 is neither pending nor on the surface."""
    agent = await h.agent(text_response("never"))
    agent.followup(user_message("u1"))
    agent.cancel(CancelCause.user(), keep_inbox=True)
    await settle(agent)
    assert compact(agent.session) == ["ins(nt,u1)", "T+1", "claim(nt,u1)", "T-1:aborted"]
    assert not agent.inbox.has_pending
    assert agent.session.derive_messages() == []
    assert h.adapter.requests == []


# --- C7.8-6 / C7.8-7 / C7.8-8: the turn end -------------------------------------------------


async def test_turn_end_copies_only_the_cause(h: Harness) -> None:
    """C7.8-6: cancel(hook("budget")) gives aborted{reason: hook budget} and nothing else."""
    streaming = chunk_seen(h)
    agent = await h.agent(HANG)
    agent.followup(user_message("u1"))
    await wait(streaming)
    agent.cancel(CancelCause.hook("budget"))
    await settle(agent)
    reason = reason_of(agent)
    assert reason.kind == "aborted"
    assert reason.reason == CancelCause.hook("budget")
    assert reason.error is None
    assert reason.reason.to_json() == {"kind": "hook", "reason": "budget"}


async def test_first_cause_wins(h: Harness) -> None:
    """C7.8-7: cancel(user) then cancel(disposed) in the same turn records user."""
    streaming = chunk_seen(h)
    agent = await h.agent(HANG)
    agent.followup(user_message("u1"))
    await wait(streaming)
    agent.cancel(CancelCause.user())
    agent.cancel(CancelCause.disposed())
    await settle(agent)
    assert reason_of(agent).reason == CancelCause.user()


async def test_cancel_right_after_waking_send_closes_the_turn_without_a_step(
    h: Harness,
) -> None:
    """C7.8-8: cancel in the same loop iteration as an idle followup: no step, no request."""
    agent = await h.agent(text_response("never"))
    agent.followup(user_message("u1"))
    agent.cancel(CancelCause.user())
    await settle(agent)
    assert compact(agent.session) == ["ins(nt,u1)", "T+1", "claim(nt,u1)", "T-1:aborted"]
    assert h.adapter.requests == []


# --- C7.8-9 / C7.8-10: cancel mid-stream -----------------------------------------------------


async def test_cancel_mid_stream_keeps_the_safe_prefix(h: Harness) -> None:
    """C7.8-9: the text/reasoning received so far settles as msg(interrupted) and is part
    of the next request's history."""
    streaming = chunk_seen(h)
    partial = hang_after(
        [
            BlockStart(index=0, block_type="reasoning"),
            ReasoningDelta(index=0, text="thinking"),
            BlockEnd(index=0, block=ReasoningBlock("thinking")),
            BlockStart(index=1, block_type="text"),
            TextDelta(index=1, text="partial ans"),
        ]
    )
    agent = await h.agent(partial, text_response("again"))
    agent.followup(user_message("u1"))
    await wait(streaming)
    await wait_all_tasks_blocked()
    agent.cancel(CancelCause.user())
    await settle(agent)
    log = compact(agent.session)
    assert log[-3:] == ["msg(interrupted)", "S-1.1", "T-1:aborted"]
    settled = events_of(agent.session, "assistant/message")[0].data
    assert settled.interrupted
    assert settled.message.content == (ReasoningBlock("thinking"), TextBlock("partial ans"))
    agent.followup(user_message("u2"))
    await settle(agent)
    history = h.adapter.requests[1].messages
    assert [m.role for m in history] == ["user", "assistant", "user"]
    assert isinstance(history[1], AssistantMessage)
    assert history[1].content == (ReasoningBlock("thinking"), TextBlock("partial ans"))


async def test_cancel_while_only_a_tool_call_streams(h: Harness) -> None:
    """C7.8-10: a partial tool call alone settles as an attempt: no message, no tool/call,
    no body run."""
    bench = Bench()
    h.rt.tools.register(bench.tool("t"))
    streaming = chunk_seen(h)
    partial = hang_after(
        [
            BlockStart(index=0, block_type="tool-call"),
            ToolCallDelta(index=0, id="c1", name="t", arguments_delta='{"x": '),
        ]
    )
    agent = await h.agent(partial)
    agent.followup(user_message("u1"))
    await wait(streaming)
    await wait_all_tasks_blocked()
    agent.cancel(CancelCause.user())
    await settle(agent)
    assert compact(agent.session)[-4:] == ["ctx", "attempt", "S-1.1", "T-1:aborted"]
    assert events_of(agent.session, "assistant/message") == []
    assert events_of(agent.session, "tool/call") == []
    assert bench.trace == []


async def test_cancel_with_text_before_a_partial_tool_call_keeps_the_text_only(
    h: Harness,
) -> None:
    """C7.8-10: with text before a partial tool call the interrupted message holds the text."""
    bench = Bench()
    h.rt.tools.register(bench.tool("t"))
    streaming = chunk_seen(h)
    partial = hang_after(
        [
            BlockStart(index=0, block_type="text"),
            TextDelta(index=0, text="let me look"),
            BlockEnd(index=0, block=TextBlock("let me look")),
            BlockStart(index=1, block_type="tool-call"),
            ToolCallDelta(index=1, id="c1", name="t", arguments_delta='{"x": '),
        ]
    )
    agent = await h.agent(partial)
    agent.followup(user_message("u1"))
    await wait(streaming)
    await wait_all_tasks_blocked()
    agent.cancel(CancelCause.user())
    await settle(agent)
    assert compact(agent.session)[-4:] == ["ctx", "msg(interrupted)", "S-1.1", "T-1:aborted"]
    message = events_of(agent.session, "assistant/message")[0].data.message
    assert message.content == (TextBlock("let me look"),)
    assert events_of(agent.session, "tool/call") == []
    assert bench.trace == []


# --- C7.8-11 .. C7.8-14: cancel around tools -----------------------------------------------


async def test_cancel_after_message_before_any_tool_started(h: Harness) -> None:
    """C7.8-11 / C7.9-18: every call of the settled message gets call · ABORTED_BEFORE_DISPATCH in
    model order, no body runs; the log stays provider-valid."""
    bench = Bench()
    h.rt.tools.register(bench.tool("t", safe=True))
    agent = await h.agent(tool_calls_response([("c1", "t", {}), ("c2", "t", {}), ("c3", "t", {})]))
    policies: list[str] = []
    h.rt.hooks.on("tools/pre-execute", lambda p: policies.append(p.exec.call_id))

    def on_event(payload: Any) -> None:
        if payload.event.type == "assistant/message":
            agent.cancel(CancelCause.user())

    h.rt.hooks.on("session/event", on_event)
    agent.followup(user_message("u1"))
    await settle(agent)
    log = compact(agent.session)
    assert log[log.index("msg") :] == [
        "msg",
        "call(c1)", "result(c1,ABORTED_BEFORE_DISPATCH)",
        "call(c2)", "result(c2,ABORTED_BEFORE_DISPATCH)",
        "call(c3)", "result(c3,ABORTED_BEFORE_DISPATCH)",
        "S-1.1", "T-1:aborted",
    ]  # fmt: skip
    assert bench.trace == []
    assert policies == []
    derived = agent.session.derive_messages()
    assert [m.call_id for m in derived if isinstance(m, ToolResultMessage)] == ["c1", "c2", "c3"]
    for result in events_of(agent.session, "tool/result"):
        assert result.data.error.name == "AbortError"


async def test_cancel_while_tools_run_drains_and_commits_in_model_order(h: Harness) -> None:
    """C7.8-12: running bodies see the abort; nothing new starts; started bodies drain and
    commit in model order (success → ABORTED, errors kept); unstarted calls are synthesised."""
    seen: dict[str, bool] = {}

    async def succeed(args: Any, exec: ToolExec) -> str:
        await exec.signal.wait()
        seen[exec.call_id] = exec.signal.aborted
        return "finished anyway"

    async def fail(args: Any, exec: ToolExec) -> str:
        await exec.signal.wait()
        seen[exec.call_id] = exec.signal.aborted
        raise RuntimeError("stopped half-way")

    async def own_error(args: Any, exec: ToolExec) -> ToolResult:
        await exec.signal.wait()
        seen[exec.call_id] = exec.signal.aborted
        return ToolResult(content="quota", is_error=True, error=ToolError("QUOTA"))

    async def cooperative(args: Any, exec: ToolExec) -> str:
        await exec.signal.wait()
        seen[exec.call_id] = exec.signal.aborted
        exec.signal.throw_if_aborted()
        return "unreachable"

    bench = Bench()
    h.rt.tools.register(bench.tool("ok", safe=True, then=succeed))
    h.rt.tools.register(bench.tool("bad", safe=True, then=fail))
    h.rt.tools.register(bench.tool("own", safe=True, then=own_error))
    h.rt.tools.register(bench.tool("coop", safe=True, then=cooperative))
    h.rt.tools.register(bench.tool("excl"))
    bench.gate("a")  # a finishes after everyone else
    agent = await h.agent(
        tool_calls_response(
            [
                ("a", "ok", {}),
                ("b", "bad", {}),
                ("c", "own", {}),
                ("d", "coop", {}),
                ("e", "excl", {}),
                ("f", "ok", {}),
            ]
        )
    )
    agent.followup(user_message("u1"))
    await bench.wait_started("a", "b", "c", "d")
    agent.cancel(CancelCause.user())
    await wait_all_tasks_blocked()
    bench.release("a")
    await settle(agent)
    log = compact(agent.session)
    assert log[log.index("call(a)") :] == [
        "call(a)", "call(b)", "call(c)", "call(d)",
        "result(a,ABORTED)", "result(b,TOOL_FAILED)", "result(c,QUOTA)", "result(d,ABORTED)",
        "call(e)", "result(e,ABORTED_BEFORE_DISPATCH)",
        "call(f)", "result(f,ABORTED_BEFORE_DISPATCH)",
        "S-1.1", "T-1:aborted",
    ]  # fmt: skip
    assert seen == {"a": True, "b": True, "c": True, "d": True}
    assert "begin:e" not in bench.trace and "begin:f" not in bench.trace
    results = {e.data.message.call_id: e.data for e in events_of(agent.session, "tool/result")}
    assert label(results["b"].message) == "stopped half-way"
    assert label(results["c"].message) == "quota"
    assert results["a"].error.name == "AbortError"


async def test_cancel_is_cooperative(h: Harness) -> None:
    """C7.8-13: when_idle and dispose wait for a body that ignores its signal; nothing is
    written for it meanwhile; its eventual success commits as ABORTED."""
    bench = Bench()
    h.rt.tools.register(bench.tool("stubborn"))
    bench.gate("c1")
    h.adapter.add(tool_call_response("c1", "stubborn", {}))
    handle = await h.rt.agents.create(
        session_id="s-1", agent_options=AgentOptions(provider="mock", model="m")
    )
    agent = handle.agent
    agent.followup(user_message("u1"))
    await bench.wait_started("c1")
    agent.cancel(CancelCause.user())
    snapshot = len(agent.session.events)
    idle = asyncio.ensure_future(agent.when_idle())
    disposed = asyncio.ensure_future(handle.dispose())
    await wait_all_tasks_blocked()
    assert not idle.done()
    assert not disposed.done()
    assert len(agent.session.events) == snapshot
    assert compact(agent.session)[-1] == "call(c1)"
    bench.release("c1")
    await asyncio.wait_for(idle, 5)
    await asyncio.wait_for(disposed, 5)
    log = compact(agent.session)
    assert log[log.index("call(c1)") :] == [
        "call(c1)", "result(c1,ABORTED)", "S-1.1", "T-1:aborted",
    ]  # fmt: skip


async def test_context_deferred_while_draining_is_parked_for_the_next_turn(h: Harness) -> None:
    """C7.8-14: context deferred by a draining call lands in next-step after the inbox was
    cleared and stays parked; the next waking send's turn admits it ahead of the prompt."""

    async def defer_on_abort(args: Any, exec: ToolExec) -> str:
        await exec.signal.wait()
        exec.defer_context(user_message("ctx"))
        return "partial"

    bench = Bench()
    h.rt.tools.register(bench.tool("t", then=defer_on_abort))
    agent = await h.agent(tool_call_response("c1", "t", {}), text_response("fresh"))
    agent.followup(user_message("u1"))
    await bench.wait_started("c1")
    agent.inject(user_message("queued"))
    agent.cancel(CancelCause.user())
    await settle(agent)
    await wait_all_tasks_blocked()
    log = compact(agent.session)
    assert log[log.index("call(c1)") :] == [
        "call(c1)", "ins(ns,queued)", "drop(ns,queued)", "result(c1,ABORTED)", "ins(ns,ctx)",
        "S-1.1", "T-1:aborted",
    ]  # fmt: skip
    assert [label(m) for m in agent.inbox.next_step] == ["ctx"]
    assert "T+2" not in log
    agent.followup(user_message("u2"))
    await settle(agent)
    tail = compact(agent.session)[len(log) :]
    assert tail[:2] == ["ins(nt,u2)", "T+2"]
    assert [t for t in tail if t.startswith("user(")] == ["user(ctx)", "user(u2)"]
    assert reason_of(agent, 2).kind == "completed"
    assert [label(m) for m in h.adapter.requests[1].messages[-2:]] == ["ctx", "u2"]


async def test_context_deferred_while_disposing_is_parked_forever(h: Harness) -> None:
    """C7.8-14: on disposal the deferred context is parked and no turn ever follows."""

    async def defer_on_abort(args: Any, exec: ToolExec) -> str:
        await exec.signal.wait()
        exec.defer_context(user_message("ctx"))
        return "partial"

    bench = Bench()
    h.rt.tools.register(bench.tool("t", then=defer_on_abort))
    h.adapter.add(tool_call_response("c1", "t", {}), text_response("never"))
    handle = await h.rt.agents.create(
        session_id="s-1", agent_options=AgentOptions(provider="mock", model="m")
    )
    agent = handle.agent
    agent.followup(user_message("u1"))
    await bench.wait_started("c1")
    await asyncio.wait_for(handle.dispose(), 5)
    log = compact(agent.session)
    assert log[log.index("call(c1)") :] == [
        "call(c1)", "result(c1,ABORTED)", "ins(ns,ctx)", "S-1.1", "T-1:aborted",
    ]  # fmt: skip
    assert reason_of(agent).reason == CancelCause.disposed()
    assert [label(m) for m in agent.inbox.next_step] == ["ctx"]
    assert len(h.adapter.requests) == 1
    with pytest.raises(RuntimeError):
        agent.followup(user_message("u2"))


# --- C7.8-15 .. C7.8-18 ---------------------------------------------------------------------


@pytest.mark.parametrize("keep_inbox", [False, True])
async def test_cancel_during_turn_stopping(h: Harness, keep_inbox: bool) -> None:
    """C7.8-15: a cancel during agent/turn-stopping ends the turn aborted with no further
    step, even though the listener injected input."""
    agent = await h.agent(text_response("one"), text_response("never"))

    async def stopping(payload: Any) -> None:
        payload.agent.inject(user_message("more"))
        payload.agent.cancel(CancelCause.user(), keep_inbox=keep_inbox)

    h.rt.hooks.on("agent/turn-stopping", stopping)
    agent.followup(user_message("u1"))
    await settle(agent)
    log = compact(agent.session)
    expected_tail = ["msg", "S-1.1", "ins(ns,more)"]
    if not keep_inbox:
        expected_tail.append("drop(ns,more)")
    assert log[log.index("msg") :] == [*expected_tail, "T-1:aborted"]
    assert "S+1.2" not in log
    assert len(h.adapter.requests) == 1
    assert [label(m) for m in agent.inbox.next_step] == (["more"] if keep_inbox else [])


async def test_followup_after_cancelled_turn_runs_with_fresh_signal(h: Harness) -> None:
    """C7.8-16: a followup after a cancelled turn settled runs normally, no stale abort."""
    streaming = chunk_seen(h)
    agent = await h.agent(HANG, text_response("fine"))
    agent.followup(user_message("u1"))
    await wait(streaming)
    agent.cancel(CancelCause.user())
    await settle(agent)
    agent.followup(user_message("u2"))
    await settle(agent)
    assert reason_of(agent, 1).kind == "aborted"
    assert reason_of(agent, 2).kind == "completed"
    assert h.adapter.requests[0].signal.aborted  # type: ignore[union-attr]
    assert not h.adapter.requests[1].signal.aborted  # type: ignore[union-attr]
    log = compact(agent.session)
    assert log[log.index("T+2") :] == [
        "T+2", "claim(nt,u2)", "S+2.1", "user(u2)", "msg", "S-2.1", "T-2:completed",
    ]  # fmt: skip


async def test_followup_during_slow_abort_is_latched(h: Harness) -> None:
    """C7.8-17: a followup while an abort drains is redirected and latched; it runs as a
    new turn after the drain, and when_idle returns after that turn."""
    bench = Bench()
    h.rt.tools.register(bench.tool("slow"))
    bench.gate("c1")
    agent = await h.agent(tool_call_response("c1", "slow", {}), text_response("second"))
    agent.followup(user_message("u1"))
    await bench.wait_started("c1")
    agent.cancel(CancelCause.user())
    agent.steer(user_message("u2"))  # even a next-step send is redirected to next-turn
    idle = asyncio.ensure_future(agent.when_idle())
    await wait_all_tasks_blocked()
    assert not idle.done()
    bench.release("c1")
    await asyncio.wait_for(idle, 5)
    log = compact(agent.session)
    assert log[log.index("call(c1)") :] == [
        "call(c1)", "ins(nt,u2)", "result(c1,ABORTED)", "S-1.1", "T-1:aborted",
        "T+2", "claim(nt,u2)", "S+2.1", "user(u2)", "msg", "S-2.1", "T-2:completed",
    ]  # fmt: skip
    assert agent.status == "idle"


def test_cancel_cause_has_exactly_four_kinds() -> None:
    """C7.8-18: user / parent / hook(reason) / disposed; hook requires a str reason."""
    causes = [
        CancelCause.user(),
        CancelCause.parent(),
        CancelCause.hook("why"),
        CancelCause.disposed(),
    ]
    assert [c.kind for c in causes] == ["user", "parent", "hook", "disposed"]
    assert CancelCause.hook("why").reason == "why"
    with pytest.raises(ValueError):
        CancelCause.hook(42)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        CancelCause.hook(None)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        CancelCause("timeout")  # type: ignore[arg-type]


async def test_cancel_rejects_a_non_cause(h: Harness) -> None:
    """C7.8-18: cancel() takes a CancelCause; anything else is a ValueError."""
    agent = await h.agent()
    with pytest.raises(ValueError):
        agent.cancel("user")
    assert compact(agent.session) == []
