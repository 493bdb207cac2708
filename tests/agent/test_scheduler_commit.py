"""§7.9 model-order commit, aborts around starts and internal scheduler failure
(C7.9-11 … C7.9-14, C7.9-18 … C7.9-20)."""

from __future__ import annotations

import asyncio
from typing import Any

from steerloop import CancelCause, PostExecute, ToolResult, user_message
from steerloop.messages import AssistantMessage
from steerloop.testing import (
    text_response,
    tool_call_response,
    tool_calls_response,
    wait_all_tasks_blocked,
)
from steerloop.tools import ToolExec

from ..conftest import Harness, compact, events_of, settle
from ..support import Bench, Fault, fail_append, on_event, open_harness, yield_loop
from .scheduler_helpers import (
    tool_log,
)

# --- C7.9-11 .. C7.9-14: model-order commit -----------------------------------------------


async def test_results_commit_in_model_order() -> None:
    """C7.9-11: B finishing before A still commits result(A) first; post-execute and
    tools/result follow model order. Counterexample: tool/call and body begin/end follow
    start and completion order."""
    async with open_harness(max_parallel_tool_calls=2) as h:
        bench = Bench()
        h.rt.tools.register(bench.tool("p", safe=True))
        bench.gate("a", "b", "c")
        hooks: list[str] = []

        async def post(payload: Any, next_: Any) -> Any:
            hooks.append(f"post-enter:{payload.exec.call_id}")
            await yield_loop(3)
            hooks.append(f"post-exit:{payload.exec.call_id}")
            return await next_()

        h.rt.hooks.on("tools/post-execute", post)
        h.rt.hooks.on("tools/result", lambda p: hooks.append(f"result:{p.exec.call_id}"))
        agent = await h.agent(
            tool_calls_response([("a", "p", {}), ("b", "p", {}), ("c", "p", {})]),
            text_response("done"),
        )
        agent.followup(user_message("u1"))
        await bench.wait_started("a", "b")
        bench.release("b")
        await bench.wait_started("c")
        bench.release("c")
        await wait_all_tasks_blocked()
        assert tool_log(agent) == ["call(a)", "call(b)", "call(c)"]  # nothing before A commits
        assert hooks == []
        bench.release("a")
        await settle(agent)
        assert tool_log(agent) == [
            "call(a)", "call(b)", "call(c)", "result(a)", "result(b)", "result(c)",
        ]  # fmt: skip
        assert hooks == [
            "post-enter:a", "post-exit:a", "result:a",
            "post-enter:b", "post-exit:b", "result:b",
            "post-enter:c", "post-exit:c", "result:c",
        ]  # fmt: skip
        # Counterexample: the bodies ran and finished in another order than the commit.
        assert bench.trace == ["begin:a", "begin:b", "end:b", "begin:c", "end:c", "end:a"]


async def test_results_cite_their_calls_and_derive_in_message_order() -> None:
    """C7.9-12: each tool/result cites its tool/call; derive_messages pairs them in the
    assistant message's order whatever the interleaving of tool/call events."""
    async with open_harness(max_parallel_tool_calls=2) as h:
        bench = Bench()
        h.rt.tools.register(bench.tool("p", safe=True))
        h.rt.tools.register(bench.tool("e"))
        bench.gate("a")
        agent = await h.agent(
            tool_calls_response([("a", "p", {}), ("b", "p", {}), ("c", "p", {}), ("d", "e", {})]),
            text_response("done"),
        )
        agent.followup(user_message("u1"))
        await bench.wait_started("c")
        bench.release("a")
        await settle(agent)
        session = agent.session
        calls = {e.data.call_id: e.seq for e in events_of(session, "tool/call")}
        for event in events_of(session, "tool/result"):
            assert event.source_event_seqs == (calls[event.data.message.call_id],)
        assert tool_log(agent) == [
            "call(a)", "call(b)", "call(c)", "result(a)", "result(b)", "result(c)",
            "call(d)", "result(d)",
        ]  # fmt: skip
        messages = h.adapter.requests[1].messages
        assert messages == tuple(session.derive_messages())[:-1]
        tail = messages[-5:]
        assert isinstance(tail[0], AssistantMessage)
        assert [c.id for c in tail[0].tool_calls] == ["a", "b", "c", "d"]
        assert [m.call_id for m in tail[1:]] == ["a", "b", "c", "d"]  # type: ignore[union-attr]


