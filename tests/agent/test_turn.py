"""Turn order and pre-step (§7.5): C7.5-1 … C7.5-22."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from steerloop import (
    AbortSignal,
    CancelCause,
    LlmError,
    LlmFailure,
    PreStepDecision,
    ToolExec,
    UserMessage,
    define_tool,
    user_message,
)
from steerloop.llm import GenerateRequest
from steerloop.testing import (
    HANG,
    error_response,
    max_tokens_response,
    raise_after,
    text_response,
    tool_call_response,
)

from ..conftest import Harness, compact, events_of, label, settle, texts

Next = Callable[[], Awaitable[Any]]


def register_echo(h: Harness, body: Callable[[ToolExec], Any] | None = None) -> None:
    async def execute(args: Any, exec: ToolExec) -> Any:
        if body is not None:
            out = body(exec)
            if asyncio.iscoroutine(out):
                out = await out
            if out is not None:
                return out
        return "ok"

    h.rt.tools.register(
        define_tool(name="echo", description="echo", parameters={"type": "object"}, execute=execute)
    )


def announce(event: asyncio.Event, entry: Any) -> Callable[[GenerateRequest], Any]:
    """A script entry that sets ``event`` when its request arrives, then plays ``entry``."""

    def play(request: GenerateRequest) -> Any:
        event.set()
        return entry

    return play


def turn_end(agent: Any, turn: int = 1) -> Any:
    return next(e.data.reason for e in events_of(agent.session, "turn/end") if e.data.turn == turn)


# --- C7.5-1 / 2 / 3 -------------------------------------------------------------------


async def test_canonical_text_only_turn(h: Harness) -> None:
    """C7.5-1: the canonical turn of an idle followup, and the request it sends."""
    agent = await h.agent(text_response("hello"))
    agent.followup(user_message("u1"))
    await settle(agent)
    assert compact(agent.session) == [
        "ins(nt,u1)", "T+1", "claim(nt,u1)", "S+1.1", "sys", "user(u1)", "hdr(initial)", "ctx",
        "msg", "S-1.1", "T-1:completed",
    ]  # fmt: skip
    [request] = h.adapter.requests
    assert (request.provider, request.model, request.tools, request.max_tokens) == (
        "mock", "m", (), None,
    )  # fmt: skip
    assert texts(request.messages) == ["user:u1"]


async def test_second_turn_has_no_sys_hdr_ctx(h: Harness) -> None:
    """C7.5-1: `sys`, `hdr` and `ctx` only appear when needed — not in an identical 2nd turn."""
    agent = await h.agent(text_response("a"), text_response("b"))
    agent.followup(user_message("u1"))
    await settle(agent)
    n = len(compact(agent.session))
    agent.followup(user_message("u2"))
    await settle(agent)
    assert compact(agent.session)[n:] == [
        "ins(nt,u2)", "T+2", "claim(nt,u2)", "S+2.1", "user(u2)", "msg", "S-2.1", "T-2:completed",
    ]  # fmt: skip


async def test_turn_start_precedes_claim_and_prompt_assembly(h: Harness) -> None:
    """C7.5-2: a prompt-section callback already sees `T+1` and the taken inbox."""
    seen: list[tuple[list[str], tuple[UserMessage, ...]]] = []

    def section(agent: Any) -> str:
        seen.append((compact(agent.session), agent.inbox.next_turn))
        return "P"

    h.rt.system_prompt.add_section("s", section)
    agent = await h.agent(text_response("a"))
    agent.followup(user_message("u1"))
    await settle(agent)
    assert seen == [(["ins(nt,u1)", "T+1", "claim(nt,u1)"], ())]


async def test_pre_step_once_per_proposed_step(h: Harness) -> None:
    """C7.5-3: pre-step runs after claim and prompt assembly, before `step/start`, once per
    proposed step, with the claimed batch, turn, step number and the turn's signal."""
    register_echo(h)
    trace: list[Any] = []
    h.rt.system_prompt.add_section("s", lambda agent: trace.append("section") or "P")

    async def pre_step(payload: Any, next: Next) -> Any:
        trace.append(
            (
                "pre-step",
                [label(m) for m in payload.messages],
                payload.turn,
                payload.step,
                compact(payload.agent.session)[-1],
            )
        )
        signals.append(payload.signal)
        return await next()

    signals: list[AbortSignal] = []
    h.rt.hooks.on("agent/pre-step", pre_step)
    agent = await h.agent(tool_call_response("c1", "echo", {}), text_response("done"))
    agent.followup(user_message("u1"))
    await settle(agent)
    assert trace == [
        "section",
        ("pre-step", ["u1"], 1, 1, "claim(nt,u1)"),
        "section",
        ("pre-step", [], 1, 2, "S-1.1"),
    ]
    assert isinstance(signals[0], AbortSignal) and signals[0] is signals[1]
    assert not signals[0].aborted
    assert compact(agent.session, only=["S", "T"]) == [
        "T+1", "S+1.1", "S-1.1", "S+1.2", "S-1.2", "T-1:completed",
    ]  # fmt: skip


