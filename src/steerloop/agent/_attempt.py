"""One attempt of a step: request hook → prepare → request build → stream → settle (§7.6).

Returns a typed outcome (``Settled | Retry | Aborted``, see ``_settle``); a failure that no
``agent/request-error`` listener retries is raised.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, get_args

from .._cancel import escapes
from .._signal import AbortSignal
from ..errors import LlmError
from ..llm._assembler import BlockAssembler
from ..llm._runtime import PreparedCall
from ..llm._types import CallConfig, GenerateRequest, LlmFailure
from ..llm.chunks import StreamChunk
from ..messages import UserMessage, blocks_of
from ..session._events import StreamRecord
from ._attachments import refuse_unsupported
from ._decisions import RequestErrorAction, RequestErrorPayload, RequestPayload
from ._handles import REQUEST, REQUEST_ERROR
from ._services import LoopServices
from ._settle import (
    AttemptOutcome,
    LiveFrames,
    Retry,
    failure_of_finish,
    settle_aborted,
    settle_failed,
    settle_message,
)

if TYPE_CHECKING:
    from ..session._session import Session
    from ._loop_agent import LoopAgent as Agent

__all__ = ["StepContext", "attempt"]

_CHUNK_TYPES = get_args(StreamChunk)


@dataclass(frozen=True, slots=True)
class StepContext:
    """What every attempt of one admitted step works with."""

    agent: Agent
    rt: LoopServices
    session: Session
    turn: int
    step: int
    signal: AbortSignal
    messages: Sequence[UserMessage]  # the admitted input, committed by the first attempt
    prompt: str
    starts_series: bool


async def attempt(ctx: StepContext, first: bool) -> AttemptOutcome:
    """Run one attempt; ``first`` commits the step's input and may start a series."""
    signal = ctx.signal
    config = await _request_config(ctx)
    signal.throw_if_aborted()
    prepared = await ctx.rt.llm.prepare_call(config, signal)
    signal.throw_if_aborted()
    builder = ctx.agent._requests
    model = f"{prepared.provider}/{prepared.model}"
    if first:
        # Input the model cannot take never reaches the surface: later turns stay usable.
        refuse_unsupported(ctx.messages, prepared.input_modalities, model, "the new input")
    # A pre-step series declaration belongs to the step's first request, not its retries.
    series = ctx.starts_series and first
    builder.project_system_prompt(ctx.prompt, prepared, series, ctx.turn, ctx.step)
    if first:
        for message in ctx.messages:
            ctx.session.append(message, surface_op="append")
    request = builder.build(prepared, ctx.rt.tools.schemas(ctx.agent.id), series, signal)
    refuse_unsupported(request.messages, prepared.input_modalities, model, "the history")
    request = await _with_blob_data(ctx, request)
    signal.throw_if_aborted()
    return await _stream(ctx, prepared, request)


async def _with_blob_data(ctx: StepContext, request: GenerateRequest) -> GenerateRequest:
    """The request with the bytes of blocks read back from the store (a resumed log holds
    only their hashes), loaded now that a request needs them."""
    if not any(b.data is None and b.blob is not None for b in blocks_of(request.messages)):
        return request
    messages = await ctx.session.with_blob_data(request.messages)
    return dataclasses.replace(request, messages=messages)


async def _request_config(ctx: StepContext) -> CallConfig:
    """The ``agent/request`` waterfall over the builder's default config."""
    builder = ctx.agent._requests
    if not ctx.rt.hooks.has(REQUEST):
        # No listener: the chain is its default; build no payload, await no coroutine.
        return builder.default_config()

    async def default_config() -> CallConfig:
        return builder.default_config()

    config = await ctx.rt.hooks.waterfall(
        REQUEST,
        RequestPayload(ctx.agent, ctx.turn, ctx.step, ctx.signal),
        default_config,
    )
    ctx.signal.throw_if_aborted()
    if not isinstance(config, CallConfig):
        raise TypeError(f"agent/request must return a CallConfig, not {config!r}")
    return config


async def _stream(
    ctx: StepContext, prepared: PreparedCall, request: GenerateRequest
) -> AttemptOutcome:
    iterator = prepared.open_stream(request)
    live = LiveFrames(ctx.agent)
    live.start(ctx.turn, ctx.step)
    assembler = BlockAssembler()
    records: list[StreamRecord] = []
    clock = ctx.rt.clock
    signal = ctx.signal
    raised: Exception | None = None
    try:
        # The signal is checked before every fetch and before handling what a fetch
        # returned, so after an abort no further chunk is consumed (C7.6-12).
        while not signal.aborted:
            try:
                chunk = await anext(iterator)
            except StopAsyncIteration:
                break
            if signal.aborted:
                break
            if not isinstance(chunk, _CHUNK_TYPES):
                # Recording it would put a value in the log that cannot be stored.
                raise LlmError(
                    LlmFailure(
                        message=f"the adapter yielded {_brief(chunk)}, not a stream chunk",
                        code="BAD_RESPONSE",
                    )
                )
            record = StreamRecord(clock(), chunk)
            records.append(record)
            assembler.push(chunk)
            live.chunk(record)
    except BaseException as exc:
        if escapes(exc):
            raise
        raised = exc if isinstance(exc, Exception) else _stream_failure(exc)
    finally:
        await _aclose(iterator)
    session, turn, step = ctx.session, ctx.turn, ctx.step
    if signal.aborted:
        return settle_aborted(session, turn, step, prepared, live, assembler, records)
    if raised is not None:
        settle_failed(session, turn, step, live, records, raised)
        raise raised
    reason = assembler.reason
    if reason.kind in ("error", "aborted"):
        failure = failure_of_finish(reason.failure, reason.kind)
        settle_failed(session, turn, step, live, records, LlmError(failure))
        return await _offer_failure(ctx, prepared, failure)
    return settle_message(session, turn, step, prepared, live, assembler, records)


async def _offer_failure(ctx: StepContext, prepared: PreparedCall, failure: LlmFailure) -> Retry:
    """Ask ``agent/request-error``: a ``RequestErrorAction`` retries, else the step fails."""

    async def terminal() -> RequestErrorAction | None:
        return None

    action = await ctx.rt.hooks.waterfall(
        REQUEST_ERROR,
        RequestErrorPayload(
            ctx.agent,
            ctx.turn,
            ctx.step,
            prepared.provider,
            failure,
            prepared.retry_policy,
            ctx.signal,
        ),
        terminal,
    )
    ctx.signal.throw_if_aborted()
    if isinstance(action, RequestErrorAction):
        return Retry()
    raise LlmError(failure)


def _brief(value: object) -> str:
    text = repr(value)
    return f"{type(value).__name__} {text[:200]}{'…' if len(text) > 200 else ''}"


def _stream_failure(exc: BaseException) -> LlmError:
    """An adapter stream that raised a non-``Exception`` (e.g. ``GeneratorExit``) failed."""
    text = str(exc)
    name = type(exc).__name__
    message = (
        f"the adapter stream raised {name}: {text}" if text else f"the adapter stream raised {name}"
    )
    error = LlmError(LlmFailure(message=message, code="UNKNOWN"))
    error.__cause__ = exc
    return error


async def _aclose(iterator: AsyncIterator[StreamChunk]) -> None:
    aclose: Any = getattr(iterator, "aclose", None)
    if aclose is not None:
        with contextlib.suppress(Exception):
            await aclose()