async def test_deferred_context_enters_next_step_in_model_order() -> None:
    """C7.9-13 / C7.11-8: deferred and post-execute contexts enter next-step right after
    their call's result, in model order; the next step admits them after all results."""
    async with open_harness(max_parallel_tool_calls=2) as h:
        bench = Bench()

        async def defer(args: Any, exec: ToolExec) -> str:
            exec.defer_context(user_message(f"ctx-{exec.call_id}"))
            return "ok"

        h.rt.tools.register(bench.tool("p", safe=True, then=defer))
        bench.gate("a")

        async def post(payload: Any, next_: Any) -> Any:
            await next_()
            return PostExecute.accept(
                additional_contexts=[user_message(f"post-{payload.exec.call_id}")]
            )

        h.rt.hooks.on("tools/post-execute", post)
        agent = await h.agent(
            tool_calls_response([("a", "p", {}), ("b", "p", {})]), text_response("done")
        )
        agent.followup(user_message("u1"))
        await bench.wait_started("b")
        await wait_all_tasks_blocked()
        assert "end:b" in bench.trace
        bench.release("a")
        await settle(agent)
        log = compact(agent.session)
        start = log.index("call(a)")
        assert log[start:] == [
            "call(a)", "call(b)",
            "result(a)", "ins(ns,ctx-a)", "ins(ns,post-a)",
            "result(b)", "ins(ns,ctx-b)", "ins(ns,post-b)",
            "S-1.1",
            "claim(ns,ctx-a)", "claim(ns,post-a)", "claim(ns,ctx-b)", "claim(ns,post-b)",
            "S+1.2",
            "user(ctx-a)", "user(post-a)", "user(ctx-b)", "user(post-b)",
            "msg", "S-1.2", "T-1:completed",
        ]  # fmt: skip
        sources = [e.data.source for e in events_of(agent.session, "user/message")[1:]]
        assert [(s.kind, s.call_id) for s in sources] == [
            ("tool", "a"), ("tool", "a"), ("tool", "b"), ("tool", "b"),
        ]  # fmt: skip


async def test_concluding_result_ends_the_turn_after_all_calls(h: Harness) -> None:
    """C7.9-14: concludes_turn completes the step; the other calls still run; no request."""
    bench = Bench()

    async def conclude(args: Any, exec: ToolExec) -> ToolResult:
        return ToolResult(content="final", concludes_turn=True)

    h.rt.tools.register(bench.tool("stop", then=conclude))
    h.rt.tools.register(bench.tool("other"))
    agent = await h.agent(
        tool_calls_response([("c1", "stop", {}), ("c2", "other", {})]), text_response("never")
    )
    agent.followup(user_message("u1"))
    await settle(agent)
    assert compact(agent.session)[-7:] == [
        "msg", "call(c1)", "result(c1)", "call(c2)", "result(c2)", "S-1.1", "T-1:completed",
    ]  # fmt: skip
    assert bench.trace == ["begin:c1", "end:c1", "begin:c2", "end:c2"]
    assert len(h.adapter.requests) == 1


async def test_concluding_result_still_serves_a_deferred_context(h: Harness) -> None:
    """C7.9-14 (counterexample): with next-step non-empty the deferred context gets its step."""
    bench = Bench()

    async def conclude(args: Any, exec: ToolExec) -> ToolResult:
        exec.defer_context(user_message("later"))
        return ToolResult(content="final", concludes_turn=True)

    h.rt.tools.register(bench.tool("stop", then=conclude))
    agent = await h.agent(tool_call_response("c1", "stop", {}), text_response("done"))
    agent.followup(user_message("u1"))
    await settle(agent)
    log = compact(agent.session)
    assert log[log.index("call(c1)") :] == [
        "call(c1)", "result(c1)", "ins(ns,later)", "S-1.1", "claim(ns,later)", "S+1.2",
        "user(later)", "msg", "S-1.2", "T-1:completed",
    ]  # fmt: skip
    assert len(h.adapter.requests) == 2


# --- C7.9-18 / C7.9-19: aborts around starts ---------------------------------------------


async def test_abort_while_pre_execute_awaits(h: Harness) -> None:
    """C7.9-18: an abort during a call's pre-execute ends it ABORTED_BEFORE_DISPATCH; the
    later calls are synthesised; earlier committed results stay."""
    bench = Bench()
    h.rt.tools.register(bench.tool("t"))
    in_policy = asyncio.Event()
    hold = asyncio.Event()

    async def policy(payload: Any) -> None:
        if payload.exec.call_id == "c2":
            in_policy.set()
            await hold.wait()

    h.rt.hooks.on("tools/pre-execute", policy)
    agent = await h.agent(tool_calls_response([("c1", "t", {}), ("c2", "t", {}), ("c3", "t", {})]))
    agent.followup(user_message("u1"))
    await asyncio.wait_for(in_policy.wait(), 5)
    agent.cancel(CancelCause.user())
    hold.set()
    await settle(agent)
    log = compact(agent.session)
    assert log[log.index("call(c1)") :] == [
        "call(c1)", "result(c1)", "call(c2)", "result(c2,ABORTED_BEFORE_DISPATCH)",
        "call(c3)", "result(c3,ABORTED_BEFORE_DISPATCH)", "S-1.1", "T-1:aborted",
    ]  # fmt: skip
    assert bench.trace == ["begin:c1", "end:c1"]


