"""Write-ahead intent (issue 24): a call that may change the world starts only once the
events announcing it are durable, behind one fence per group of calls starting together;
a safe call is never delayed; a lease that may have expired is fenced before any start.

The store is ``FenceStore`` (``fence_helpers``): one trace orders the events written, the
fences (``fence`` asked, ``fenced`` returned) and the bodies (``begin:``/``end:``).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from steerloop import (
    AgentOptions,
    Runtime,
    SessionConflictError,
    ToolDecision,
    define_tool,
    tool,
    user_message,
)
from steerloop.errors import ToolDefinitionError
from steerloop.testing import text_response, tool_calls_response
from steerloop.tools import ToolExec

from ..conftest import Harness, compact, events_of, settle
from ..support import Bench, within
from .fence_helpers import FenceStore

OPTIONS = AgentOptions(provider="mock", model="m")
TOOLS = ("call(", "result(", "ask(", "decide(", "fence", "begin:", "end:")


@pytest.fixture
async def fs() -> AsyncIterator[tuple[Harness, FenceStore, Bench]]:
    """A harness over a ``FenceStore``, and a ``Bench`` tracing into the store's trace."""
    store = FenceStore()
    rt = await Runtime.open(store=store)
    bench = Bench()
    bench.trace = store.trace
    try:
        yield Harness(rt), store, bench
    finally:
        await within(rt.close())


def tools_trace(store: FenceStore) -> list[str]:
    return [item for item in store.trace if item.startswith(TOOLS)]


async def run(h: Harness, *calls: tuple[str, str]) -> Any:
    agent = await h.agent(
        tool_calls_response([(call_id, name, {}) for call_id, name in calls]),
        text_response("done"),
    )
    agent.followup(user_message("u1"))
    return agent


def register_durability_probe(h: Harness, store: FenceStore, bench: Bench) -> dict[str, int]:
    """Register the exclusive tool ``write``; the returned dict gets, per call, the last seq
    that was durable when its body began."""
    seen: dict[str, int] = {}

    async def body(args: Any, exec: ToolExec) -> str:
        seen[exec.call_id] = store.durable
        return "written"

    h.rt.tools.register(bench.tool("write", then=body))
    return seen


def seq_of(agent: Any, item: str) -> int:
    """The seq of the event rendered as ``item`` (e.g. ``call(c1)``)."""
    log = compact(agent.session)
    return agent.session.events[log.index(item)].seq  # type: ignore[no-any-return]


async def test_an_exclusive_call_starts_only_after_its_intent_is_fenced(
    fs: tuple[Harness, FenceStore, Bench],
) -> None:
    """C7.9-4, C7.9-7: ``msg · call(c1)`` is fenced before the exclusive body begins; the
    body sees everything up to its ``tool/call`` durable (the turn's open events and the
    assistant message included); the log is the canonical round trip (C7.9-1)."""
    h, store, bench = fs
    seen = register_durability_probe(h, store, bench)
    agent = await run(h, ("c1", "write"))
    await settle(agent)
    assert tools_trace(store) == [
        "call(c1)", "fence", "fenced", "begin:c1", "end:c1", "result(c1)",
    ]  # fmt: skip
    assert compact(agent.session)[-8:] == [
        "msg", "call(c1)", "result(c1)", "S-1.1", "S+1.2", "msg", "S-1.2", "T-1:completed",
    ]  # fmt: skip
    assert seen["c1"] == seq_of(agent, "call(c1)")
    assert store.fences == 1


async def test_a_safe_call_is_not_delayed_by_a_pending_fence(
    fs: tuple[Harness, FenceStore, Bench],
) -> None:
    """Counterexample to a global wait: with the fence of ``w1`` (safe but
    ``durable_dispatch=True``) held, the read ``r1`` of the same step begins and ends; ``w1``
    begins only after the fence returns. Results still commit in model order (C7.9-11)."""
    h, store, bench = fs
    store.hold = asyncio.Event()
    h.rt.tools.register(bench.tool("w", safe=True, durable_dispatch=True))
    h.rt.tools.register(bench.tool("r", safe=True))
    agent = await run(h, ("w1", "w"), ("r1", "r"))
    await bench.wait_started("r1")
    assert tools_trace(store) == ["call(w1)", "call(r1)", "fence", "begin:r1", "end:r1"]
    assert not bench.started["w1"].is_set()
    store.hold.set()
    await settle(agent)
    assert tools_trace(store) == [
        "call(w1)", "call(r1)", "fence", "begin:r1", "end:r1", "fenced",
        "begin:w1", "end:w1", "result(w1)", "result(r1)",
    ]  # fmt: skip


