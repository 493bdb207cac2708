"""``OpenAIChatAdapter``: any OpenAI-compatible chat-completions server, over the official SDK.

Covers OpenAI, DeepSeek (``reasoning_content``), and local servers such as vLLM or Ollama.
The SDK's own retries are off (``max_retries=0``): a failed request becomes a terminal
``error`` finish carrying an ``LlmFailure``, and retrying is the business of the
``agent/request-error`` listener (see ``steerloop.llm.retry``).

The stream lifecycle (cancellation reaching the transport, G-5; the request id; failures)
is ``llm._provider_stream``'s, shared with every adapter: this module supplies the body,
the SDK call, the decoder and the SDK-exception map.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Awaitable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import openai

from ..messages import (
    AssistantMessage,
    FileBlock,
    ImageBlock,
    Message,
    ReasoningBlock,
    SystemMessage,
    TextBlock,
    ToolCallBlock,
    ToolResultMessage,
    UserMessage,
)
from ._openai_shared import (
    KNOWN_MODELS,
    REASONING_MODELS,
    RESPONSES_FIRST,
    failure_from_exception,
    open_client,
    resolve_known,
    responses_first,
    wire_parameters,
)
from ._parts import chat_part, content_parts, has_binary
from ._provider_stream import provider_stream
from ._responses import OpenAIResponsesAdapter
from ._tool_choice import openai_tool_fields
from ._types import GenerateRequest, LlmFailure, ModelInfo, TokenUsage
from .chunks import (
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

__all__ = [
    "KNOWN_MODELS",
    "RESPONSES_FIRST",
    "OpenAIChatAdapter",
    "OpenAIResponsesAdapter",
    "failure_from_exception",
    "responses_first",
]

ReasoningReplay = Literal["tool-loop", "never"]

_FINISH_KINDS: Mapping[str, Literal["stop", "tool-calls", "max-tokens"]] = {
    "stop": "stop",
    "tool_calls": "tool-calls",
    "function_call": "tool-calls",
    "length": "max-tokens",
}


class OpenAIChatAdapter:
    """An ``LlmAdapter`` for OpenAI-compatible ``/chat/completions`` streaming.

    Args:
        base_url: the API root (``https://api.deepseek.com``, ``http://localhost:8000/v1``);
            ``None`` is OpenAI's own endpoint.
        api_key: the bearer key. ``None`` reads ``OPENAI_API_KEY`` for OpenAI's endpoint and
            sends a placeholder to any other ``base_url`` (local servers need none), so an
            OpenAI key never travels to a third-party host by accident.
        default_headers: extra headers for every request.
        timeout: seconds for the SDK's HTTP timeout (connect and each read).
        models: ``ModelInfo`` by model name, layered over ``KNOWN_MODELS``.
        reasoning_replay: ``"tool-loop"`` sends a message's reasoning back as
            ``reasoning_content`` on assistant messages of the current tool loop (DeepSeek
            thinking mode requires it); ``"never"`` drops reasoning from requests.


    The adapter creates and owns its SDK client (one connection pool); ``aclose()`` closes
    it. Registered with a runtime, the adapter belongs to the runtime: ``rt.close()`` calls
    ``aclose()`` (unless the registration was disposed first).
    """

    def __init__(
        self,
        base_url: str | None = None,
        api_key: str | None = None,
        *,
        default_headers: Mapping[str, str] | None = None,
        timeout: float | None = 600.0,
        models: Mapping[str, ModelInfo] | None = None,
        reasoning_replay: ReasoningReplay = "tool-loop",
    ) -> None:
        self._client, self._secret = open_client(base_url, api_key, default_headers, timeout)
        self._models = dict(models or {})
        self._reasoning_replay = reasoning_replay

    def __repr__(self) -> str:
        return f"OpenAIChatAdapter(base_url={str(self._client.base_url)!r})"

    async def aclose(self) -> None:
        """Close the SDK client and its connection pool."""
        await self._client.close()

    async def resolve_model(self, provider: str, model: str) -> ModelInfo:
        """Known limits of ``model`` (longest matching name), or an empty ``ModelInfo``."""
        return resolve_known(model, self._models)

    # --- request ----------------------------------------------------------------------

    def request_body(self, request: GenerateRequest) -> dict[str, Any]:
        """The keyword arguments of ``chat.completions.create`` for ``request``."""
        body: dict[str, Any] = {
            "model": request.model,
            "messages": _messages(request, self._reasoning_replay),
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if request.tools:
            body["tools"] = [
                {
                    "type": "function",
                    "function": {
                        "name": tool.name,
                        "description": tool.description,
                        "parameters": wire_parameters(tool.parameters),
                    },
                }
                for tool in request.tools
            ]
            body.update(openai_tool_fields(request, responses=False))
        if request.max_tokens is not None:
            key = "max_completion_tokens" if REASONING_MODELS.match(request.model) else "max_tokens"
            body[key] = request.max_tokens
        if request.reasoning_effort is not None:
            body["reasoning_effort"] = request.reasoning_effort
        config = request.config
        if config is not None:
            if config.temperature is not None:
                body["temperature"] = config.temperature
            if config.top_p is not None:
                body["top_p"] = config.top_p
            if config.extra:
                body["extra_body"] = dict(config.extra)
            if config.output_schema is not None:
                schema = config.output_schema
                name = re.sub(r"[^A-Za-z0-9_-]", "_", str(schema.get("title") or "output"))[:64]
                format_ = {"name": name, "schema": dict(schema)}
                body["response_format"] = {"type": "json_schema", "json_schema": format_}
        return body

    # --- streaming --------------------------------------------------------------------

    def stream(self, request: GenerateRequest) -> AsyncIterator[StreamChunk]:
        return provider_stream(_ChatCall(self, request), request.signal)

    def _open(self, request: GenerateRequest) -> Awaitable[Any]:
        return self._client.chat.completions.create(**self.request_body(request))

    def _failure(self, exc: Exception) -> LlmFailure | None:
        if not isinstance(exc, openai.OpenAIError | ValueError):
            return None
        return failure_from_exception(exc, secret=self._secret)


class _ChatCall:
    """One chat-completions request for ``provider_stream``."""

    request_id_header = "x-request-id"
    done = False  # read to ``[DONE]``: usage arrives after the finish reason

    def __init__(self, adapter: OpenAIChatAdapter, request: GenerateRequest) -> None:
        self._adapter = adapter
        self._request = request
        self._decoder = _Decoder()

    def open(self) -> Awaitable[Any]:
        return self._adapter._open(self._request)

    def feed(self, event: Any) -> Iterator[StreamChunk]:
        return self._decoder.feed(event)

    def end(self, request_id: str | None) -> list[StreamChunk]:
        return list(self._decoder.end(request_id))

    def failure(self, exc: Exception) -> LlmFailure | None:
        return self._adapter._failure(exc)


# --- wire → chunks ----------------------------------------------------------------------


@dataclass
class _ToolCall:
    index: int
    id: str
    name: str
    args: list[str] = field(default_factory=list)


class _Decoder:
    """Turns ``ChatCompletionChunk``s into steerloop chunks, one block index per part."""

    def __init__(self) -> None:
        self.next_index = 0
        self.open_kind: Literal["text", "reasoning"] | None = None
        self.open_index = -1
        self.open_parts: list[str] = []
        self.calls: dict[int, _ToolCall] = {}
        self.saw_calls = False
        self.finish_reason: str | None = None
        self.usage: TokenUsage | None = None
        self.ended = False

    def feed(self, item: Any) -> Iterator[StreamChunk]:
        usage = getattr(item, "usage", None)
        if usage is not None:
            self.usage = _usage(usage)
        for choice in item.choices or ():
            if choice.index not in (0, None):
                continue
            delta = choice.delta
            if delta is not None:
                reasoning = _reasoning_of(delta)
                if reasoning:
                    yield from self._part("reasoning", reasoning)
                if delta.content:
                    yield from self._part("text", delta.content)
                for call in delta.tool_calls or ():
                    yield from self._tool_delta(call)
            if choice.finish_reason:
                self.finish_reason = choice.finish_reason
                yield from self._close_all()

    def _part(self, kind: Literal["text", "reasoning"], text: str) -> Iterator[StreamChunk]:
        if self.open_kind != kind:
            yield from self._close_open()
            self.open_kind, self.open_index, self.open_parts = kind, self.next_index, []
            self.next_index += 1
            yield BlockStart(index=self.open_index, block_type=kind)
        self.open_parts.append(text)
        if kind == "text":
            yield TextDelta(index=self.open_index, text=text)
        else:
            yield ReasoningDelta(index=self.open_index, text=text)

    def _close_open(self) -> Iterator[StreamChunk]:
        if self.open_kind is None:
            return
        text = "".join(self.open_parts)
        block = TextBlock(text) if self.open_kind == "text" else ReasoningBlock(text)
        yield BlockEnd(index=self.open_index, block=block)
        self.open_kind = None

    def _tool_delta(self, delta: Any) -> Iterator[StreamChunk]:
        wire_index = delta.index if delta.index is not None else len(self.calls)
        function = delta.function
        name = function.name if function is not None else None
        args = (function.arguments if function is not None else None) or ""
        call = self.calls.get(wire_index)
        if call is None:
            yield from self._close_open()
            call = _ToolCall(
                index=self.next_index,
                id=delta.id or f"call_{self.next_index}",
                name=name or "",
            )
            self.next_index += 1
            self.calls[wire_index] = call
            self.saw_calls = True
            yield BlockStart(index=call.index, block_type="tool-call")
            call.args.append(args)
            yield ToolCallDelta(index=call.index, id=call.id, name=call.name, arguments_delta=args)
            return
        if name and not call.name:
            call.name = name
        if args:
            call.args.append(args)
            yield ToolCallDelta(index=call.index, id=call.id, arguments_delta=args)

    def _close_all(self) -> Iterator[StreamChunk]:
        yield from self._close_open()
        for call in self.calls.values():
            block = ToolCallBlock(call.id, call.name, "".join(call.args))
            yield BlockEnd(index=call.index, block=block)
        self.calls = {}

    def end(self, request_id: str | None) -> Iterator[StreamChunk]:
        yield from self._close_all()
        if self.usage is not None:
            yield UsageChunk(usage=self.usage)
        reason = self.finish_reason
        if reason is None:
            failure = LlmFailure(
                message="the stream ended without a finish reason",
                code="INCOMPLETE_STREAM",
                retryable=True,
                request_id=request_id,
            )
            yield Finish(reason=FinishReason(kind="error", failure=failure))
            return
        kind = _FINISH_KINDS.get(reason)
        if kind == "stop" and self.saw_calls:
            kind = "tool-calls"
        if kind is not None:
            yield Finish(reason=FinishReason(kind=kind))
            return
        if reason == "content_filter":
            failure = LlmFailure(
                message="the provider's content filter stopped the response",
                code="CONTENT_FILTER",
                retryable=False,
                request_id=request_id,
            )
        else:
            # e.g. DeepSeek's "insufficient_system_resource".
            failure = LlmFailure(
                message=f"the provider ended the response with {reason!r}",
                code="SERVER",
                retryable=True,
                request_id=request_id,
            )
        yield Finish(reason=FinishReason(kind="error", failure=failure))


def _reasoning_of(delta: Any) -> str | None:
    value = getattr(delta, "reasoning_content", None)
    if value is None:
        extra = getattr(delta, "model_extra", None) or {}
        # vLLM's reasoning parsers and some gateways name the field "reasoning".
        value = extra.get("reasoning_content") or extra.get("reasoning")
    return value if isinstance(value, str) and value else None


def _usage(usage: Any) -> TokenUsage:
    """Disjoint counts: cached input and reasoning output are split out of the totals."""
    prompt = usage.prompt_tokens or 0
    completion = usage.completion_tokens or 0
    details = getattr(usage, "prompt_tokens_details", None)
    cached = getattr(details, "cached_tokens", None) if details is not None else None
    if cached is None:
        extra = getattr(usage, "model_extra", None) or {}
        hit = extra.get("prompt_cache_hit_tokens")  # DeepSeek
        cached = hit if isinstance(hit, int) else None
    out_details = getattr(usage, "completion_tokens_details", None)
    reasoning = getattr(out_details, "reasoning_tokens", None) if out_details is not None else None
    return TokenUsage(
        input_tokens=max(prompt - (cached or 0), 0),
        output_tokens=max(completion - (reasoning or 0), 0),
        cache_read_tokens=cached,
        reasoning_tokens=reasoning,
    )


# --- messages → wire --------------------------------------------------------------------


def _text(blocks: tuple[Any, ...]) -> str:
    return "\n\n".join(b.text for b in blocks if isinstance(b, TextBlock))


def _messages(request: GenerateRequest, replay: ReasoningReplay) -> list[dict[str, Any]]:
    messages = request.messages
    last_user = max((i for i, m in enumerate(messages) if isinstance(m, UserMessage)), default=-1)
    out: list[dict[str, Any]] = []
    # A tool message holds text only: the images and files of a run of tool results follow
    # it as one user message (after the last tool message: nothing may come between an
    # assistant's tool calls and their results).
    attached: list[dict[str, Any]] = []
    for i, message in enumerate(messages):
        if attached and not isinstance(message, ToolResultMessage):
            out.append({"role": "user", "content": attached})
            attached = []
        if isinstance(message, ToolResultMessage):
            attached.extend(_tool_attachments(message))
        out.append(
            _message(
                message,
                request,
                replay == "tool-loop"
                and (
                    i > last_user
                    or (isinstance(message, AssistantMessage) and bool(message.tool_calls))
                ),
            )
        )
    if attached:
        out.append({"role": "user", "content": attached})
    return out


def _user_content(blocks: tuple[Any, ...]) -> str | list[dict[str, Any]]:
    """Text alone as a string (as before images); with images or files, the parts in order."""
    return content_parts(blocks, "text", chat_part) if has_binary(blocks) else _text(blocks)


def _tool_attachments(message: ToolResultMessage) -> list[dict[str, Any]]:
    binary = [b for b in message.content if isinstance(b, ImageBlock | FileBlock)]
    if not binary:
        return []
    head = {"type": "text", "text": f"Attachments of the result of tool call {message.call_id}:"}
    return [head, *(chat_part(b) for b in binary)]


def _tool_text(message: ToolResultMessage) -> str:
    text = _text(message.content)
    binary = [b for b in message.content if isinstance(b, ImageBlock | FileBlock)]
    if not binary:
        return text
    note = "; ".join(b.describe() for b in binary)
    return f"{text}\n\n[attached below: {note}]" if text else f"[attached below: {note}]"


def _message(message: Message, request: GenerateRequest, in_tool_loop: bool) -> dict[str, Any]:
    if isinstance(message, SystemMessage):
        return {"role": "system", "content": _text(message.content)}
    if isinstance(message, UserMessage):
        return {"role": "user", "content": _user_content(message.content)}
    if isinstance(message, ToolResultMessage):
        return {"role": "tool", "tool_call_id": message.call_id, "content": _tool_text(message)}
    out: dict[str, Any] = {"role": "assistant", "content": _text(message.content)}
    calls = message.tool_calls
    if calls:
        out["tool_calls"] = [
            {
                "id": call.id,
                "type": "function",
                "function": {"name": call.name, "arguments": call.arguments},
            }
            for call in calls
        ]
        if not out["content"]:
            out["content"] = None
    # Reasoning goes back only to the provider that produced it, and only where a tool loop
    # needs it: DeepSeek thinking mode requires it on the messages of the loop in progress
    # (and ignores it on earlier turns, so a steered loop keeps it on its tool-call turns).
    if in_tool_loop and message.source.provider in (None, request.provider):
        reasoning = "".join(b.text for b in message.content if isinstance(b, ReasoningBlock))
        if reasoning:
            out["reasoning_content"] = reasoning
    return out