async def test_aborted_parallel_group_never_runs_the_following_exclusive_call(
    h: Harness,
) -> None:
    """C7.9-19: after a parallel group is aborted, the following exclusive call never runs."""

    async def until_abort(args: Any, exec: ToolExec) -> str:
        await exec.signal.wait()
        return "partial"

    bench = Bench()
    h.rt.tools.register(bench.tool("p", safe=True, then=until_abort))
    h.rt.tools.register(bench.tool("e"))
    agent = await h.agent(tool_calls_response([("p1", "p", {}), ("p2", "p", {}), ("e", "e", {})]))
    agent.followup(user_message("u1"))
    await bench.wait_started("p1", "p2")
    agent.cancel(CancelCause.user())
    await settle(agent)
    log = compact(agent.session)
    assert log[log.index("call(p1)") :] == [
        "call(p1)", "call(p2)", "result(p1,ABORTED)", "result(p2,ABORTED)",
        "call(e)", "result(e,ABORTED_BEFORE_DISPATCH)", "S-1.1", "T-1:aborted",
    ]  # fmt: skip
    assert "begin:e" not in bench.trace


# --- C7.9-20: internal scheduler failure ---------------------------------------------------


async def test_internal_failure_stops_starts_and_waits_for_started_bodies(h: Harness) -> None:
    """C7.9-20: a failing tool/result append stops new starts, waits for every started body
    and raises; the scheduler writes nothing for calls it did not commit (recovery does)."""
    bench = Bench()
    h.rt.tools.register(bench.tool("p", safe=True))
    h.rt.tools.register(bench.tool("e"))
    bench.gate("c2")
    agent = await h.agent(
        tool_calls_response([("c1", "p", {}), ("c2", "p", {}), ("c3", "e", {})]),
        text_response("next turn"),
    )
    fired = fail_append(agent.session, on_event("c1", "tool/result"))
    errors: list[BaseException] = []
    h.rt.hooks.on("agent/error", lambda p: errors.append(p.error))
    h.rt.hooks.on(
        "session/event",
        lambda p: bench.trace.append("step/end") if p.event.type == "step/end" else None,
    )
    agent.followup(user_message("u1"))
    await bench.wait_started("c2")
    await wait_all_tasks_blocked()
    assert fired == ["tool/result:c1"]
    # The failure happened; the started body c2 is still running: nothing more is written.
    assert "S-1.1" not in compact(agent.session)
    assert tool_log(agent) == ["call(c1)", "call(c2)"]
    bench.release("c2")
    await settle(agent)
    log = compact(agent.session)
    assert log[log.index("call(c1)") :] == [
        "call(c1)", "call(c2)",
        "result(c1,TOOL_OUTCOME_UNKNOWN)", "result(c2,TOOL_OUTCOME_UNKNOWN)",
        "result(c3,TOOL_NOT_STARTED)", "S-1.1", "T-1:error",
    ]  # fmt: skip
    assert bench.trace == ["begin:c1", "end:c1", "begin:c2", "end:c2", "step/end"]
    assert len(errors) == 1
    assert isinstance(errors[0], Fault)
    end = events_of(agent.session, "turn/end")[0].data.reason
    assert "injected failure appending tool/result for c1" in end.error.message


async def test_internal_failure_on_tool_call_append(h: Harness) -> None:
    """C7.9-20: a failing tool/call append is a scheduler failure: the call never starts,
    started bodies settle first, and recovery answers the rest."""
    bench = Bench()
    h.rt.tools.register(bench.tool("p", safe=True))
    bench.gate("c1")
    agent = await h.agent(tool_calls_response([("c1", "p", {}), ("c2", "p", {}), ("c3", "p", {})]))
    fired = fail_append(agent.session, on_event("c2", "tool/call"))
    agent.followup(user_message("u1"))
    await bench.wait_started("c1")
    await wait_all_tasks_blocked()
    assert fired == ["tool/call:c2"]
    assert "S-1.1" not in compact(agent.session)
    bench.release("c1")
    await settle(agent)
    log = compact(agent.session)
    assert log[log.index("call(c1)") :] == [
        "call(c1)", "result(c1,TOOL_OUTCOME_UNKNOWN)", "result(c2,TOOL_NOT_STARTED)",
        "result(c3,TOOL_NOT_STARTED)", "S-1.1", "T-1:error",
    ]  # fmt: skip
    assert bench.trace == ["begin:c1", "end:c1"]
