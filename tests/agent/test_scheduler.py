"""The tool pool (§7.9): concurrency classes, the rolling cap, model-order commit."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from pydantic import BaseModel, field_validator

from steerloop import CancelCause, PostExecute, ToolDecision, ToolResult, user_message
from steerloop.messages import AssistantMessage, ToolResultMessage
from steerloop.testing import (
    text_response,
    tool_call_response,
    tool_calls_response,
    wait_all_tasks_blocked,
)
from steerloop.tools import ToolExec

from ..conftest import Harness, compact, events_of, label, settle
from ..support import Bench, Fault, fail_append, on_event, open_harness, yield_loop

CALLS_AND_RESULTS = ("call(", "result(")


def tool_log(agent: Any) -> list[str]:
    return compact(agent.session, only=CALLS_AND_RESULTS)


# --- C7.9-1 .. C7.9-3: round trip, argument parsing, unknown tools ---------------------


async def test_canonical_tool_round_trip(h: Harness) -> None:
    """C7.9-1: msg[call c1] · call · result · S-1.1 · S+1.2 · msg · S-1.2 · T-1:completed."""
    bench = Bench()
    h.rt.tools.register(bench.tool("echo"))
    agent = await h.agent(tool_call_response("c1", "echo", {"x": 1}), text_response("done"))
    agent.followup(user_message("u1"))
    await settle(agent)
    assert compact(agent.session) == [
        "ins(nt,u1)", "T+1", "claim(nt,u1)", "S+1.1", "sys", "user(u1)", "hdr(initial)", "ctx",
        "msg", "call(c1)", "result(c1)", "S-1.1", "S+1.2", "msg", "S-1.2", "T-1:completed",
    ]  # fmt: skip
    assert len(h.adapter.requests) == 2
    messages = h.adapter.requests[1].messages
    assert isinstance(messages[-2], AssistantMessage)
    assert [c.id for c in messages[-2].tool_calls] == ["c1"]
    assert isinstance(messages[-1], ToolResultMessage)
    assert messages[-1].call_id == "c1"
    assert label(messages[-1]) == "r-c1"
    assert not messages[-1].is_error
    assert bench.args["c1"] == {"x": 1}


async def test_empty_arguments_parse_as_empty_object(h: Harness) -> None:
    """C7.9-2: raw argument text "" becomes {} for the body; the log keeps ""."""
    bench = Bench()
    h.rt.tools.register(bench.tool("echo"))
    agent = await h.agent(tool_call_response("c1", "echo", ""), text_response("done"))
    agent.followup(user_message("u1"))
    await settle(agent)
    assert tool_log(agent) == ["call(c1)", "result(c1)"]
    assert events_of(agent.session, "tool/call")[0].data.arguments == ""
    assert bench.args["c1"] == {}


async def test_invalid_json_arguments_are_kept_verbatim_and_rejected(h: Harness) -> None:
    """C7.9-2: invalid JSON stays verbatim in tool/call and gives INVALID_ARGS, no body."""
    bench = Bench()
    h.rt.tools.register(bench.tool("echo"))
    agent = await h.agent(tool_call_response("c1", "echo", '{"x": 1'), text_response("done"))
    agent.followup(user_message("u1"))
    await settle(agent)
    assert tool_log(agent) == ["call(c1)", "result(c1,INVALID_ARGS)"]
    assert events_of(agent.session, "tool/call")[0].data.arguments == '{"x": 1'
    result = events_of(agent.session, "tool/result")[0].data
    assert result.message.is_error
    assert bench.trace == []
    assert compact(agent.session)[-1] == "T-1:completed"


async def test_schema_violation_gives_invalid_args(h: Harness) -> None:
    """C7.9-2: arguments that fail the parameter schema give INVALID_ARGS without a body run."""

    class Args(BaseModel):
        x: int

    bench = Bench()
    h.rt.tools.register(bench.tool("typed", parameters=Args))
    agent = await h.agent(
        tool_calls_response([("c1", "typed", {"x": "nope"}), ("c2", "typed", {"x": 2})]),
        text_response("done"),
    )
    agent.followup(user_message("u1"))
    await settle(agent)
    assert tool_log(agent) == ["call(c1)", "result(c1,INVALID_ARGS)", "call(c2)", "result(c2)"]
    assert bench.trace == ["begin:c2", "end:c2"]
    assert bench.args["c2"] == Args(x=2)


async def test_a_validator_that_raises_any_error_gives_invalid_args(h: Harness) -> None:
    """C7.9-2: a validator of the tool's own that raises something other than a validation
    error still answers INVALID_ARGS (not a failed step), and the turn goes on."""

    class Args(BaseModel):
        path: str

        @field_validator("path")
        @classmethod
        def relative(cls, value: str) -> str:
            if value.startswith("/"):
                raise TypeError("absolute paths are not accepted")
            return value

    bench = Bench()
    h.rt.tools.register(bench.tool("read", parameters=Args))
    agent = await h.agent(
        tool_calls_response([("c1", "read", {"path": "/etc"}), ("c2", "read", {"path": "a"})]),
        text_response("done"),
    )
    agent.followup(user_message("u1"))
    await settle(agent)
    assert tool_log(agent) == ["call(c1)", "result(c1,INVALID_ARGS)", "call(c2)", "result(c2)"]
    result = events_of(agent.session, "tool/result")[0].data
    assert "absolute paths are not accepted" in label(result.message)
    assert compact(agent.session)[-1] == "T-1:completed"
    assert bench.trace == ["begin:c2", "end:c2"]


async def test_unknown_tool_does_not_stop_the_other_calls(h: Harness) -> None:
    """C7.9-3: a call to an unknown name gives UNKNOWN_TOOL; the other calls still run."""
    bench = Bench()
    h.rt.tools.register(bench.tool("echo"))
    agent = await h.agent(
        tool_calls_response([("c1", "nope", {}), ("c2", "echo", {})]), text_response("done")
    )
    agent.followup(user_message("u1"))
    await settle(agent)
    assert tool_log(agent) == ["call(c1)", "result(c1,UNKNOWN_TOOL)", "call(c2)", "result(c2)"]
    assert bench.trace == ["begin:c2", "end:c2"]
    assert compact(agent.session)[-1] == "T-1:completed"


async def test_tool_scoped_to_another_agent_is_unknown(h: Harness) -> None:
    """C7.9-3: a tool registered for another agent only is not visible: UNKNOWN_TOOL."""
    bench = Bench()
    h.rt.tools.register(bench.tool("private"), owner="someone-else")
    agent = await h.agent(tool_call_response("c1", "private", {}), text_response("done"))
    agent.followup(user_message("u1"))
    await settle(agent)
    assert tool_log(agent) == ["call(c1)", "result(c1,UNKNOWN_TOOL)"]
    assert bench.trace == []


# --- C7.9-4 / C7.9-5: tool/call before pre-execute; policies serial in model order -----


async def test_tool_call_is_logged_before_pre_execute(h: Harness) -> None:
    """C7.9-4: tool/call is appended when the call starts, before tools/pre-execute runs."""
    bench = Bench()
    h.rt.tools.register(bench.tool("p", safe=True))
    seen: list[tuple[str, str, str]] = []

    async def policy(payload: Any) -> None:
        last = payload.exec.agent.session.events[-1]
        seen.append((payload.exec.call_id, last.type, last.data.call_id))

    h.rt.hooks.on("tools/pre-execute", policy)
    agent = await h.agent(
        tool_calls_response([("c1", "p", {}), ("c2", "p", {}), ("c3", "p", {})]),
        text_response("done"),
    )
    agent.followup(user_message("u1"))
    await settle(agent)
    assert seen == [("c1", "tool/call", "c1"), ("c2", "tool/call", "c2"), ("c3", "tool/call", "c3")]
    assert compact(agent.session, only=("call(",)) == ["call(c1)", "call(c2)", "call(c3)"]


async def test_pre_execute_runs_serially_in_model_order(h: Harness) -> None:
    """C7.9-5: pre-execute never overlaps for two calls of a step; bodies do overlap."""
    bench = Bench()
    h.rt.tools.register(bench.tool("p", safe=True))
    bench.gate("c1", "c2", "c3")

    async def policy(payload: Any) -> None:
        call_id = payload.exec.call_id
        bench.trace.append(f"enter:{call_id}")
        await yield_loop(5)
        bench.trace.append(f"exit:{call_id}")

    h.rt.hooks.on("tools/pre-execute", policy)
    agent = await h.agent(
        tool_calls_response([("c1", "p", {}), ("c2", "p", {}), ("c3", "p", {})]),
        text_response("done"),
    )
    agent.followup(user_message("u1"))
    await bench.wait_started("c1", "c2", "c3")
    # All three bodies are running at once: only the bodies overlap.
    assert [t for t in bench.trace if t.startswith("end:")] == []
    bench.release("c1", "c2", "c3")
    await settle(agent)
    policy_trace = [t for t in bench.trace if t.startswith(("enter:", "exit:"))]
    assert policy_trace == ["enter:c1", "exit:c1", "enter:c2", "exit:c2", "enter:c3", "exit:c3"]


# --- C7.9-6 .. C7.9-10: concurrency classes and the cap ---------------------------------


async def test_safe_calls_run_concurrently(h: Harness) -> None:
    """C7.9-6: three safe bodies waiting on one barrier all begin before any ends."""
    barrier = asyncio.Barrier(3)

    async def meet(args: Any, exec: ToolExec) -> str:
        await asyncio.wait_for(barrier.wait(), 5)
        return "met"

    bench = Bench()
    h.rt.tools.register(bench.tool("p", safe=True, then=meet))
    agent = await h.agent(
        tool_calls_response([("a", "p", {}), ("b", "p", {}), ("c", "p", {})]),
        text_response("done"),
    )
    agent.followup(user_message("u1"))
    await settle(agent)
    assert sorted(bench.trace[:3]) == ["begin:a", "begin:b", "begin:c"]
    assert tool_log(agent) == [
        "call(a)",
        "call(b)",
        "call(c)",
        "result(a)",
        "result(b)",
        "result(c)",
    ]


async def test_exclusive_call_is_a_barrier(h: Harness) -> None:
    """C7.9-7: [P1, E, P2] runs P1 · E · P2 one after another; P1's result precedes E's call."""

    async def slow(args: Any, exec: ToolExec) -> str:
        await yield_loop(10)
        return "ok"

    bench = Bench()
    h.rt.tools.register(bench.tool("p", safe=True, then=slow))
    h.rt.tools.register(bench.tool("e", then=slow))
    agent = await h.agent(
        tool_calls_response([("p1", "p", {}), ("e", "e", {}), ("p2", "p", {})]),
        text_response("done"),
    )
    agent.followup(user_message("u1"))
    await settle(agent)
    assert bench.trace == ["begin:p1", "end:p1", "begin:e", "end:e", "begin:p2", "end:p2"]
    assert tool_log(agent) == [
        "call(p1)", "result(p1)", "call(e)", "result(e)", "call(p2)", "result(p2)",
    ]  # fmt: skip


async def test_default_tools_are_exclusive(h: Harness) -> None:
    """C7.9-7: without concurrency_safe every call runs alone, in model order."""

    async def slow(args: Any, exec: ToolExec) -> str:
        await yield_loop(10)
        return "ok"

    bench = Bench()
    h.rt.tools.register(bench.tool("e", then=slow))
    agent = await h.agent(
        tool_calls_response([("a", "e", {}), ("b", "e", {})]), text_response("done")
    )
    agent.followup(user_message("u1"))
    await settle(agent)
    assert bench.trace == ["begin:a", "end:a", "begin:b", "end:b"]
    assert tool_log(agent) == ["call(a)", "result(a)", "call(b)", "result(b)"]


async def test_callable_concurrency_class_sees_parsed_args_before_each_start(h: Harness) -> None:
    """C7.9-8: concurrency_safe(args) gets the parsed arguments right before the call starts."""

    class Args(BaseModel):
        mode: str

    bench = Bench()
    classified: list[tuple[str, list[str]]] = []
    session_ref: list[Any] = []

    def read_only(args: Args) -> bool:
        calls = [e.data.call_id for e in events_of(session_ref[0], "tool/call")]
        classified.append((args.mode, calls))
        return args.mode.startswith("read")

    async def slow(args: Any, exec: ToolExec) -> str:
        await yield_loop(10)
        return "ok"

    h.rt.tools.register(bench.tool("fs", safe=read_only, parameters=Args, then=slow))
    agent = await h.agent(
        tool_calls_response(
            [
                ("r1", "fs", {"mode": "read1"}),
                ("w", "fs", {"mode": "write"}),
                ("r2", "fs", {"mode": "read2"}),
                ("r3", "fs", {"mode": "read3"}),
            ]
        ),
        text_response("done"),
    )
    session_ref.append(agent.session)
    agent.followup(user_message("u1"))
    await settle(agent)
    # Each call's classifier ran after the previous call started and before its own start.
    assert [mode for mode, _ in classified][:1] == ["read1"]
    assert ("write", ["r1"]) in classified
    assert ("read2", ["r1", "w"]) in classified
    assert ("read3", ["r1", "w", "r2"]) in classified
    assert all(mode != "read1" or calls == [] for mode, calls in classified)
    # The write is a barrier; the two reads after it overlap.
    assert bench.trace[:4] == ["begin:r1", "end:r1", "begin:w", "end:w"]
    assert sorted(bench.trace[4:6]) == ["begin:r2", "begin:r3"]
    assert tool_log(agent) == [
        "call(r1)", "result(r1)", "call(w)", "result(w)",
        "call(r2)", "call(r3)", "result(r2)", "result(r3)",
    ]  # fmt: skip


@pytest.mark.parametrize("bad", [("x", "p", '{"broken"'), ("x", "ghost", {})])
async def test_invalid_or_unknown_calls_are_exclusive(
    h: Harness, bad: tuple[str, str, Any]
) -> None:
    """C7.9-8: a call with invalid arguments or an unknown tool waits like an exclusive call."""
    bench = Bench()
    h.rt.tools.register(bench.tool("p", safe=True))
    bench.gate("p1")
    agent = await h.agent(
        tool_calls_response([("p1", "p", {}), bad, ("p2", "p", {})]), text_response("done")
    )
    agent.followup(user_message("u1"))
    await bench.wait_started("p1")
    await wait_all_tasks_blocked()
    assert tool_log(agent) == ["call(p1)"]
    bench.release("p1")
    await settle(agent)
    code = "INVALID_ARGS" if bad[1] == "p" else "UNKNOWN_TOOL"
    assert tool_log(agent) == [
        "call(p1)", "result(p1)", "call(x)", f"result(x,{code})", "call(p2)", "result(p2)",
    ]  # fmt: skip


async def test_classification_is_reread_before_each_start() -> None:
    """C7.9-9: a post-execute listener re-registering a later call's tool as exclusive
    turns that not-yet-started call into a barrier."""
    async with open_harness(max_parallel_tool_calls=2) as h:
        bench = Bench()
        h.rt.tools.register(bench.tool("a", safe=True))
        h.rt.tools.register(bench.tool("b", safe=True))
        bench.gate("c1", "c2")

        async def reclassify(payload: Any, next_: Any) -> Any:
            if payload.exec.call_id == "c1":
                h.rt.tools.register(bench.tool("b", safe=False))
                bench.trace.append("reclassified")
            return await next_()

        h.rt.hooks.on("tools/post-execute", reclassify)
        agent = await h.agent(
            tool_calls_response([("c1", "a", {}), ("c2", "b", {}), ("c3", "b", {})]),
            text_response("done"),
        )
        agent.followup(user_message("u1"))
        await bench.wait_started("c1", "c2")
        bench.release("c1")
        await wait_all_tasks_blocked()
        # c1 committed and freed a slot, but c3 is now exclusive: it waits for c2.
        assert tool_log(agent) == ["call(c1)", "call(c2)", "result(c1)"]
        assert "begin:c3" not in bench.trace
        bench.release("c2")
        await settle(agent)
        assert tool_log(agent) == [
            "call(c1)", "call(c2)", "result(c1)", "result(c2)", "call(c3)", "result(c3)",
        ]  # fmt: skip
        assert bench.trace.index("end:c2") < bench.trace.index("begin:c3")


async def test_without_reclassification_the_freed_slot_is_used_at_once() -> None:
    """C7.9-9 / C7.9-10 (counterexample): with b still safe, c3 starts as soon as c1 ends."""
    async with open_harness(max_parallel_tool_calls=2) as h:
        bench = Bench()
        h.rt.tools.register(bench.tool("a", safe=True))
        h.rt.tools.register(bench.tool("b", safe=True))
        bench.gate("c1", "c2")
        agent = await h.agent(
            tool_calls_response([("c1", "a", {}), ("c2", "b", {}), ("c3", "b", {})]),
            text_response("done"),
        )
        agent.followup(user_message("u1"))
        await bench.wait_started("c1", "c2")
        bench.release("c1")
        await bench.wait_started("c3")
        assert "end:c2" not in bench.trace
        bench.release("c2")
        await settle(agent)
        assert tool_log(agent) == [
            "call(c1)", "call(c2)", "result(c1)", "call(c3)", "result(c2)", "result(c3)",
        ]  # fmt: skip


async def test_cap_bounds_running_bodies_and_refills_on_completion() -> None:
    """C7.9-10: at most max_parallel_tool_calls bodies run; a new one starts when one ends."""
    async with open_harness(max_parallel_tool_calls=2) as h:
        bench = Bench()
        h.rt.tools.register(bench.tool("p", safe=True))
        bench.gate("c1", "c2", "c3")
        agent = await h.agent(
            tool_calls_response([("c1", "p", {}), ("c2", "p", {}), ("c3", "p", {})]),
            text_response("done"),
        )
        agent.followup(user_message("u1"))
        await bench.wait_started("c1", "c2")
        await wait_all_tasks_blocked()
        assert "begin:c3" not in bench.trace
        assert tool_log(agent) == ["call(c1)", "call(c2)"]
        bench.release("c2")  # the second finishes first: its slot goes to c3
        await bench.wait_started("c3")
        assert "end:c1" not in bench.trace
        bench.release("c1", "c3")
        await settle(agent)
        assert bench.trace[:4] == ["begin:c1", "begin:c2", "end:c2", "begin:c3"]
        assert tool_log(agent) == [
            "call(c1)", "call(c2)", "call(c3)", "result(c1)", "result(c2)", "result(c3)",
        ]  # fmt: skip


async def test_cap_of_one_is_fully_serial() -> None:
    """C7.9-10: with a cap of 1 even safe calls run one after another."""
    async with open_harness(max_parallel_tool_calls=1) as h:

        async def slow(args: Any, exec: ToolExec) -> str:
            await yield_loop(10)
            return "ok"

        bench = Bench()
        h.rt.tools.register(bench.tool("p", safe=True, then=slow))
        agent = await h.agent(
            tool_calls_response([("c1", "p", {}), ("c2", "p", {}), ("c3", "p", {})]),
            text_response("done"),
        )
        agent.followup(user_message("u1"))
        await settle(agent)
        assert bench.trace == [
            "begin:c1", "end:c1", "begin:c2", "end:c2", "begin:c3", "end:c3",
        ]  # fmt: skip
        assert tool_log(agent) == [
            "call(c1)", "result(c1)", "call(c2)", "result(c2)", "call(c3)", "result(c3)",
        ]  # fmt: skip


async def test_cap_change_applies_to_the_next_group() -> None:
    """C7.9-10: the cap is read when a group starts; a change mid-group applies to the next."""
    async with open_harness(max_parallel_tool_calls=1) as h:
        bench = Bench()
        h.rt.tools.register(bench.tool("p", safe=True))
        bench.gate("a1", "b1")

        async def slow(args: Any, exec: ToolExec) -> str:
            await yield_loop(10)
            return "ok"

        h.rt.tools.register(bench.tool("e", then=slow))
        agent = await h.agent(
            tool_calls_response(
                [("a1", "p", {}), ("a2", "p", {}), ("e", "e", {}), ("b1", "p", {}), ("b2", "p", {})]
            ),
            text_response("done"),
        )
        agent.followup(user_message("u1"))
        await bench.wait_started("a1")
        h.rt.max_parallel_tool_calls = 2  # the group in flight keeps its cap of 1
        await wait_all_tasks_blocked()
        assert "begin:a2" not in bench.trace
        bench.release("a1")
        await bench.wait_started("b1")
        await bench.wait_started("b2")  # the next group uses the new cap: b2 joins b1
        assert "end:b1" not in bench.trace
        bench.release("b1")
        await settle(agent)
        assert bench.trace[:6] == ["begin:a1", "end:a1", "begin:a2", "end:a2", "begin:e", "end:e"]


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


# --- C7.9-15 .. C7.9-17: policies, failures, exec ---------------------------------------


async def test_pre_execute_deny(h: Harness) -> None:
    """C7.9-15: a deny gives DENIED with the reason; no body; post-execute sees the error."""
    bench = Bench()
    h.rt.tools.register(bench.tool("rm"))
    h.rt.tools.register(bench.tool("ls"))
    seen: list[tuple[str, Any]] = []

    async def policy(payload: Any) -> Any:
        if payload.exec.name == "rm":
            return ToolDecision.deny("not allowed to delete")
        return None

    async def post(payload: Any, next_: Any) -> Any:
        result = payload.result
        seen.append((payload.exec.call_id, result.error.code if result.error else None))
        return await next_()

    h.rt.hooks.on("tools/pre-execute", policy)
    h.rt.hooks.on("tools/post-execute", post)
    agent = await h.agent(
        tool_calls_response([("c1", "rm", {}), ("c2", "ls", {})]), text_response("done")
    )
    agent.followup(user_message("u1"))
    await settle(agent)
    assert tool_log(agent) == ["call(c1)", "result(c1,DENIED)", "call(c2)", "result(c2)"]
    denied = events_of(agent.session, "tool/result")[0].data
    assert denied.message.is_error
    assert label(denied.message) == "not allowed to delete"
    assert bench.trace == ["begin:c2", "end:c2"]
    assert seen == [("c1", "DENIED"), ("c2", None)]


async def test_pre_execute_allow_runs_the_body(h: Harness) -> None:
    """C7.9-15: an explicit allow() stops the serial chain and the body runs."""
    bench = Bench()
    h.rt.tools.register(bench.tool("ls"))
    later: list[str] = []

    async def allow(payload: Any) -> Any:
        return ToolDecision.allow()

    async def never(payload: Any) -> Any:
        later.append(payload.exec.call_id)
        return ToolDecision.deny("too late")

    h.rt.hooks.on("tools/pre-execute", allow)
    h.rt.hooks.on("tools/pre-execute", never)
    agent = await h.agent(tool_call_response("c1", "ls", {}), text_response("done"))
    agent.followup(user_message("u1"))
    await settle(agent)
    assert tool_log(agent) == ["call(c1)", "result(c1)"]
    assert later == []


async def test_raising_body_is_a_normal_error_result(h: Harness) -> None:
    """C7.9-16: a raising body gives TOOL_FAILED with the message; the step continues."""

    async def boom(args: Any, exec: ToolExec) -> str:
        raise ValueError("disk on fire")

    bench = Bench()
    h.rt.tools.register(bench.tool("bad", then=boom))
    h.rt.tools.register(bench.tool("good"))
    agent = await h.agent(
        tool_calls_response([("c1", "bad", {}), ("c2", "good", {})]), text_response("done")
    )
    agent.followup(user_message("u1"))
    await settle(agent)
    log = compact(agent.session)
    assert log[log.index("call(c1)") :] == [
        "call(c1)", "result(c1,TOOL_FAILED)", "call(c2)", "result(c2)", "S-1.1", "S+1.2",
        "msg", "S-1.2", "T-1:completed",
    ]  # fmt: skip
    failed = events_of(agent.session, "tool/result")[0].data
    assert failed.message.is_error
    assert failed.error.name == "ValueError"
    assert label(failed.message) == "disk on fire"
    assert h.adapter.requests[1].messages[-2].is_error  # type: ignore[union-attr]


async def test_raising_policies_only_fail_their_call(h: Harness) -> None:
    """C7.9-16: raising pre-/post-execute listeners turn that call's result into
    TOOL_FAILED (pre: the body never runs); the other calls are unaffected."""
    bench = Bench()
    h.rt.tools.register(bench.tool("t"))

    async def pre(payload: Any) -> Any:
        if payload.exec.call_id == "c1":
            raise RuntimeError("policy crashed")
        return None

    async def post(payload: Any, next_: Any) -> Any:
        if payload.exec.call_id == "c2":
            raise RuntimeError("observer crashed")
        return await next_()

    h.rt.hooks.on("tools/pre-execute", pre)
    h.rt.hooks.on("tools/post-execute", post)
    agent = await h.agent(
        tool_calls_response([("c1", "t", {}), ("c2", "t", {}), ("c3", "t", {})]),
        text_response("done"),
    )
    agent.followup(user_message("u1"))
    await settle(agent)
    assert tool_log(agent) == [
        "call(c1)", "result(c1,TOOL_FAILED)", "call(c2)", "result(c2,TOOL_FAILED)",
        "call(c3)", "result(c3)",
    ]  # fmt: skip
    assert bench.trace == ["begin:c2", "end:c2", "begin:c3", "end:c3"]
    results = events_of(agent.session, "tool/result")
    assert "policy crashed" in label(results[0].data.message)
    assert "observer crashed" in label(results[1].data.message)
    assert compact(agent.session)[-1] == "T-1:completed"


async def test_exec_carries_agent_call_id_and_turn_signal(h: Harness) -> None:
    """C7.9-17: exec.agent is the initiator, exec.call_id the model's id, exec.signal
    aborts when the turn is cancelled."""
    seen: dict[str, Any] = {}

    async def inspect_exec(args: Any, exec: ToolExec) -> str:
        seen["initiator"] = h.rt.agents.current_initiator()
        seen["aborted_before"] = exec.signal.aborted
        bench.started["in-body"].set()
        await exec.signal.wait()
        seen["reason"] = exec.signal.reason
        return "stopped"

    bench = Bench()
    h.rt.tools.register(bench.tool("t", then=inspect_exec))
    agent = await h.agent(tool_call_response("call-77", "t", {"q": 1}))
    agent.followup(user_message("u1"))
    await bench.wait_started("in-body")
    exec = bench.execs["call-77"]
    assert exec.agent is agent
    assert seen["initiator"] is agent
    assert exec.call_id == "call-77"
    assert exec.name == "t"
    assert exec.arguments == {"q": 1}
    assert seen["aborted_before"] is False
    agent.cancel(CancelCause.hook("stop"))
    await settle(agent)
    assert seen["reason"] == CancelCause.hook("stop")
    assert tool_log(agent) == ["call(call-77)", "result(call-77,ABORTED)"]


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
