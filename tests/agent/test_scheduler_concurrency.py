"""§7.9 concurrency: classes, exclusive barriers, reclassification and the cap
(C7.9-6 … C7.9-10)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from pydantic import BaseModel

from steerloop import user_message
from steerloop.testing import (
    text_response,
    tool_calls_response,
    wait_all_tasks_blocked,
)
from steerloop.tools import ToolExec

from ..conftest import Harness, events_of, settle
from ..support import Bench, open_harness, yield_loop
from .scheduler_helpers import (
    tool_log,
)

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