# --- C7.5-4 / 5 ----------------------------------------------------------------------


async def test_default_decision_adds_changed_runtime_context(h: Harness) -> None:
    """C7.5-4: default `enter(claimed + snapshot)`; the snapshot follows the claimed
    messages and is only added when it differs from the last one on the surface."""
    context = {"text": "cwd=/a"}
    h.rt.system_prompt.add_context_section("env", lambda agent: context["text"])
    defaults: list[list[str]] = []

    async def pre_step(payload: Any, next: Next) -> Any:
        decision = await next()
        defaults.append([label(m) for m in decision.messages])
        return decision

    h.rt.hooks.on("agent/pre-step", pre_step)
    agent = await h.agent(text_response("1"), text_response("2"), text_response("3"))
    agent.followup(user_message("u1"))
    await settle(agent)
    agent.followup(user_message("u2"))
    await settle(agent)
    context["text"] = "cwd=/b"
    agent.followup(user_message("u3"))
    await settle(agent)
    assert defaults == [["u1", "## env\ncwd=/a"], ["u2"], ["u3", "## env\ncwd=/b"]]
    assert compact(agent.session, only=["user", "T+"]) == [
        "T+1", "user(u1)", "user(## env\ncwd=/a)",
        "T+2", "user(u2)",
        "T+3", "user(u3)", "user(## env\ncwd=/b)",
    ]  # fmt: skip
    snapshot = events_of(agent.session, "user/message")[1].data
    assert (snapshot.source.kind, snapshot.source.plugin) == ("plugin", "steerloop/runtime-context")
    assert texts(h.adapter.requests[0].messages) == ["user:u1", "user:## env\ncwd=/a"]


async def test_pre_step_enter_replaces_the_batch(h: Harness) -> None:
    """C7.5-5: `enter(messages=[...])` writes exactly that list, in order, nothing else."""
    h.rt.system_prompt.add_context_section("env", lambda agent: "ctx")
    a, b = user_message("a"), user_message("b")

    async def pre_step(payload: Any, next: Next) -> Any:
        return PreStepDecision.enter([b, a])

    h.rt.hooks.on("agent/pre-step", pre_step)
    agent = await h.agent(text_response("x"))
    agent.followup(user_message("u1"))
    await settle(agent)
    assert compact(agent.session, only=["user", "claim"]) == ["claim(nt,u1)", "user(b)", "user(a)"]
    assert texts(h.adapter.requests[0].messages) == ["user:b", "user:a"]


# --- C7.5-6 / 7 / 8 / 9 / 10 -----------------------------------------------------------


async def test_reject_ends_the_turn_blocked(h: Harness) -> None:
    """C7.5-6: `reject()` → `T+1 · claim · T-1:blocked`; input is gone; a later followup runs."""
    calls = {"n": 0}

    async def pre_step(payload: Any, next: Next) -> Any:
        calls["n"] += 1
        return PreStepDecision.reject() if calls["n"] == 1 else await next()

    h.rt.hooks.on("agent/pre-step", pre_step)
    agent = await h.agent(text_response("ok"))
    agent.followup(user_message("u1"))
    await settle(agent)
    assert compact(agent.session) == ["ins(nt,u1)", "T+1", "claim(nt,u1)", "T-1:blocked"]
    assert h.adapter.requests == []
    assert not agent.inbox.has_pending and agent.session.derive_messages() == []
    agent.followup(user_message("u2"))
    await settle(agent)
    assert compact(agent.session)[4:] == [
        "ins(nt,u2)", "T+2", "claim(nt,u2)", "S+2.1", "sys", "user(u2)", "hdr(initial)", "ctx",
        "msg", "S-2.1", "T-2:completed",
    ]  # fmt: skip
    assert texts(h.adapter.requests[0].messages) == ["user:u2"]


