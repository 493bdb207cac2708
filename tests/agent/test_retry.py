"""Two kinds of errors, and retry (§7.7): C7.7-1 … C7.7-14."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from steerloop import (
    AgentOptions,
    CancelCause,
    LlmError,
    LlmFailure,
    PreStepDecision,
    RequestErrorAction,
    RetryPolicy,
    ToolExec,
    define_tool,
    user_message,
)
from steerloop.llm import ModelInfo
from steerloop.llm.chunks import BlockStart, TextDelta
from steerloop.testing import (
    ScriptedAdapter,
    aborted_response,
    error_response,
    raise_after,
    text_response,
    tool_call_response,
)

from ..conftest import Harness, compact, events_of, settle, texts
from ..support import fail_append_of, reason_of

Next = Callable[[], Awaitable[Any]]


def retry_up_to(h: Harness, times: int) -> list[Any]:
    """Register a request-error listener that retries at most ``times`` times."""
    offered: list[Any] = []

    async def on_error(payload: Any, next: Next) -> Any:
        offered.append(payload)
        if len(offered) <= times:
            return RequestErrorAction.retry()
        return await next()

    h.rt.hooks.on("agent/request-error", on_error)
    return offered


def failure(code: str = "E", message: str = "bad", retryable: bool = False) -> LlmFailure:
    return LlmFailure(message=message, code=code, retryable=retryable)


async def test_error_finish_settles_attempt_then_offers(h: Harness) -> None:
    """C7.7-1: a terminal `error` finish settles `assistant/attempt` first, then
    `agent/request-error` gets turn, step, provider, failure and `retry_policy`."""
    policy = RetryPolicy(max_attempts=7, base_delay_ms=10, max_delay_ms=20)
    h.adapter.model_info = ModelInfo(retry_policy=policy)
    offered: list[Any] = []

    async def on_error(payload: Any, next: Next) -> Any:
        offered.append((compact(payload.agent.session)[-1], payload))
        return await next()

    h.rt.hooks.on("agent/request-error", on_error)
    agent = await h.agent(error_response("RATE", "slow down", retryable=True, retry_after_ms=50))
    agent.followup(user_message("u1"))
    await settle(agent)
    [(last, payload)] = offered
    assert last == "attempt"
    assert (payload.turn, payload.step, payload.provider) == (1, 1, "mock")
    assert payload.failure == LlmFailure(
        message="slow down", code="RATE", retryable=True, provider_retry_after_ms=50
    )
    assert payload.retry_policy == policy and not payload.signal.aborted


@pytest.mark.parametrize("listener", [False, True])
async def test_default_is_terminal(h: Harness, listener: bool) -> None:
    """C7.7-2: with no listener (or one calling `next()`) the failure is terminal:
    `attempt · S-1.1 · T-1:error{failure}`, one `agent/error`, one request."""
    errors: list[Any] = []
    h.rt.hooks.on("agent/error", errors.append)
    if listener:
        retry_up_to(h, 0)
    agent = await h.agent(error_response("E", "bad"), text_response("never"))
    agent.followup(user_message("u1"))
    await settle(agent)
    assert compact(agent.session)[-3:] == ["attempt", "S-1.1", "T-1:error"]
    assert reason_of(agent).error == failure()
    assert len(errors) == 1 and (errors[0].turn, errors[0].step) == (1, 1)
    assert isinstance(errors[0].error, LlmError) and errors[0].error.failure == failure()
    assert len(h.adapter.requests) == 1


async def test_retry_repeats_only_the_attempt(h: Harness) -> None:
    """C7.7-3: `retry()` without `next()` tries again within the step: between the requests
    only `attempt · msg`; no second step/start, user/message, pre-step or claim; prompt
    sections are not rendered again."""
    renders: list[int] = []
    h.rt.system_prompt.add_section("p", lambda agent: renders.append(1) or "P")  # type: ignore[func-returns-value]
    pre_steps: list[int] = []

    async def pre_step(payload: Any, next: Next) -> Any:
        pre_steps.append(payload.step)
        return await next()

    h.rt.hooks.on("agent/pre-step", pre_step)
    retry_up_to(h, 1)
    agent = await h.agent(error_response("E", "bad"), text_response("ok"))
    agent.followup(user_message("u1"))
    await settle(agent)
    assert compact(agent.session) == [
        "ins(nt,u1)", "T+1", "claim(nt,u1)", "S+1.1", "sys", "user(u1)", "hdr(initial)", "ctx",
        "attempt", "msg", "S-1.1", "T-1:completed",
    ]  # fmt: skip
    assert renders == [1] and pre_steps == [1]


async def test_retry_reruns_request_and_prepare(h: Harness) -> None:
    """C7.7-4: a retry re-runs `agent/request` and `prepare_call`; a model switch on the
    second call is used by the retried request and logged as `hdr(change)`."""
    resolves: list[str] = []

    class Counting(ScriptedAdapter):
        async def resolve_model(self, provider: str, model: str) -> ModelInfo:
            resolves.append(model)
            return self.model_info

    adapter = Counting([error_response("E", "bad"), text_response("ok")])
    h.rt.llm.register_adapter(["counting"], adapter)
    calls: list[int] = []

    async def on_request(payload: Any, next: Next) -> Any:
        calls.append(payload.step)
        config = await next()
        return config.replace(model="m2") if len(calls) == 2 else config

    h.rt.hooks.on("agent/request", on_request)
    retry_up_to(h, 1)
    agent = await h.agent(agent_options=AgentOptions(provider="counting", model="m"))
    agent.followup(user_message("u1"))
    await settle(agent)
    assert calls == [1, 1] and resolves == ["m", "m2"]
    assert [r.model for r in adapter.requests] == ["m", "m2"]
    assert compact(agent.session)[-8:] == [
        "hdr(initial)", "ctx", "attempt", "hdr(change)", "ctx", "msg", "S-1.1", "T-1:completed",
    ]  # fmt: skip


async def test_retried_request_has_same_messages(h: Harness) -> None:
    """C7.7-5: the failed attempt is not on the surface; the retry sends the same messages."""
    h.rt.system_prompt.add_section("p", "P")
    retry_up_to(h, 1)
    agent = await h.agent(
        [BlockStart(index=0, block_type="text"), TextDelta(index=0, text="par"),
         *error_response("E", "cut")],
        text_response("ok"),
    )  # fmt: skip
    agent.followup(user_message("u1"))
    await settle(agent)
    first, second = h.adapter.requests
    assert first.messages == second.messages
    assert texts(second.messages) == ["system:P", "user:u1"]
    [attempt] = events_of(agent.session, "assistant/attempt")
    assert len(attempt.data.stream) == 3


async def test_each_failure_is_offered_separately(h: Harness) -> None:
    """C7.7-6: a listener retrying at most twice → three requests, three attempts, error."""
    offered = retry_up_to(h, 2)
    agent = await h.agent(*[error_response("E", f"bad {i}") for i in range(3)])
    agent.followup(user_message("u1"))
    await settle(agent)
    assert [p.failure.message for p in offered] == ["bad 0", "bad 1", "bad 2"]
    assert len(h.adapter.requests) == 3
    assert compact(agent.session, only=["attempt", "S", "T-"]) == [
        "S+1.1", "attempt", "attempt", "attempt", "S-1.1", "T-1:error",
    ]  # fmt: skip
    assert reason_of(agent).error.message == "bad 2"


async def test_cancellation_wins_over_retry(h: Harness) -> None:
    """C7.7-7: an abort while the listener runs ends the turn `aborted` even though it
    returned `retry()`; no further request is sent."""

    async def on_error(payload: Any, next: Next) -> Any:
        payload.agent.cancel(CancelCause.hook("budget"))
        return RequestErrorAction.retry()

    h.rt.hooks.on("agent/request-error", on_error)
    agent = await h.agent(error_response("E", "bad"), text_response("never"))
    agent.followup(user_message("u1"))
    await settle(agent)
    assert compact(agent.session)[-3:] == ["attempt", "S-1.1", "T-1:aborted"]
    assert reason_of(agent).reason == CancelCause.hook("budget")
    assert len(h.adapter.requests) == 1


async def test_raising_listener_ends_turn_error(h: Harness) -> None:
    """C7.7-8: a raising request-error listener ends the turn `error` describing it."""

    async def on_error(payload: Any, next: Next) -> Any:
        raise ValueError("policy crashed")

    h.rt.hooks.on("agent/request-error", on_error)
    agent = await h.agent(error_response("E", "bad"), text_response("never"))
    agent.followup(user_message("u1"))
    await settle(agent)
    error = reason_of(agent).error
    assert error.code == "UNKNOWN" and "policy crashed" in error.message
    assert len(h.adapter.requests) == 1


async def test_provider_aborted_finish_is_an_error(h: Harness) -> None:
    """C7.7-9: an `aborted` finish with the turn's signal intact is offered and by default
    ends the turn `error` with the failure's code, not `aborted`."""
    offered = retry_up_to(h, 0)
    agent = await h.agent(aborted_response())
    agent.followup(user_message("u1"))
    await settle(agent)
    assert [p.failure.code for p in offered] == ["ABORTED"]
    reason = reason_of(agent)
    assert reason.kind == "error" and reason.error.code == "ABORTED"
    assert compact(agent.session)[-3:] == ["attempt", "S-1.1", "T-1:error"]


