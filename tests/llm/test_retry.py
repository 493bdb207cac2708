"""``install_retry``: bounded backoff through ``agent/request-error`` (C7.7, C7.11-7)."""

from __future__ import annotations

import asyncio
import random
from typing import Any

import pytest

from steerloop import AgentOptions, CancelCause, Runtime, user_message
from steerloop.llm import ModelInfo, RetryPolicy
from steerloop.llm.retry import install_retry
from steerloop.testing import ScriptedAdapter, error_response, text_response, tool_call_response
from tests.conftest import Harness, compact, events_of, settle, within


class Sleeps:
    """An injected ``sleep`` that records delays and returns at once."""

    def __init__(self) -> None:
        self.seconds: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.seconds.append(seconds)

    @property
    def ms(self) -> list[int]:
        return [round(s * 1000) for s in self.seconds]


class MaxJitter(random.Random):
    """Full jitter pinned to its ceiling, so delays are the exponential bounds."""

    def uniform(self, a: float, b: float) -> float:
        return b


def busy(retry_after_ms: int | None = None) -> Any:
    return error_response(
        "RATE_LIMITED", "slow down", retryable=True, retry_after_ms=retry_after_ms
    )


async def run(h: Harness, *script: Any) -> Any:
    agent = await h.agent(*script)
    agent.followup(user_message("u1"))
    await settle(agent)
    return agent


async def test_bounded_attempts_requests_equal_failures_allowed_plus_one(h: Harness) -> None:
    sleeps = Sleeps()
    install_retry(h.rt, max_attempts=3, sleep=sleeps)
    agent = await run(h, busy(), busy(), busy(), text_response("never"))
    assert len(h.adapter.requests) == 3
    assert compact(agent.session, only=["attempt", "msg", "T-"]) == [
        "attempt",
        "attempt",
        "attempt",
        "T-1:error",
    ]
    assert h.adapter.remaining == 1
    assert len(sleeps.seconds) == 2
    (end,) = events_of(agent.session, "turn/end")
    assert end.data.reason.error.code == "RATE_LIMITED"


async def test_success_after_failures(h: Harness) -> None:
    install_retry(h.rt, sleep=Sleeps())
    agent = await run(h, busy(), busy(), text_response("ok"))
    assert compact(agent.session)[-7:] == [
        "hdr(initial)",
        "ctx",
        "attempt",
        "attempt",
        "msg",
        "S-1.1",
        "T-1:completed",
    ]
    # The retried requests carry the failed one's messages (C7.7-5).
    first, *rest = h.adapter.requests
    assert all(r.messages == first.messages for r in rest)


async def test_exponential_backoff_capped(h: Harness) -> None:
    sleeps = Sleeps()
    install_retry(
        h.rt, max_attempts=6, base_delay_ms=100, max_delay_ms=500, sleep=sleeps, rng=MaxJitter()
    )
    await run(h, busy(), busy(), busy(), busy(), busy(), text_response("ok"))
    assert sleeps.ms == [100, 200, 400, 500, 500]


async def test_full_jitter_stays_within_the_bound(h: Harness) -> None:
    sleeps = Sleeps()
    install_retry(h.rt, max_attempts=4, base_delay_ms=1000, sleep=sleeps, rng=random.Random(7))
    await run(h, busy(), busy(), busy(), text_response("ok"))
    bounds = [1000, 2000, 4000]
    assert all(0 <= d <= b for d, b in zip(sleeps.ms, bounds, strict=True))
    assert len(set(sleeps.ms)) > 1


async def test_retry_after_is_a_floor(h: Harness) -> None:
    sleeps = Sleeps()
    install_retry(h.rt, base_delay_ms=10, sleep=sleeps, rng=MaxJitter())
    await run(h, busy(retry_after_ms=2500), busy(), text_response("ok"))
    assert sleeps.ms == [2500, 20]


async def test_retry_after_beyond_the_ceiling_is_terminal(h: Harness) -> None:
    sleeps = Sleeps()
    install_retry(h.rt, max_delay_ms=1000, sleep=sleeps)
    agent = await run(h, busy(retry_after_ms=60_000), text_response("ok"))
    assert sleeps.seconds == []
    assert len(h.adapter.requests) == 1
    assert compact(agent.session)[-1] == "T-1:error"