async def test_reject_counterexample_plugin_requeues(h: Harness) -> None:
    """C7.5-6 counterexample: a plugin that keeps the input re-queues it (an `ins` event)."""

    async def pre_step(payload: Any, next: Next) -> Any:
        for message in payload.messages:
            payload.agent.inbox.prepend("next-turn", message)
        return PreStepDecision.reject()

    dispose = h.rt.hooks.on("agent/pre-step", pre_step)
    agent = await h.agent(text_response("ok"), text_response("ok2"))
    u1 = user_message("u1")
    agent.followup(u1)
    await settle(agent)
    assert compact(agent.session) == [
        "ins(nt,u1)", "T+1", "claim(nt,u1)", "ins(nt,u1)", "T-1:blocked",
    ]  # fmt: skip
    assert agent.inbox.next_turn == (u1,)
    assert agent.status == "idle" and h.adapter.requests == []
    dispose()
    agent.followup(user_message("u2"))
    await settle(agent)
    assert compact(agent.session, only=["T", "claim", "user"])[3:] == [
        "T+2", "claim(nt,u1)", "user(u1)", "T-2:completed",
        "T+3", "claim(nt,u2)", "user(u2)", "T-3:completed",
    ]  # fmt: skip


async def test_empty_enter_at_first_step_completes_without_step(h: Harness) -> None:
    """C7.5-7: `enter([])` at a turn's first step ends it `completed`, no step, no request."""

    async def pre_step(payload: Any, next: Next) -> Any:
        return PreStepDecision.enter([])

    h.rt.hooks.on("agent/pre-step", pre_step)
    agent = await h.agent(text_response("never"))
    agent.followup(user_message("u1"))
    await settle(agent)
    assert compact(agent.session) == ["ins(nt,u1)", "T+1", "claim(nt,u1)", "T-1:completed"]
    assert h.adapter.requests == []


async def test_empty_enter_at_later_step_still_requests(h: Harness) -> None:
    """C7.5-8: `enter([])` at a later step still opens it (no `user/message`) and requests."""
    register_echo(h)

    async def pre_step(payload: Any, next: Next) -> Any:
        return await next() if payload.step == 1 else PreStepDecision.enter([])

    h.rt.hooks.on("agent/pre-step", pre_step)
    agent = await h.agent(tool_call_response("c1", "echo", {}), text_response("done"))
    agent.followup(user_message("u1"))
    await settle(agent)
    assert compact(agent.session)[-7:] == [
        "call(c1)", "result(c1)", "S-1.1", "S+1.2", "msg", "S-1.2", "T-1:completed",
    ]  # fmt: skip
    assert len(h.adapter.requests) == 2


@pytest.mark.parametrize(
    ("first", "kind"),
    [(max_tokens_response("cut"), "max-tokens"), (text_response("done"), "completed")],
)
async def test_continuation_pre_step_without_messages_keeps_stop_reason(
    h: Harness, first: Any, kind: str
) -> None:
    """C7.5-9: after a stop reason, a continuation pre-step with no messages ends the turn
    with that reason and writes no extra `step/start`."""
    injected = {"done": False}

    async def stopping(payload: Any) -> None:
        if not injected["done"]:
            injected["done"] = True
            payload.agent.inject(user_message("c"))

    async def pre_step(payload: Any, next: Next) -> Any:
        return await next() if payload.step == 1 else PreStepDecision.enter([])

    h.rt.hooks.on("agent/turn-stopping", stopping)
    h.rt.hooks.on("agent/pre-step", pre_step)
    agent = await h.agent(first)
    agent.followup(user_message("u1"))
    await settle(agent)
    assert compact(agent.session, only=["S", "T", "ins", "claim", "user"]) == [
        "ins(nt,u1)", "T+1", "claim(nt,u1)", "S+1.1", "user(u1)", "S-1.1",
        "ins(ns,c)", "claim(ns,c)", f"T-1:{kind}",
    ]  # fmt: skip
    assert len(h.adapter.requests) == 1 and not agent.inbox.has_pending


