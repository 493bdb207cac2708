"""Ending strategy and extension points (§7.11): C7.11-1 … C7.11-10."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from steerloop import (
    AgentOptions,
    CancelCause,
    PreStepDecision,
    RequestErrorAction,
    ToolExec,
    define_tool,
    user_message,
)
from steerloop.llm import GenerateRequest
from steerloop.messages import TextBlock
from steerloop.testing import (
    HANG,
    ScriptedAdapter,
    error_response,
    max_tokens_response,
    text_response,
    tool_call_response,
)

from ..conftest import Harness, compact, events_of, label, settle, texts
from ..support import reason_of

Next = Callable[[], Awaitable[Any]]


def announce(event: asyncio.Event, entry: Any) -> Callable[[GenerateRequest], Any]:
    def play(request: GenerateRequest) -> Any:
        event.set()
        return entry

    return play


async def test_turn_stopping_is_serial_with_bail(h: Harness) -> None:
    """C7.11-1: listeners run in registration order with payload `turn` and `signal`; a
    non-`None` return stops the rest; `None`-returning observers all run."""
    calls: list[tuple[str, int, bool]] = []

    def observer(name: str, result: Any = None) -> Callable[[Any], Any]:
        async def listen(payload: Any) -> Any:
            calls.append((name, payload.turn, payload.signal.aborted))
            return result

        return listen

    h.rt.hooks.on("agent/turn-stopping", observer("a"))
    h.rt.hooks.on("agent/turn-stopping", observer("b"))
    dispose = h.rt.hooks.on("agent/turn-stopping", observer("bail", result="stop here"))
    h.rt.hooks.on("agent/turn-stopping", observer("after-bail"))
    agent = await h.agent(text_response("1"), text_response("2"))
    agent.followup(user_message("u1"))
    await settle(agent)
    assert calls == [("a", 1, False), ("b", 1, False), ("bail", 1, False)]
    dispose()
    calls.clear()
    agent.followup(user_message("u2"))
    await settle(agent)
    assert calls == [("a", 2, False), ("b", 2, False), ("after-bail", 2, False)]
    assert reason_of(agent, 1).kind == reason_of(agent, 2).kind == "completed"


@pytest.mark.parametrize("how", ["inject", "steer"])
async def test_turn_stopping_inject_continues_turn(h: Harness, how: str) -> None:
    """C7.11-2: a listener that injects (or steers) continues the same turn with a new step;
    turn-stopping is called again at the next stop boundary."""
    calls: list[int] = []

    def stopping(payload: Any) -> None:
        calls.append(payload.turn)
        if len(calls) == 1:
            getattr(payload.agent, how)(user_message("c"))

    h.rt.hooks.on("agent/turn-stopping", stopping)
    agent = await h.agent(text_response("1"), text_response("2"))
    agent.followup(user_message("u1"))
    await settle(agent)
    log = compact(agent.session, only=["S", "T", "user", "msg"])
    assert log == [
        "T+1", "S+1.1", "user(u1)", "msg", "S-1.1",
        "S+1.2", "user(c)", "msg", "S-1.2", "T-1:completed",
    ]  # fmt: skip
    assert calls == [1, 1]
    assert texts(h.adapter.requests[1].messages) == ["user:u1", "assistant:1", "user:c"]


async def test_unbounded_injection_loops_until_listener_stops(h: Harness) -> None:
    """C7.11-2: termination is the listener's job — it keeps the turn going for as long as
    it injects (here it stops after three extra steps)."""
    budget = {"left": 3}

    def stopping(payload: Any) -> None:
        if budget["left"]:
            budget["left"] -= 1
            payload.agent.inject(user_message(f"again {budget['left']}"))

    h.rt.hooks.on("agent/turn-stopping", stopping)
    agent = await h.agent(*[text_response(str(i)) for i in range(4)])
    agent.followup(user_message("u1"))
    await settle(agent)
    assert compact(agent.session, only=["S+", "T"]) == [
        "T+1", "S+1.1", "S+1.2", "S+1.3", "S+1.4", "T-1:completed",
    ]  # fmt: skip


async def test_raising_turn_stopping_ends_error_driver_survives(h: Harness) -> None:
    """C7.11-3: a raising turn-stopping listener ends the turn `error`; the next followup
    is served normally."""
    raised = {"done": False}

    def stopping(payload: Any) -> None:
        if not raised["done"]:
            raised["done"] = True
            raise RuntimeError("reviewer crashed")

    h.rt.hooks.on("agent/turn-stopping", stopping)
    agent = await h.agent(text_response("1"), text_response("2"))
    agent.followup(user_message("u1"))
    await settle(agent)
    reason = reason_of(agent)
    assert reason.kind == "error" and "reviewer crashed" in reason.error.message
    assert compact(agent.session)[-3:] == ["msg", "S-1.1", "T-1:error"]
    agent.followup(user_message("u2"))
    await settle(agent)
    assert reason_of(agent, 2).kind == "completed"


# --- C7.11-4: outcome table -------------------------------------------------------------


async def test_outcome_completed(h: Harness) -> None:
    """C7.11-4: normal end → `completed`."""
    agent = await h.agent(text_response("ok"))
    agent.followup(user_message("u1"))
    await settle(agent)
    assert reason_of(agent).kind == "completed"


async def test_outcome_blocked(h: Harness) -> None:
    """C7.11-4: pre-step reject → `blocked`."""

    async def pre_step(payload: Any, next: Next) -> PreStepDecision:
        return PreStepDecision.reject()

    h.rt.hooks.on("agent/pre-step", pre_step)
    agent = await h.agent()
    agent.followup(user_message("u1"))
    await settle(agent)
    assert reason_of(agent).kind == "blocked"


@pytest.mark.parametrize(
    "cause", [CancelCause.user(), CancelCause.parent(), CancelCause.hook("budget")]
)
async def test_outcome_aborted(h: Harness, cause: CancelCause) -> None:
    """C7.11-4: cancel → `aborted{reason}` with the cause."""
    streaming = asyncio.Event()
    agent = await h.agent(announce(streaming, HANG))
    agent.followup(user_message("u1"))
    await asyncio.wait_for(streaming.wait(), 5)
    agent.cancel(cause)
    await settle(agent)
    reason = reason_of(agent)
    assert reason.kind == "aborted" and reason.reason == cause and reason.error is None


async def test_outcome_aborted_disposed(h: Harness) -> None:
    """C7.11-4: disposal during a turn → `aborted{reason: disposed}`."""
    streaming = asyncio.Event()
    h.adapter.add(announce(streaming, HANG))
    handle = await h.rt.agents.create(
        session_id="s-1", agent_options=AgentOptions(provider="mock", model="m")
    )
    agent = handle.agent
    agent.followup(user_message("u1"))
    await asyncio.wait_for(streaming.wait(), 5)
    await asyncio.wait_for(handle.dispose(), 5)
    reason = reason_of(agent)
    assert reason.kind == "aborted" and reason.reason.kind == "disposed"


async def test_outcome_error(h: Harness) -> None:
    """C7.11-4: any other failure → `error{error}`."""
    agent = await h.agent(error_response("E", "bad"))
    agent.followup(user_message("u1"))
    await settle(agent)
    reason = reason_of(agent)
    assert reason.kind == "error" and reason.error.code == "E"


async def test_outcome_max_tokens(h: Harness) -> None:
    """C7.11-4: a step cut by the token ceiling → `max-tokens`."""
    agent = await h.agent(max_tokens_response("cut"))
    agent.followup(user_message("u1"))
    await settle(agent)
    assert reason_of(agent).kind == "max-tokens"


# --- C7.11-5 … C7.11-9 -----------------------------------------------------------------


async def test_conditional_request_suppression(h: Harness) -> None:
    """C7.11-5: a pre-step reject leaves `T+n · claim · T-n:blocked` and sends nothing."""

    async def pre_step(payload: Any, next: Next) -> Any:
        if any("secret" in label(m) for m in payload.messages):
            return PreStepDecision.reject()
        return await next()

    h.rt.hooks.on("agent/pre-step", pre_step)
    agent = await h.agent(text_response("ok"))
    agent.followup(user_message("a secret"))
    await settle(agent)
    agent.followup(user_message("public"))
    await settle(agent)
    assert compact(agent.session, only=["T", "claim", "user"]) == [
        "T+1", "claim(nt,a secret)", "T-1:blocked",
        "T+2", "claim(nt,public)", "user(public)", "T-2:completed",
    ]  # fmt: skip
    assert [texts(r.messages) for r in h.adapter.requests] == [["user:public"]]


async def test_model_routing_through_agent_request(h: Harness) -> None:
    """C7.11-6: a route change through `agent/request` is logged as `hdr(change)` and the
    adapter registered for the chosen provider receives the request."""
    other = ScriptedAdapter([text_response("from other")])
    h.rt.llm.register_adapter(["other"], other)

    async def route(payload: Any, next: Next) -> Any:
        config = await next()
        return config.replace(provider="other", model="big") if payload.turn == 2 else config

    h.rt.hooks.on("agent/request", route)
    agent = await h.agent(text_response("from mock"))
    agent.followup(user_message("u1"))
    agent.followup(user_message("u2"))
    await settle(agent)
    assert [(r.provider, r.model) for r in h.adapter.requests] == [("mock", "m")]
    assert [(r.provider, r.model) for r in other.requests] == [("other", "big")]
    assert compact(agent.session, only=["hdr", "T+"]) == [
        "T+1", "hdr(initial)", "T+2", "hdr(change)",
    ]  # fmt: skip
    header = events_of(agent.session, "request/header")[-1].data.header
    assert header["config"]["provider"] == "other" and header["config"]["model"] == "big"


@pytest.mark.parametrize("allowed", [0, 1, 3])
async def test_bounded_provider_retry(h: Harness, allowed: int) -> None:
    """C7.11-7: requests = failures allowed + 1; the listener is the only source of retries."""
    decisions: list[str] = []

    async def policy(payload: Any, next: Next) -> Any:
        if len(decisions) < allowed:
            decisions.append("retry")
            return RequestErrorAction.retry()
        decisions.append("give up")
        return await next()

    h.rt.hooks.on("agent/request-error", policy)
    agent = await h.agent(*[error_response("E", "bad", retryable=True)] * 5)
    agent.followup(user_message("u1"))
    await settle(agent)
    assert len(h.adapter.requests) == allowed + 1
    assert decisions == ["retry"] * allowed + ["give up"]
    assert reason_of(agent).kind == "error"


async def test_defer_context_lands_in_next_step(h: Harness) -> None:
    """C7.11-8: `exec.defer_context(m)` makes `m` a `user/message` of the next step of the
    same turn, after the tool's result."""

    async def body(args: Any, exec: ToolExec) -> str:
        exec.defer_context(user_message("file changed"))
        return "written"

    h.rt.tools.register(
        define_tool(name="write", description="w", parameters={"type": "object"}, execute=body)
    )
    agent = await h.agent(tool_call_response("c1", "write", {}), text_response("done"))
    agent.followup(user_message("u1"))
    await settle(agent)
    assert compact(agent.session, only=["result", "S", "user", "T-"]) == [
        "S+1.1", "user(u1)", "result(c1)", "S-1.1", "S+1.2", "user(file changed)", "S-1.2",
        "T-1:completed",
    ]  # fmt: skip
    deferred = events_of(agent.session, "user/message")[-1].data
    assert (deferred.source.kind, deferred.source.call_id) == ("tool", "c1")
    assert texts(h.adapter.requests[1].messages)[-2:] == ["tool:written", "user:file changed"]