@pytest.mark.parametrize("exc", [RuntimeError("socket reset"), LlmError(failure("NET", "gone"))])
async def test_iterator_exception_is_not_offered(h: Harness, exc: Exception) -> None:
    """C7.7-10: an exception from the iterator after the stream started is not offered; the
    attempt keeps the chunks received so far, then the turn ends `error`."""
    offered = retry_up_to(h, 5)
    head: list[Any] = [BlockStart(index=0, block_type="text"), TextDelta(index=0, text="par")]
    agent = await h.agent(raise_after(head, exc), text_response("never"))
    agent.followup(user_message("u1"))
    await settle(agent)
    assert offered == [] and len(h.adapter.requests) == 1
    [attempt] = events_of(agent.session, "assistant/attempt")
    assert [r.chunk for r in attempt.data.stream] == head
    error = reason_of(agent).error
    if isinstance(exc, LlmError):
        assert error == exc.failure
    else:
        assert error.code == "UNKNOWN" and "socket reset" in error.message


async def test_error_finish_counterexample_is_offered(h: Harness) -> None:
    """C7.7-10 counterexample: the same failure as an error finish chunk is offered."""
    offered = retry_up_to(h, 0)
    agent = await h.agent(error_response("NET", "gone"))
    agent.followup(user_message("u1"))
    await settle(agent)
    assert [p.failure for p in offered] == [failure("NET", "gone")]