async def test_raising_pre_step_ends_turn_error(h: Harness) -> None:
    """C7.5-10: a raising pre-step ends the turn `error{UNKNOWN}` without a step; `agent/error`
    fires; a message steered meanwhile stays pending until another waking send."""
    errors: list[Any] = []
    h.rt.hooks.on("agent/error", errors.append)
    calls = {"n": 0}

    async def pre_step(payload: Any, next: Next) -> Any:
        calls["n"] += 1
        if calls["n"] == 1:
            payload.agent.steer(user_message("s"))
            raise RuntimeError("boom")
        return await next()

    h.rt.hooks.on("agent/pre-step", pre_step)
    agent = await h.agent(text_response("ok"))
    agent.followup(user_message("u1"))
    await settle(agent)
    assert compact(agent.session) == [
        "ins(nt,u1)", "T+1", "claim(nt,u1)", "ins(ns,s)", "T-1:error",
    ]  # fmt: skip
    reason = turn_end(agent)
    assert reason.error.code == "UNKNOWN" and "boom" in reason.error.message
    assert [(e.turn, e.step, type(e.error)) for e in errors] == [(1, 0, RuntimeError)]
    assert [label(m) for m in agent.inbox.next_step] == ["s"]
    assert agent.status == "idle" and h.adapter.requests == []
    agent.followup(user_message("u2"))
    await settle(agent)
    assert compact(agent.session, only=["T", "claim", "user"])[3:] == [
        "T+2", "claim(ns,s)", "claim(nt,u2)", "user(s)", "user(u2)", "T-2:completed",
    ]  # fmt: skip


# --- C7.5-11 --------------------------------------------------------------------------


@pytest.mark.parametrize("window", ["prompt", "context", "waterfall"])
async def test_cancel_during_pre_step_windows(h: Harness, window: str) -> None:
    """C7.5-11: a cancel during prompt assembly, runtime-context projection or the pre-step
    waterfall gives `T+1 · claim · T-1:aborted`; `u1` is neither pending nor on the surface."""
    entered, release = asyncio.Event(), asyncio.Event()

    async def wait(*_: Any) -> str:
        entered.set()
        await release.wait()
        return "text"

    if window == "prompt":
        h.rt.system_prompt.add_section("s", wait)
    elif window == "context":
        h.rt.system_prompt.add_context_section("c", wait)
    else:

        async def pre_step(payload: Any, next: Next) -> Any:
            await wait()
            return await next()

        h.rt.hooks.on("agent/pre-step", pre_step)
    agent = await h.agent(text_response("never"))
    agent.followup(user_message("u1"))
    await asyncio.wait_for(entered.wait(), 5)
    agent.cancel(CancelCause.user())
    release.set()
    await settle(agent)
    assert compact(agent.session) == ["ins(nt,u1)", "T+1", "claim(nt,u1)", "T-1:aborted"]
    assert turn_end(agent).reason == CancelCause.user()
    assert h.adapter.requests == [] and not agent.inbox.has_pending
    assert agent.session.derive_messages() == []


# --- C7.5-12 / 13 / 14 / 15 / 16 -------------------------------------------------------


async def test_step_outcomes(h: Harness) -> None:
    """C7.5-12: tool calls committed without `concludes_turn` owe a request → next step with
    target `next-step` (queued next-turn input is not claimed); text/max-tokens let it stop."""
    register_echo(h, lambda exec: exec.agent.followup(user_message("u2")))
    agent = await h.agent(
        tool_call_response("c1", "echo", {}), max_tokens_response("cut"), text_response("t2")
    )
    agent.followup(user_message("u1"))
    await settle(agent)
    assert compact(agent.session, only=["S", "T", "claim", "msg", "result"]) == [
        "T+1", "claim(nt,u1)", "S+1.1", "msg", "result(c1)", "S-1.1",
        "S+1.2", "msg", "S-1.2", "T-1:max-tokens",
        "T+2", "claim(nt,u2)", "S+2.1", "msg", "S-2.1", "T-2:completed",
    ]  # fmt: skip