@pytest.mark.parametrize(
    "failure",
    [
        error_response("AUTH", "bad key", retryable=False),
        error_response("INVALID_REQUEST", "bad field", retryable=False),
        error_response("CONTEXT_OVERFLOW", "too long", retryable=False),
        error_response("AUTH", "marked retryable, still auth", retryable=True),
        error_response("SERVER", "provider says no", retryable=False),
    ],
)
async def test_non_retryable_failures_are_terminal(h: Harness, failure: Any) -> None:
    sleeps = Sleeps()
    install_retry(h.rt, sleep=sleeps)
    agent = await run(h, failure, text_response("never"))
    assert len(h.adapter.requests) == 1
    assert sleeps.seconds == []
    assert compact(agent.session)[-3:] == ["attempt", "S-1.1", "T-1:error"]


async def test_policy_from_the_prepared_call(rt: Runtime) -> None:
    policy = RetryPolicy(max_attempts=2, base_delay_ms=40, max_delay_ms=40)
    adapter = ScriptedAdapter(
        [busy(), busy(), text_response("never")], model_info=ModelInfo(retry_policy=policy)
    )
    rt.llm.register_adapter(["mock"], adapter)
    sleeps = Sleeps()
    install_retry(rt, sleep=sleeps, rng=MaxJitter())
    handle = await rt.agents.create(
        session_id="s-1", agent_options=AgentOptions(provider="mock", model="m")
    )
    handle.agent.followup(user_message("u1"))
    await settle(handle.agent)
    assert len(adapter.requests) == 2
    assert sleeps.ms == [40]


async def test_attempts_are_counted_per_step(h: Harness) -> None:
    async def echo(args: Any, exec: Any) -> str:
        return "e"

    from steerloop import define_tool

    h.rt.tools.register(
        define_tool(name="echo", description="", parameters={"type": "object"}, execute=echo)
    )
    install_retry(h.rt, max_attempts=2, sleep=Sleeps())
    agent = await run(
        h,
        busy(),
        tool_call_response("c1", "echo", {}),
        busy(),
        text_response("done"),
    )
    assert len(h.adapter.requests) == 4
    assert compact(agent.session, only=["S", "attempt", "msg", "T-"]) == [
        "S+1.1",
        "attempt",
        "msg",
        "S-1.1",
        "S+1.2",
        "attempt",
        "msg",
        "S-1.2",
        "T-1:completed",
    ]


async def test_notification_hook(h: Harness) -> None:
    notices: list[Any] = []
    install_retry(h.rt, base_delay_ms=10, sleep=Sleeps(), rng=MaxJitter())
    h.rt.hooks.on("llm/retry", notices.append)
    agent = await run(h, busy(), busy(), text_response("ok"))
    assert h.rt.hooks.mode("llm/retry") == "emit"
    assert [(n.agent, n.turn, n.step, n.provider, n.attempt, n.delay_ms) for n in notices] == [
        (agent, 1, 1, "mock", 2, 10),
        (agent, 1, 1, "mock", 3, 20),
    ]
    assert notices[0].failure.code == "RATE_LIMITED"


async def test_cancel_during_backoff_ends_the_wait_at_once(h: Harness) -> None:
    # Real asyncio.sleep with a minute-long delay: only the cancel can end the wait.
    install_retry(h.rt, base_delay_ms=60_000, rng=MaxJitter())
    waiting = asyncio.Event()
    h.rt.hooks.on("llm/retry", lambda _: waiting.set())
    agent = await h.agent(busy(), text_response("never"))
    agent.followup(user_message("u1"))
    await within(waiting.wait())
    agent.cancel(CancelCause.user())
    await settle(agent, timeout=2.0)
    assert len(h.adapter.requests) == 1
    assert compact(agent.session)[-3:] == ["attempt", "S-1.1", "T-1:aborted"]


async def test_non_retryable_failures_reach_the_next_listener(h: Harness) -> None:
    seen: list[str] = []

    async def outer(payload: Any, next_: Any) -> Any:
        seen.append(payload.failure.code)
        return await next_()

    h.rt.hooks.on("agent/request-error", outer)
    install_retry(h.rt, sleep=Sleeps())
    await run(h, error_response("AUTH", "no"))
    # install_retry runs first (registered last) and defers to the rest with next().
    assert seen == ["AUTH"]


async def test_dispose_removes_the_policy(h: Harness) -> None:
    dispose = install_retry(h.rt, sleep=Sleeps())
    dispose()
    dispose()
    agent = await run(h, busy(), text_response("never"))
    assert len(h.adapter.requests) == 1
    assert compact(agent.session)[-1] == "T-1:error"
