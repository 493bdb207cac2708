"""``install_retry``: a bounded-backoff ``agent/request-error`` policy.

The loop never retries on its own (C7.7-13); this listener is the policy. Per step it allows
``max_attempts`` requests in all, waits with exponential backoff and full jitter (at least
the provider's ``Retry-After``) and announces each retry on the ``llm/retry`` emit hook.
The wait is raced against the turn's signal: a cancel ends it at once and the listener
returns ``None``, so cancellation wins (C7.7-7). It is a listener of the agent hooks, so
it sits above ``steerloop.agent`` although it lives next to the adapters.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .. import hooks as h
from ..errors import AbortedError
from ..hooks import AgentPayload, Disposer, OfAgent, RequestErrorAction, RequestErrorPayload
from ..llm import LlmFailure, RetryPolicy

if TYPE_CHECKING:
    from .. import Runtime
    from ..hooks import AgentRef

__all__ = [
    "LLM_RETRY",
    "NON_RETRYABLE_CODES",
    "RetryNotice",
    "install_retry",
]

NON_RETRYABLE_CODES = frozenset(
    {"AUTH", "INVALID_REQUEST", "CONTEXT_OVERFLOW", "QUOTA", "NOT_FOUND", "CONTENT_FILTER"}
)


@dataclass(frozen=True, slots=True)
class RetryNotice(OfAgent):
    """Payload of ``llm/retry``: ``attempt`` is the number of the request about to be sent."""

    agent: AgentRef
    turn: int
    step: int
    provider: str
    attempt: int
    delay_ms: int
    failure: LlmFailure


LLM_RETRY: h.EmitHook[RetryNotice] = h.EmitHook("llm/retry")
"""The retry announcement: emitted before each backoff wait."""


def _retryable(failure: LlmFailure) -> bool:
    return failure.retryable is not False and failure.code not in NON_RETRYABLE_CODES


def install_retry(
    rt: Runtime,
    *,
    max_attempts: int | None = None,
    base_delay_ms: int | None = None,
    max_delay_ms: int | None = None,
    sleep: Callable[[float], Awaitable[Any]] | None = None,
    rng: random.Random | None = None,
) -> Disposer:
    """Retry failed model requests with bounded exponential backoff.

    Args:
        rt: the runtime whose ``agent/request-error`` hook gets the listener.
        max_attempts: requests allowed per step (first one included); defaults to the
            prepared call's ``retry_policy``.
        base_delay_ms: the first backoff ceiling; doubles per failure.
        max_delay_ms: the backoff ceiling. A provider ``Retry-After`` above it ends retrying.
        sleep: ``await sleep(seconds)``; ``asyncio.sleep`` by default (inject for tests).
        rng: the jitter source (``random.Random``).

    Returns:
        A ``Disposer`` that removes the listener.
    """
    rt.hooks.define(LLM_RETRY)
    do_sleep = sleep or _timer
    jitter = rng or random.Random()
    # Failures so far of each agent's current step: agent id -> (turn, step, failures).
    failures: dict[str, tuple[int, int, int]] = {}

    async def on_error(
        payload: RequestErrorPayload,
        next_: Callable[[], Awaitable[RequestErrorAction | None]],
    ) -> RequestErrorAction | None:
        failure: LlmFailure = payload.failure
        if not _retryable(failure):
            return await next_()
        policy: RetryPolicy = payload.retry_policy or RetryPolicy()
        limit = max_attempts if max_attempts is not None else policy.max_attempts
        base = base_delay_ms if base_delay_ms is not None else policy.base_delay_ms
        ceiling = max_delay_ms if max_delay_ms is not None else policy.max_delay_ms
        key = str(payload.agent.id)
        turn, step, count = failures.get(key, (payload.turn, payload.step, 0))
        if (turn, step) != (payload.turn, payload.step):
            count = 0
        count += 1
        failures[key] = (payload.turn, payload.step, count)
        if count >= limit:
            return await next_()
        delay = int(jitter.uniform(0, min(ceiling, base * 2 ** (count - 1))))
        after = failure.provider_retry_after_ms
        if after is not None:
            if after > ceiling:
                return await next_()
            delay = max(delay, after)
        signal = payload.signal
        if signal.aborted:
            return None
        rt.hooks.emit(
            LLM_RETRY,
            RetryNotice(
                agent=payload.agent,
                turn=payload.turn,
                step=payload.step,
                provider=payload.provider,
                attempt=count + 1,
                delay_ms=delay,
                failure=failure,
            ),
        )
        # The wait ends at the delay or at the turn's abort, whichever comes first; an
        # injected sleep that loses the race is left to finish on its own.
        try:
            await signal.race(do_sleep(delay / 1000))
        except AbortedError:
            return None
        return RequestErrorAction.retry()

    def forget(payload: AgentPayload) -> None:
        failures.pop(str(payload.agent.id), None)

    dispose_error = rt.hooks.on(h.REQUEST_ERROR, on_error)
    dispose_forget = rt.hooks.on(h.AGENT_DISPOSED, forget)

    def dispose() -> None:
        dispose_error()
        dispose_forget()

    return Disposer(dispose)


def _timer(seconds: float) -> asyncio.Future[None]:
    """A future that resolves after ``seconds``; nothing to cancel if the race is lost."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future[None] = loop.create_future()
    handle = loop.call_later(seconds, _settle, done)
    done.add_done_callback(lambda _: handle.cancel())
    return done


def _settle(done: asyncio.Future[None]) -> None:
    if not done.done():
        done.set_result(None)