async def test_non_empty_next_step_continues_without_turn_stopping(h: Harness) -> None:
    """C7.5-13: a steer landing during the step makes another step of the same turn;
    `agent/turn-stopping` is not called at that boundary."""
    stops: list[list[str]] = []
    h.rt.hooks.on("agent/turn-stopping", lambda p: stops.append(compact(p.agent.session)[-2:]))
    agent = await h.agent()

    def steer_mid_stream(request: GenerateRequest) -> Any:
        agent.steer(user_message("s"))
        return text_response("a")

    h.adapter.add(steer_mid_stream, text_response("b"))
    agent.followup(user_message("u1"))
    await settle(agent)
    assert compact(agent.session, only=["S", "T", "user", "ins(ns", "claim(ns"]) == [
        "T+1", "S+1.1", "user(u1)", "ins(ns,s)", "S-1.1",
        "claim(ns,s)", "S+1.2", "user(s)", "S-1.2", "T-1:completed",
    ]  # fmt: skip
    assert stops == [["msg", "S-1.2"]]


async def test_turn_stopping_awaited_once_then_rechecked(h: Harness) -> None:
    """C7.5-14: with an empty `next_step` turn-stopping is awaited once; the loop re-checks
    `next_step` afterwards (an inject after an await continues the turn)."""
    calls: list[int] = []
    gate = asyncio.Event()

    async def stopping(payload: Any) -> None:
        calls.append(len(calls))
        if len(calls) == 1:
            asyncio.get_running_loop().call_soon(gate.set)
            await gate.wait()
            payload.agent.inject(user_message("late"))

    h.rt.hooks.on("agent/turn-stopping", stopping)
    agent = await h.agent(text_response("a"), text_response("b"))
    agent.followup(user_message("u1"))
    await settle(agent)
    assert calls == [0, 1]
    assert compact(agent.session, only=["S", "T", "user"]) == [
        "T+1", "S+1.1", "user(u1)", "S-1.1", "S+1.2", "user(late)", "S-1.2", "T-1:completed",
    ]  # fmt: skip


async def test_turn_stopping_once_for_plain_turn(h: Harness) -> None:
    """C7.5-14: a plain turn awaits turn-stopping exactly once, then stops."""
    calls: list[int] = []

    async def stopping(payload: Any) -> None:
        await asyncio.sleep(0)
        calls.append(payload.turn)

    h.rt.hooks.on("agent/turn-stopping", stopping)
    agent = await h.agent(text_response("a"))
    agent.followup(user_message("u1"))
    await settle(agent)
    assert calls == [1] and turn_end(agent).kind == "completed"


async def test_max_tokens_is_sticky_within_turn(h: Harness) -> None:
    """C7.5-15: steps ending `max-tokens, completed` give `T-1:max-tokens`."""
    done = {"x": False}

    def stopping(payload: Any) -> None:
        if not done["x"]:
            done["x"] = True
            payload.agent.inject(user_message("go on"))

    h.rt.hooks.on("agent/turn-stopping", stopping)
    agent = await h.agent(max_tokens_response("cut"), text_response("rest"))
    agent.followup(user_message("u1"))
    await settle(agent)
    assert compact(agent.session, only=["S", "T"]) == [
        "T+1", "S+1.1", "S-1.1", "S+1.2", "S-1.2", "T-1:max-tokens",
    ]  # fmt: skip


async def test_max_tokens_does_not_leak_across_turns(h: Harness) -> None:
    """C7.5-16: turn 2 after a `max-tokens` turn 1 ends `completed`."""
    agent = await h.agent(max_tokens_response("cut"), text_response("ok"))
    agent.followup(user_message("u1"))
    agent.followup(user_message("u2"))
    await settle(agent)
    assert compact(agent.session, only=["T-"]) == ["T-1:max-tokens", "T-2:completed"]


# --- C7.5-17 / 18 / 18a ----------------------------------------------------------------