class FailingPrepare(ScriptedAdapter):
    async def resolve_model(self, provider: str, model: str) -> ModelInfo:
        raise RuntimeError("model lookup failed")


@pytest.mark.parametrize("where", ["agent/request", "prepare", "pre-step", "tool machinery"])
async def test_other_exceptions_skip_request_error(h: Harness, where: str) -> None:
    """C7.7-11: exceptions from `agent/request`, `prepare_call`, pre-step or tool-pipeline
    machinery go straight to the error path; `agent/request-error` is never called."""
    offered = retry_up_to(h, 5)
    provider = "mock"
    if where == "agent/request":

        async def on_request(payload: Any, next: Next) -> Any:
            raise RuntimeError("router down")

        h.rt.hooks.on("agent/request", on_request)
    elif where == "prepare":
        h.rt.llm.register_adapter(["failing"], FailingPrepare())
        provider = "failing"
    elif where == "pre-step":

        async def pre_step(payload: Any, next: Next) -> PreStepDecision:
            raise RuntimeError("gate down")

        h.rt.hooks.on("agent/pre-step", pre_step)

    async def body(args: Any, exec: ToolExec) -> str:
        return "ok"

    h.rt.tools.register(
        define_tool(name="echo", description="e", parameters={"type": "object"}, execute=body)
    )
    agent = await h.agent(
        tool_call_response("c1", "echo", {}), text_response("never"),
        agent_options=AgentOptions(provider=provider, model="m"),
    )  # fmt: skip
    if where == "tool machinery":
        original = agent.session.append

        def append(first: Any, *args: Any, **kwargs: Any) -> Any:
            if getattr(first, "TYPE", first) == "tool/call":
                raise OSError("store rejected tool/call")
            return original(first, *args, **kwargs)

        agent.session.append = append
    agent.followup(user_message("u1"))
    await settle(agent)
    assert offered == [] and reason_of(agent).kind == "error"