async def test_calls_starting_together_share_one_fence(
    fs: tuple[Harness, FenceStore, Bench],
) -> None:
    """Batch: three side-effecting calls the pool starts together (safe, with
    ``durable_dispatch=True``) wait for one fence that covers all three ``tool/call``s."""
    h, store, bench = fs
    h.rt.tools.register(bench.tool("w", safe=True, durable_dispatch=True))
    agent = await run(h, ("a", "w"), ("b", "w"), ("c", "w"))
    await settle(agent)
    assert store.fences == 1
    trace = tools_trace(store)
    assert trace[:5] == ["call(a)", "call(b)", "call(c)", "fence", "fenced"]
    bodies = ["begin:a", "end:a", "begin:b", "end:b", "begin:c", "end:c"]
    assert sorted(trace[5:11]) == sorted(bodies)
    assert trace[11:] == ["result(a)", "result(b)", "result(c)"]


async def test_each_exclusive_call_fences_its_own_tool_call(
    fs: tuple[Harness, FenceStore, Bench],
) -> None:
    """C7.9-7: exclusive calls run one after another and ``call(e2)`` is written only after
    ``result(e1)``, so ``e2`` needs a fence of its own (which also makes ``result(e1)``
    durable): one fence per exclusive call, none for the safe one between them."""
    h, store, bench = fs
    h.rt.tools.register(bench.tool("e"))
    h.rt.tools.register(bench.tool("r", safe=True))
    agent = await run(h, ("e1", "e"), ("r1", "r"), ("e2", "e"))
    await settle(agent)
    assert tools_trace(store) == [
        "call(e1)", "fence", "fenced", "begin:e1", "end:e1", "result(e1)",
        "call(r1)", "begin:r1", "end:r1", "result(r1)",
        "call(e2)", "fence", "fenced", "begin:e2", "end:e2", "result(e2)",
    ]  # fmt: skip


async def test_durable_dispatch_overrides_the_class(
    fs: tuple[Harness, FenceStore, Bench],
) -> None:
    """``durable_dispatch=False`` lets an exclusive call start at once; ``True`` fences a
    safe one; ``None`` follows ``concurrency_safe``."""
    h, store, bench = fs
    h.rt.tools.register(bench.tool("quick", durable_dispatch=False))
    h.rt.tools.register(bench.tool("careful", safe=True, durable_dispatch=True))
    agent = await run(h, ("q1", "quick"), ("c1", "careful"))
    await settle(agent)
    assert tools_trace(store) == [
        "call(q1)", "begin:q1", "end:q1", "result(q1)",
        "call(c1)", "fence", "fenced", "begin:c1", "end:c1", "result(c1)",
    ]  # fmt: skip
    assert [t.durable_dispatch for t in h.rt.tools.list()] == [False, True]
    assert bench.tool("x").needs_durable_dispatch(safe=False)
    assert not bench.tool("x").needs_durable_dispatch(safe=True)


async def test_an_approved_call_fences_its_decision_too(
    fs: tuple[Harness, FenceStore, Bench],
) -> None:
    """EVENTS.md §2.4a with write-ahead intent: the fence comes after
    ``tool/approval-decided`` and covers it, so a crash after the body began cannot leave
    a log whose call looks never allowed (that would repair to TOOL_NOT_STARTED)."""
    h, store, bench = fs
    seen = register_durability_probe(h, store, bench)
    h.rt.hooks.on("tools/pre-execute", lambda p: ToolDecision.ask("writes"))
    agent = await run(h, ("c1", "write"))
    h.rt.hooks.on(
        "tools/approval-requested", lambda p: agent.decide_approval(p.exec.call_id, "allow")
    )
    await settle(agent)
    assert tools_trace(store) == [
        "call(c1)", "ask(c1)", "decide(c1,allow)", "fence", "fenced",
        "begin:c1", "end:c1", "result(c1)",
    ]  # fmt: skip
    assert seen["c1"] == seq_of(agent, "decide(c1,allow)")


async def test_a_lease_that_may_have_expired_is_fenced_before_a_safe_call(
    fs: tuple[Harness, FenceStore, Bench],
) -> None:
    """Fenced dispatch: even a safe call (no fence of its own) does not start while the
    lease may have expired; the gate fences first, and the renewed lease lets it start."""
    h, store, bench = fs
    h.rt.tools.register(bench.tool("r", safe=True))
    agent = await h.agent(tool_calls_response([("r1", "r", {})]), text_response("done"))
    store.lease_ok = False
    agent.followup(user_message("u1"))
    await settle(agent)
    assert tools_trace(store) == ["call(r1)", "fence", "fenced", "begin:r1", "end:r1", "result(r1)"]