@pytest.mark.parametrize("source", ["tool", "adapter"])
async def test_next_turn_input_never_joins_active_turn(h: Harness, source: str) -> None:
    """C7.5-17: a followup sent during turn 1 (tool body / adapter mid-stream) is in no request
    of turn 1; `T+2 · claim(nt,u2)` follows in the same driver and u2 leads turn 2's input."""
    statuses: list[str] = []
    h.rt.hooks.on("agent/status", lambda p: statuses.append(p.status))
    register_echo(h, lambda exec: exec.agent.followup(user_message("u2")))
    agent = await h.agent()

    def followup_mid_stream(request: GenerateRequest) -> Any:
        agent.followup(user_message("u2"))
        return text_response("t1")

    if source == "tool":
        h.adapter.add(tool_call_response("c1", "echo", {}), text_response("t1"))
    else:
        h.adapter.add(followup_mid_stream)
    h.adapter.add(text_response("t2"))
    agent.followup(user_message("u1"))
    await settle(agent)
    *turn1, turn2 = h.adapter.requests
    for request in turn1:
        assert "user:u2" not in texts(request.messages)
    assert compact(agent.session, only=["T", "claim"])[-4:] == [
        "T-1:completed", "T+2", "claim(nt,u2)", "T-2:completed",
    ]  # fmt: skip
    history = len(turn1[-1].messages) + 1  # turn 1's last request + its reply
    assert texts(turn2.messages)[history:] == ["user:u2"]
    assert statuses == ["running", "idle"]


async def test_next_turn_only_when_pending_with_fresh_signal(h: Harness) -> None:
    """C7.5-18: the driver opens another turn only for pending input, and each turn has a
    fresh signal: cancelling turn 1 never aborts turn 2."""
    signals: dict[int, AbortSignal] = {}

    async def pre_step(payload: Any, next: Next) -> Any:
        signals[payload.turn] = payload.signal
        return await next()

    h.rt.hooks.on("agent/pre-step", pre_step)
    streaming = asyncio.Event()
    agent = await h.agent(announce(streaming, HANG), text_response("two"), text_response("3"))
    agent.followup(user_message("u1"))
    agent.followup(user_message("u2"))
    await asyncio.wait_for(streaming.wait(), 5)
    agent.cancel(CancelCause.user(), keep_inbox=True)
    await settle(agent)
    assert compact(agent.session, only=["T"]) == ["T+1", "T-1:aborted"]
    assert [label(m) for m in agent.inbox.next_turn] == ["u2"]
    agent.followup(user_message("u3"))
    await settle(agent)
    assert compact(agent.session, only=["T", "claim"])[3:] == [
        "T+2", "claim(nt,u2)", "T-2:completed", "T+3", "claim(nt,u3)", "T-3:completed",
    ]  # fmt: skip
    assert signals[1].aborted and not signals[2].aborted and not signals[3].aborted
    assert len({id(s) for s in signals.values()}) == 3


async def test_single_turn_when_nothing_pending(h: Harness) -> None:
    """C7.5-18: with nothing pending after turn 1, no further turn opens."""
    agent = await h.agent(text_response("a"))
    agent.followup(user_message("u1"))
    await settle(agent)
    assert compact(agent.session, only=["T"]) == ["T+1", "T-1:completed"]
    assert agent.status == "idle"


async def test_blocked_turn_stops_the_driver(h: Harness) -> None:
    """C7.5-18a: after `T-1:blocked` the agent goes idle with prompts queued; the next waking
    send's turn claims the oldest queued prompt first."""
    calls = {"n": 0}

    async def pre_step(payload: Any, next: Next) -> Any:
        calls["n"] += 1
        return PreStepDecision.reject() if calls["n"] == 1 else await next()

    h.rt.hooks.on("agent/pre-step", pre_step)
    agent = await h.agent(text_response("2"), text_response("3"))
    agent.followup(user_message("u1"))
    agent.followup(user_message("u2"))
    await settle(agent)
    assert compact(agent.session) == [
        "ins(nt,u1)", "T+1", "claim(nt,u1)", "ins(nt,u2)", "T-1:blocked",
    ]  # fmt: skip
    assert agent.status == "idle" and [label(m) for m in agent.inbox.next_turn] == ["u2"]
    agent.followup(user_message("u3"))
    await settle(agent)
    assert compact(agent.session, only=["T", "claim"])[3:] == [
        "T+2", "claim(nt,u2)", "T-2:completed", "T+3", "claim(nt,u3)", "T-3:completed",
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("first", "kind"),
    [(text_response("1"), "completed"), (max_tokens_response("cut"), "max-tokens")],
)
async def test_other_outcomes_continue_with_queued_prompts(
    h: Harness, first: Any, kind: str
) -> None:
    """C7.5-18a counterexample: after a completed or max-tokens turn the same driver opens the
    next turn for queued prompts."""
    agent = await h.agent(first, text_response("2"))
    agent.followup(user_message("u1"))
    agent.followup(user_message("u2"))
    await settle(agent)
    assert compact(agent.session, only=["T", "claim"]) == [
        "T+1", "claim(nt,u1)", f"T-1:{kind}", "T+2", "claim(nt,u2)", "T-2:completed",
    ]  # fmt: skip


