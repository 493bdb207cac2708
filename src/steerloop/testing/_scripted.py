"""``ScriptedAdapter``: a model that plays a script, one entry per request."""

from __future__ import annotations

import inspect
import json
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ..llm import GenerateRequest, LlmFailure, ModelInfo, TokenUsage
from ..llm.chunks import (
    BlockEnd,
    BlockStart,
    Finish,
    FinishReason,
    ReasoningDelta,
    StreamChunk,
    TextDelta,
    ToolCallDelta,
    UsageChunk,
)
from ..messages import ReasoningBlock, TextBlock, ToolCallBlock

__all__ = [
    "HANG",
    "ScriptedAdapter",
    "aborted_response",
    "error_response",
    "hang_after",
    "max_tokens_response",
    "raise_after",
    "reasoning_response",
    "text_response",
    "tool_call_response",
    "tool_calls_response",
]


class _Hang:
    def __repr__(self) -> str:
        return "HANG"


HANG: Any = _Hang()
"""Script entry: stream one partial text chunk, then wait until the request is aborted."""


@dataclass(frozen=True, slots=True)
class _HangAfter:
    chunks: tuple[StreamChunk, ...]


@dataclass(frozen=True, slots=True)
class _RaiseAfter:
    chunks: tuple[StreamChunk, ...]
    exc: BaseException


def hang_after(chunks: Sequence[StreamChunk]) -> Any:
    """Script entry: stream ``chunks``, then wait until the request is aborted."""
    return _HangAfter(tuple(chunks))


def raise_after(chunks: Sequence[StreamChunk], exc: BaseException) -> Any:
    """Script entry: stream ``chunks``, then raise ``exc`` from the iterator."""
    return _RaiseAfter(tuple(chunks), exc)


def _text(index: int, text: str) -> list[StreamChunk]:
    return [
        BlockStart(index=index, block_type="text"),
        TextDelta(index=index, text=text),
        BlockEnd(index=index, block=TextBlock(text)),
    ]


def _finish(kind: Any, failure: LlmFailure | None = None) -> Finish:
    return Finish(reason=FinishReason(kind=kind, failure=failure))


def _args_text(args: Any) -> str:
    return args if isinstance(args, str) else json.dumps(args)


def _call(
    index: int, call_id: str, name: str, args: Any, *, complete: bool = True
) -> list[StreamChunk]:
    raw = _args_text(args)
    chunks: list[StreamChunk] = [
        BlockStart(index=index, block_type="tool-call"),
        ToolCallDelta(index=index, id=call_id, name=name, arguments_delta=raw),
    ]
    if complete:
        chunks.append(BlockEnd(index=index, block=ToolCallBlock(call_id, name, raw)))
    return chunks


def text_response(text: str, *, usage: TokenUsage | None = None) -> list[StreamChunk]:
    """A reply of one text block, finishing ``stop``."""
    chunks = _text(0, text)
    if usage is not None:
        chunks.append(UsageChunk(usage=usage))
    return [*chunks, _finish("stop")]


def reasoning_response(reasoning: str, text: str = "") -> list[StreamChunk]:
    """Reasoning, then optional text, finishing ``stop``."""
    chunks: list[StreamChunk] = [
        BlockStart(index=0, block_type="reasoning"),
        ReasoningDelta(index=0, text=reasoning),
        BlockEnd(index=0, block=ReasoningBlock(reasoning)),
    ]
    if text:
        chunks += _text(1, text)
    return [*chunks, _finish("stop")]


def tool_calls_response(
    calls: Sequence[tuple[str, str, Any]], text: str | None = None
) -> list[StreamChunk]:
    """Optional text, then several tool calls, finishing ``tool-calls``."""
    chunks: list[StreamChunk] = _text(0, text) if text else []
    base = 1 if text else 0
    for offset, (call_id, name, args) in enumerate(calls):
        chunks += _call(base + offset, call_id, name, args)
    return [*chunks, _finish("tool-calls")]


def tool_call_response(
    call_id: str, name: str, args: Any, text: str | None = None
) -> list[StreamChunk]:
    """One tool call (``args`` a dict, or raw argument text used verbatim)."""
    return tool_calls_response([(call_id, name, args)], text)


def max_tokens_response(
    text: str, tool_calls: Sequence[tuple[str, str, Any]] = ()
) -> list[StreamChunk]:
    """Text cut off by the token ceiling, optionally with cut-off tool calls."""
    chunks = _text(0, text)
    for offset, (call_id, name, args) in enumerate(tool_calls):
        chunks += _call(1 + offset, call_id, name, args, complete=False)
    return [*chunks, _finish("max-tokens")]


def error_response(
    code: str, message: str, retryable: bool = False, retry_after_ms: int | None = None
) -> list[StreamChunk]:
    """A terminal ``error`` finish carrying an ``LlmFailure``."""
    return [
        _finish(
            "error",
            LlmFailure(
                message=message,
                code=code,
                retryable=retryable,
                provider_retry_after_ms=retry_after_ms,
            ),
        )
    ]


def aborted_response() -> list[StreamChunk]:
    """A terminal ``aborted`` finish produced by the provider."""
    return [
        _finish("aborted", LlmFailure(message="the provider aborted the response", code="ABORTED"))
    ]


ScriptEntry = Any


class ScriptedAdapter:
    """An ``LlmAdapter`` that answers each request with the next script entry.

    An entry is a list of chunks, a callable ``(request) -> entry`` (sync or async),
    ``HANG``, ``hang_after(chunks)`` or ``raise_after(chunks, exc)``. ``requests`` records
    every ``GenerateRequest`` received, in order; each holds the whole history it was sent,
    so a long simulation that does not read them should clear the list now and then.
    """

    def __init__(
        self, script: Sequence[ScriptEntry] = (), *, model_info: ModelInfo | None = None
    ) -> None:
        self._script = list(script)
        self.requests: list[GenerateRequest] = []
        self.model_info = model_info or ModelInfo()

    def add(self, *entries: ScriptEntry) -> None:
        """Append entries to the script."""
        self._script.extend(entries)

    @property
    def remaining(self) -> int:
        return len(self._script)

    async def resolve_model(self, provider: str, model: str) -> ModelInfo:
        return self.model_info

    async def stream(self, request: GenerateRequest) -> AsyncIterator[StreamChunk]:
        self.requests.append(request)
        if not self._script:
            raise RuntimeError("script exhausted")
        entry = self._script.pop(0)
        while callable(entry) and not isinstance(entry, _Hang):
            entry = _call_entry(entry, request)
            if inspect.isawaitable(entry):
                entry = await entry
        if isinstance(entry, _Hang):
            entry = _HangAfter(
                (BlockStart(index=0, block_type="text"), TextDelta(index=0, text="…"))
            )
        if isinstance(entry, _HangAfter):
            for chunk in entry.chunks:
                yield chunk
            if request.signal is not None:
                await request.signal.wait()
            return
        if isinstance(entry, _RaiseAfter):
            for chunk in entry.chunks:
                yield chunk
            raise entry.exc
        for chunk in entry:
            yield chunk


def _call_entry(entry: Callable[[GenerateRequest], Any], request: GenerateRequest) -> Any:
    return entry(request)