async def test_stream_observers_are_live_only(h: Harness) -> None:
    """C7.11-9: observers see live frames; the durable outcome is the event named by the
    `end` frame; a raising observer affects neither stream, settlement nor turn."""
    frames: list[Any] = []

    def raising(payload: Any) -> None:
        raise RuntimeError("ui crashed")

    async def raising_async(payload: Any) -> None:
        raise RuntimeError("async ui crashed")

    h.rt.hooks.on("agent/assistant-stream", raising)
    h.rt.hooks.on("agent/assistant-stream", raising_async)
    h.rt.hooks.on("agent/assistant-stream", lambda p: frames.append(p.frame))
    agent = await h.agent(text_response("hello"))
    agent.followup(user_message("u1"))
    await settle(agent)
    await h.rt.hooks.drain()
    end = frames[-1]
    assert end.kind == "end" and end.outcome["kind"] == "committed"
    event = agent.session.events[end.outcome["seq"] - 1]
    assert event.type == end.outcome["event_type"] == "assistant/message"
    assert event.data.message.content == (TextBlock("hello"),)
    assert [f.kind for f in frames].count("chunk") == len(event.data.stream)
    assert reason_of(agent).kind == "completed"


async def test_scripted_verification_of_a_whole_agent(h: Harness) -> None:
    """C7.11-10: an agent verified end to end through `adapter.requests`, the ordered log,
    hook traces and inbox state: a routed, retried, tool-using turn with a review step."""
    trace: list[str] = []
    other = ScriptedAdapter()
    h.rt.llm.register_adapter(["other"], other)

    async def body(args: Any, exec: ToolExec) -> str:
        trace.append(f"tool:{exec.call_id}")
        return "42"

    h.rt.tools.register(
        define_tool(name="calc", description="c", parameters={"type": "object"}, execute=body)
    )

    async def route(payload: Any, next: Next) -> Any:
        trace.append(f"request:{payload.step}")
        config = await next()
        return config.replace(provider="other")

    async def retry_once(payload: Any, next: Next) -> Any:
        trace.append(f"request-error:{payload.failure.code}")
        return RequestErrorAction.retry() if payload.failure.code == "RATE" else await next()

    def review(payload: Any) -> None:
        trace.append("turn-stopping")
        if trace.count("turn-stopping") == 1:
            payload.agent.inject(user_message("double-check"))

    h.rt.hooks.on("agent/request", route)
    h.rt.hooks.on("agent/request-error", retry_once)
    h.rt.hooks.on("agent/turn-stopping", review)
    other.add(
        error_response("RATE", "slow down", retryable=True),
        tool_call_response("c1", "calc", {}),
        text_response("it is 42"),
        text_response("confirmed"),
    )
    agent = await h.agent()
    agent.followup(user_message("what is 6*7"))
    await settle(agent)
    assert h.adapter.requests == [] and len(other.requests) == 4
    assert [texts(r.messages)[-1] for r in other.requests] == [
        "user:what is 6*7", "user:what is 6*7", "tool:42", "user:double-check",
    ]  # fmt: skip
    assert trace == [
        "request:1", "request-error:RATE", "request:1", "tool:c1", "request:2",
        "turn-stopping", "request:3", "turn-stopping",
    ]  # fmt: skip
    assert compact(agent.session, only=["S", "T", "user", "attempt", "msg", "call", "result"]) == [
        "T+1", "S+1.1", "user(what is 6*7)", "attempt", "msg", "call(c1)", "result(c1)",
        "S-1.1", "S+1.2", "msg", "S-1.2", "S+1.3", "user(double-check)", "msg", "S-1.3",
        "T-1:completed",
    ]  # fmt: skip
    assert not agent.inbox.has_pending and agent.status == "idle"