async def test_error_turn_stops_the_driver(h: Harness) -> None:
    """C7.5-18a, C7.5-20: an `error` turn stops the driver like a blocked one; the prompt queued
    behind it waits for the next waking send, whose turn claims it first."""
    agent = await h.agent(error_response("E", "bad"), text_response("2"), text_response("3"))
    agent.followup(user_message("u1"))
    agent.followup(user_message("u2"))
    await settle(agent)
    assert compact(agent.session, only=["T", "claim"]) == ["T+1", "claim(nt,u1)", "T-1:error"]
    assert agent.status == "idle" and [label(m) for m in agent.inbox.next_turn] == ["u2"]
    assert len(h.adapter.requests) == 1
    agent.followup(user_message("u3"))
    await settle(agent)
    assert compact(agent.session, only=["T", "claim"])[3:] == [
        "T+2", "claim(nt,u2)", "T-2:completed", "T+3", "claim(nt,u3)", "T-3:completed",
    ]  # fmt: skip


async def test_error_turn_leftovers_wait_for_a_latched_wake(h: Harness) -> None:
    """C7.5-18a: a wake latched during maintenance after an `error` turn serves the prompt
    queued behind it."""
    agent = await h.agent(error_response("E", "bad"), text_response("2"))
    agent.followup(user_message("u1"))
    agent.followup(user_message("u2"))
    await settle(agent)
    release = asyncio.Event()

    async def job(signal: AbortSignal) -> None:
        await release.wait()

    done = agent.run_maintenance(job)
    agent.steer(user_message("s"))  # latched: maintenance is running
    release.set()
    await done
    await settle(agent)
    assert compact(agent.session, only=["T", "claim"])[3:] == [
        "T+2", "claim(ns,s)", "claim(nt,u2)", "T-2:completed",
    ]  # fmt: skip


# --- C7.5-19 / 20 / 21 / 22 ------------------------------------------------------------


async def test_step_numbers_without_gaps(h: Harness) -> None:
    """C7.5-19: only admitted steps write `step/start`; numbers are 1..k in each turn."""
    register_echo(h)
    proposed: list[tuple[int, int]] = []

    async def pre_step(payload: Any, next: Next) -> Any:
        proposed.append((payload.turn, payload.step))
        if payload.turn == 2:
            return PreStepDecision.enter([])  # not admitted: no step, no number consumed
        return await next()

    h.rt.hooks.on("agent/pre-step", pre_step)
    agent = await h.agent(
        tool_call_response("c1", "echo", {}),
        tool_call_response("c2", "echo", {}),
        text_response("a"),
        text_response("b"),
    )
    agent.followup(user_message("u1"))
    agent.followup(user_message("u2"))
    agent.followup(user_message("u3"))
    await settle(agent)
    assert compact(agent.session, only=["S+", "T+"]) == [
        "T+1", "S+1.1", "S+1.2", "S+1.3", "T+2", "T+3", "S+3.1",
    ]  # fmt: skip
    assert proposed == [(1, 1), (1, 2), (1, 3), (2, 1), (3, 1)]