async def test_a_refused_fence_starts_no_tool(fs: tuple[Harness, FenceStore, Bench]) -> None:
    """C7.9-20 with fenced dispatch: a fence refused (the lease was taken over) is a failure
    of the scheduler's own steps: the body never begins, nothing else of the step starts,
    and recovery answers the call conservatively (its ``tool/call`` is durable); the turn
    ends in error carrying the refusal."""
    h, store, bench = fs
    store.refuse = SessionConflictError("the write lease was taken over")
    errors: list[Any] = []
    h.rt.hooks.on("agent/error", errors.append)
    h.rt.tools.register(bench.tool("w"))
    h.rt.tools.register(bench.tool("r", safe=True))
    agent = await run(h, ("w1", "w"), ("r1", "r"))
    await settle(agent)
    assert [item for item in tools_trace(store) if item.startswith(("begin", "end"))] == []
    assert compact(agent.session)[-5:] == [
        "call(w1)", "result(w1,TOOL_OUTCOME_UNKNOWN)", "result(r1,TOOL_NOT_STARTED)",
        "S-1.1", "T-1:error",
    ]  # fmt: skip
    assert [type(p.error) for p in errors] == [SessionConflictError]


async def test_a_refused_fence_of_a_pooled_call_fails_the_step(
    fs: tuple[Harness, FenceStore, Bench],
) -> None:
    """C7.9-20: a gate that fails inside a pooled task is the scheduler's failure too (not
    the tool's ``TOOL_FAILED``): no body of the group begins."""
    h, store, bench = fs
    store.refuse = SessionConflictError("the write lease was taken over")
    h.rt.tools.register(bench.tool("w", safe=True, durable_dispatch=True))
    agent = await run(h, ("a", "w"), ("b", "w"))
    await settle(agent)
    assert not any(item.startswith("begin") for item in store.trace)
    codes = [e.data.error.code for e in events_of(agent.session, "tool/result")]
    assert codes == ["TOOL_OUTCOME_UNKNOWN", "TOOL_OUTCOME_UNKNOWN"]
    assert compact(agent.session)[-1] == "T-1:error"


async def test_no_fence_on_a_runtime_without_a_store(h: Harness) -> None:
    """Without a store nothing can be made durable: the gate's fence is free and the
    exclusive call runs as before (C7.9-1)."""
    bench = Bench()
    h.rt.tools.register(bench.tool("w"))
    agent = await run(h, ("c1", "w"))
    await settle(agent)
    assert bench.trace == ["begin:c1", "end:c1"]


def test_define_tool_checks_the_new_keywords() -> None:
    """``durable_dispatch`` is True, False or None; ``reconcile`` is callable; ``@tool``
    takes both."""

    def body(args: Any, exec: ToolExec) -> str:
        return "ok"

    def check(call: Any, exec: ToolExec) -> None:
        return None

    hostile: Any
    for hostile in ("yes", 1, 0.0):
        with pytest.raises(ToolDefinitionError, match="durable_dispatch"):
            define_tool(
                name="t", description="", parameters={}, execute=body, durable_dispatch=hostile
            )
    with pytest.raises(ToolDefinitionError, match="reconcile"):
        define_tool(name="t", description="", parameters={}, execute=body, reconcile=hostile)

    @tool(durable_dispatch=True, reconcile=check)
    def send(to: str) -> str:
        """Send a message."""
        return to

    assert send.durable_dispatch is True and send.reconcile is check
    plain = define_tool(name="t", description="", parameters={}, execute=body)
    assert plain.durable_dispatch is None and plain.reconcile is None


async def test_exec_idempotency_key_is_the_calls_own(h: Harness) -> None:
    """``ToolExec.idempotency_key`` is derived from the session id, the call's turn and step
    and its call id: the same call id in another step gets another key."""
    from steerloop.tools._define import idempotency_key

    bench = Bench()
    h.rt.tools.register(bench.tool("w"))
    keys: list[str] = []
    h.rt.hooks.on("tools/pre-execute", lambda p: keys.append(p.exec.idempotency_key))
    agent = await h.agent(
        tool_calls_response([("c1", "w", {})]),
        tool_calls_response([("c1", "w", {})]),
        text_response("done"),
    )
    agent.followup(user_message("u1"))
    await settle(agent)
    assert keys == [idempotency_key("s-1", 1, 1, "c1"), idempotency_key("s-1", 1, 2, "c1")]
    assert keys[0] != keys[1] and all(len(k) == 64 and int(k, 16) >= 0 for k in keys)
    assert [bench.execs["c1"].idempotency_key] == keys[1:]