async def test_failed_settlement_of_failed_stream(h: Harness) -> None:
    """C7.7-12: when appending the failed stream's settlement fails, the turn ends with an
    `ExceptionGroup` (original first, append failure second); the `end` frame is abandoned."""
    errors: list[Any] = []
    frames: list[Any] = []
    h.rt.hooks.on("agent/error", errors.append)
    h.rt.hooks.on("agent/assistant-stream", lambda p: frames.append(p.frame))
    original = RuntimeError("socket reset")
    agent = await h.agent(raise_after([BlockStart(index=0, block_type="text")], original))
    fail_append_of(agent, "assistant/attempt")
    agent.followup(user_message("u1"))
    await settle(agent)
    [payload] = errors
    group = payload.error
    assert isinstance(group, ExceptionGroup)
    assert group.exceptions[0] is original and isinstance(group.exceptions[1], OSError)
    assert frames[-1].kind == "end" and frames[-1].outcome == {"kind": "abandoned"}
    assert compact(agent.session)[-2:] == ["S-1.1", "T-1:error"]
    error = reason_of(agent).error
    assert "socket reset" in error.message and error.code == "UNKNOWN"


async def test_failed_settlement_of_error_finish(h: Harness) -> None:
    """C7.7-12: for an error finish the group's first member carries the stream's failure,
    which `turn/end` records verbatim; nothing is offered for a retry."""
    errors: list[Any] = []
    h.rt.hooks.on("agent/error", errors.append)
    offered = retry_up_to(h, 5)
    agent = await h.agent(error_response("E", "bad"))
    fail_append_of(agent, "assistant/attempt")
    agent.followup(user_message("u1"))
    await settle(agent)
    group = errors[0].error
    assert isinstance(group, ExceptionGroup) and isinstance(group.exceptions[0], LlmError)
    assert isinstance(group.exceptions[1], OSError)
    assert reason_of(agent).error == failure() and offered == []


async def test_loop_never_retries_on_its_own(h: Harness) -> None:
    """C7.7-13: `retryable=True` with no listener is terminal after one request."""
    agent = await h.agent(error_response("RATE", "slow", retryable=True, retry_after_ms=1),
                          text_response("never"))  # fmt: skip
    agent.followup(user_message("u1"))
    await settle(agent)
    assert len(h.adapter.requests) == 1 and reason_of(agent).error.retryable is True
    assert h.adapter.remaining == 1


async def test_prepare_failure_writes_no_attempt(h: Harness) -> None:
    """C7.7-14: an adapter whose preparation raises before streaming writes no attempt and
    the turn ends `error`."""
    adapter = FailingPrepare([text_response("never")])
    h.rt.llm.register_adapter(["failing"], adapter)
    agent = await h.agent(agent_options=AgentOptions(provider="failing", model="m"))
    agent.followup(user_message("u1"))
    await settle(agent)
    assert compact(agent.session) == [
        "ins(nt,u1)", "T+1", "claim(nt,u1)", "S+1.1", "S-1.1", "T-1:error",
    ]  # fmt: skip
    assert "model lookup failed" in reason_of(agent).error.message and adapter.requests == []