async def test_failure_closes_open_step_first(h: Harness) -> None:
    """C7.5-20: a failure ends the turn `error`, closing the open step first."""
    agent = await h.agent(raise_after([], RuntimeError("adapter broke")))
    agent.followup(user_message("u1"))
    await settle(agent)
    assert compact(agent.session)[-3:] == ["attempt", "S-1.1", "T-1:error"]


async def test_cancel_closes_open_step_first(h: Harness) -> None:
    """C7.5-20: cancellation ends the turn `aborted`, closing the open step first; the driver
    goes on only through a new wake."""
    agent = await h.agent(HANG, text_response("next"))

    def on_event(payload: Any) -> None:
        if payload.event.type == "request/context":
            asyncio.get_running_loop().call_soon(agent.cancel, CancelCause.user())

    h.rt.hooks.on("session/event", on_event)
    agent.followup(user_message("u1"))
    await settle(agent)
    assert compact(agent.session)[-3:] == ["msg(interrupted)", "S-1.1", "T-1:aborted"]
    assert agent.status == "idle" and len(h.adapter.requests) == 1
    agent.followup(user_message("u2"))
    await settle(agent)
    assert compact(agent.session, only=["T-"]) == ["T-1:aborted", "T-2:completed"]


async def test_turn_end_error_for_llm_error_is_verbatim(h: Harness) -> None:
    """C7.5-21: an `LlmError`'s failure facts are recorded verbatim."""
    failure = LlmFailure(
        message="overloaded", code="OVERLOADED", status=529, retryable=True,
        provider_retry_after_ms=1200, request_id="req-7",
    )  # fmt: skip
    agent = await h.agent(raise_after([], LlmError(failure)))
    agent.followup(user_message("u1"))
    await settle(agent)
    assert turn_end(agent).kind == "error" and turn_end(agent).error == failure


@pytest.mark.parametrize("link", ["cause", "context"])
async def test_turn_end_error_chain_text(h: Harness, link: str) -> None:
    """C7.5-21: any other exception → `{message: <chain text>, code: "UNKNOWN"}` including the
    messages of `__cause__` / `__context__`."""
    inner = ValueError("inner detail")
    outer = RuntimeError("outer failure")
    if link == "cause":
        outer.__cause__ = inner
    else:
        outer.__context__ = inner
    agent = await h.agent(raise_after([], outer))
    agent.followup(user_message("u1"))
    await settle(agent)
    error = turn_end(agent).error
    assert error.code == "UNKNOWN"
    assert "outer failure" in error.message and "inner detail" in error.message
    assert error.status is None and error.retryable is None


def fail_append_of(agent: Any, event_type: str) -> None:
    """Fault injection: the store rejects appends of ``event_type``."""
    original = agent.session.append

    def append(first: Any, *args: Any, **kwargs: Any) -> Any:
        # append(record) names its type in record.TYPE; append(type, data) passes the name.
        type = getattr(first, "TYPE", first)
        if type == event_type:
            raise OSError(f"store rejected {type}")
        return original(first, *args, **kwargs)

    agent.session.append = append


async def test_turn_start_append_failure_leaves_no_turn(h: Harness) -> None:
    """C7.5-22: a failing `turn/start` append leaves no turn state and no `turn/end`;
    `agent/error` fires."""
    errors: list[Any] = []
    h.rt.hooks.on("agent/error", errors.append)
    agent = await h.agent(text_response("x"))
    fail_append_of(agent, "turn/start")
    agent.followup(user_message("u1"))
    await settle(agent)
    assert compact(agent.session) == ["ins(nt,u1)"]
    assert [type(e.error) for e in errors] == [OSError]
    assert agent.status == "idle" and h.adapter.requests == []


async def test_step_start_append_failure_invents_no_step(h: Harness) -> None:
    """C7.5-22: a failing `step/start` append closes the turn `error` with no `step/end`."""
    errors: list[Any] = []
    h.rt.hooks.on("agent/error", errors.append)
    agent = await h.agent(text_response("x"))
    fail_append_of(agent, "step/start")
    agent.followup(user_message("u1"))
    await settle(agent)
    assert compact(agent.session) == ["ins(nt,u1)", "T+1", "claim(nt,u1)", "T-1:error"]
    assert "store rejected step/start" in turn_end(agent).error.message
    assert len(errors) == 1 and h.adapter.requests == []
