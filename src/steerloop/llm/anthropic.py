"""``AnthropicAdapter``: the Anthropic Messages API over the official ``anthropic`` SDK.

Requests are translated from the steerloop history (system messages become the top-level
``system``; tool results become ``tool_result`` blocks of one user message; reasoning blocks
whose ``replay_state`` holds an Anthropic signature are sent back as ``thinking`` blocks,
unchanged). The SSE stream is normalised into steerloop chunks, and every SDK or transport
failure becomes a terminal ``error`` finish carrying an ``LlmFailure``.

The SDK never retries (``max_retries=0``): retrying is the job of ``agent/request-error``
listeners (see ``steerloop.llm.retry``). The stream lifecycle (abort closing the HTTP
response, the request id, failures) is ``llm._provider_stream``'s; this module supplies the
body, the SDK call, the decoder and the SDK-exception map.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator, Awaitable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import anthropic

try:
    import httpx2 as _httpx
except ImportError:  # SDK releases before the httpx2 switch depend on httpx
    import httpx as _httpx  # type: ignore[no-redef,import-not-found,unused-ignore]

from ..messages import (
    AssistantMessage,
    Block,
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
from ._failures import classify
from ._http import NO_KEY, redact, retry_after_ms
from ._parts import anthropic_part
from ._provider_stream import error_finish, provider_stream
from ._tool_choice import anthropic_tool_choice
from ._types import GenerateRequest, LlmFailure, ModelInfo, TokenUsage, ToolSchema
from .chunks import (
    BlockEnd,
    BlockStart,
    Finish,
    FinishKind,
    FinishReason,
    ReasoningDelta,
    StreamChunk,
    TextDelta,
    ToolCallDelta,
    UsageChunk,
)

__all__ = ["DEFAULT_THINKING_BUDGETS", "PROMPT_CACHE", "AnthropicAdapter"]

THINKING = "anthropic/thinking"
REDACTED_THINKING = "anthropic/redacted_thinking"

DEFAULT_THINKING_BUDGETS: Mapping[str, int] = {
    "minimal": 1024,
    "low": 2048,
    "medium": 8192,
    "high": 24576,
}
"""``reasoning_effort`` → ``budget_tokens`` when the adapter is given no table of its own."""

PROMPT_CACHE = "prompt_cache"
"""The ``CallConfig.extra`` key steering prompt caching for one request (never sent): ``False``
turns it off, ``True`` asks for the default, a mapping is the ``cache_control`` object itself
(``{"type": "ephemeral", "ttl": "1h"}``)."""

_EPHEMERAL: Mapping[str, Any] = {"type": "ephemeral"}
# Block types a ``cache_control`` breakpoint may sit on (thinking blocks may not).
_CACHEABLE = frozenset({"text", "image", "document", "tool_use", "tool_result"})

MAX_CONTINUATIONS = 8
"""How many times one stream resends a turn the server paused (``stop_reason: pause_turn``)."""

# Body fields every SDK release of the tested range takes as keyword arguments; the rest
# (sampling parameters the 2.x SDK dropped, ``CallConfig.extra``) travel in ``extra_body``.
_SDK_FIELDS = frozenset(
    {
        "model",
        "messages",
        "max_tokens",
        "system",
        "tools",
        "tool_choice",
        "thinking",
        "metadata",
        "stop_sequences",
    }
)

_MIN_THINKING_BUDGET = 1024
_FALLBACK_MAX_TOKENS = 4096


@dataclass(frozen=True, slots=True)
class _Model:
    prefix: str
    context_window: int
    max_output_tokens: int
    default_max_tokens: int


# Most specific prefix first. ``default_max_tokens`` stays well under the ceiling: output
# rate limits are charged against ``max_tokens`` when a request starts.
_MODELS: tuple[_Model, ...] = (
    _Model("claude-opus-4-5", 200_000, 64_000, 16_384),
    _Model("claude-opus-4-1", 200_000, 32_000, 16_384),
    _Model("claude-opus-4", 200_000, 32_000, 16_384),
    _Model("claude-sonnet-4", 200_000, 64_000, 16_384),
    _Model("claude-haiku-4", 200_000, 64_000, 16_384),
    _Model("claude-3-7-sonnet", 200_000, 64_000, 16_384),
    _Model("claude-3-5-sonnet", 200_000, 8_192, 8_192),
    _Model("claude-3-5-haiku", 200_000, 8_192, 8_192),
    _Model("claude-3-opus", 200_000, 4_096, 4_096),
    _Model("claude-3-haiku", 200_000, 4_096, 4_096),
    _Model("claude-", 200_000, 32_000, 8_192),
)


def _model(name: str) -> _Model | None:
    for entry in _MODELS:
        if name.startswith(entry.prefix):
            return entry
    return None


class AnthropicAdapter:
    """An ``LlmAdapter`` for the Anthropic Messages API (streaming).

    Args:
        base_url: API root; ``None`` uses the SDK default (or ``ANTHROPIC_BASE_URL``).
        api_key: the key. ``None`` lets the SDK read ``ANTHROPIC_API_KEY`` for the default
            endpoint and sends a placeholder to an explicit ``base_url`` (a local
            Anthropic-compatible server needs none), as ``OpenAIChatAdapter`` does.
        default_headers: extra headers sent with every request.
        timeout: seconds for connecting and for each read of the stream.
        thinking_budget: extended thinking. An ``int`` enables it for every request with
            that ``budget_tokens``; a mapping translates ``reasoning_effort`` into a budget.
            With ``None``, a request's ``reasoning_effort`` is translated through
            ``DEFAULT_THINKING_BUDGETS``, and requests without one do not think.
        models: ``ModelInfo`` by exact model name, over the built-in prefix table (its
            ``defaults["max_tokens"]`` is the request's default ``max_tokens``).
        prompt_cache: prompt caching. On (``True``) every request carries ``cache_control``
            breakpoints on the system prompt, the last tool and the last block of the last
            message (the history is append-only, so the next request of the session reads
            that prefix from the cache); a mapping is the ``cache_control`` object to send
            (a ``ttl``); ``False`` sends none. A request's ``extra["prompt_cache"]`` (same
            values) overrides it.


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
        timeout: float = 600.0,
        thinking_budget: int | Mapping[str, int] | None = None,
        models: Mapping[str, ModelInfo] | None = None,
        prompt_cache: bool | Mapping[str, Any] = True,
    ) -> None:
        if api_key is None and base_url is not None:
            api_key = NO_KEY  # a local server needs none; never send ANTHROPIC_API_KEY there
        self._models = dict(models or {})
        self._cache = _cache_control(prompt_cache)
        self._thinking_budget = thinking_budget
        self._client = anthropic.AsyncAnthropic(
            base_url=base_url,
            api_key=api_key,
            default_headers=dict(default_headers) if default_headers else None,
            timeout=timeout,
            max_retries=0,
        )

    async def aclose(self) -> None:
        """Close the SDK client's connection pool."""
        await self._client.close()

    async def resolve_model(self, provider: str, model: str) -> ModelInfo:
        return self._info(model)

    def _info(self, model: str) -> ModelInfo:
        configured = self._models.get(model)
        if configured is not None:
            return configured
        entry = _model(model)
        if entry is None:
            return ModelInfo(defaults={"max_tokens": _FALLBACK_MAX_TOKENS})
        return ModelInfo(
            context_window=entry.context_window,
            max_output_tokens=entry.max_output_tokens,
            defaults={"max_tokens": entry.default_max_tokens},
        )

    # --- request ---------------------------------------------------------------------

    def build_params(self, request: GenerateRequest) -> dict[str, Any]:
        """The Messages API body (without ``stream``) for ``request``, as sent on the wire."""
        info = self._info(request.model)
        max_tokens = request.max_tokens or info.defaults.get("max_tokens") or _FALLBACK_MAX_TOKENS
        system, messages = to_anthropic_messages(request.messages)
        params: dict[str, Any] = {"model": request.model, "messages": messages}
        if system:
            params["system"] = system
        if request.tools:
            params["tools"] = [_tool(t) for t in request.tools]
            choice = anthropic_tool_choice(request)
            if choice is not None:
                params["tool_choice"] = choice
        budget = self._budget(request.reasoning_effort)
        if budget is not None:
            if request.max_tokens is None:
                # The budget counts against max_tokens; leave room for the answer too.
                ceiling = info.max_output_tokens
                max_tokens = budget + max_tokens
                if ceiling is not None:
                    max_tokens = min(max_tokens, ceiling)
            budget = min(budget, max_tokens - 1)
            if budget >= _MIN_THINKING_BUDGET:
                params["thinking"] = {"type": "enabled", "budget_tokens": budget}
        params["max_tokens"] = max_tokens
        config = request.config
        cache = self._cache
        if config is not None:
            if config.temperature is not None:
                params["temperature"] = config.temperature
            if config.top_p is not None:
                params["top_p"] = config.top_p
            extra = dict(config.extra or {})
            if PROMPT_CACHE in extra:
                cache = _cache_control(extra.pop(PROMPT_CACHE))
            params.update(extra)  # provider fields the request carries verbatim
        if cache is not None:
            _add_breakpoints(params, cache)
        return params

    def _budget(self, effort: str | None) -> int | None:
        table = self._thinking_budget
        if effort is None:
            return table if isinstance(table, int) else None
        if effort in ("none", "off"):
            return None
        if isinstance(table, Mapping):
            return table.get(effort)
        budget = DEFAULT_THINKING_BUDGETS.get(effort)
        if budget is None and isinstance(table, int):
            return table
        return budget

    # --- stream ----------------------------------------------------------------------

    def stream(self, request: GenerateRequest) -> AsyncIterator[StreamChunk]:
        call = _MessagesCall(self, request)
        return provider_stream(call, request.signal, max_opens=MAX_CONTINUATIONS + 1)

    def _open(self, params: Mapping[str, Any]) -> Awaitable[Any]:
        return self._client.messages.create(**sdk_arguments(params), stream=True)

    # --- failures --------------------------------------------------------------------

    def _failure(self, exc: BaseException) -> LlmFailure:
        if isinstance(exc, InvalidConfig):
            return LlmFailure(message=str(exc), code="INVALID_REQUEST", retryable=False)
        failure = failure_of(exc)
        message = redact(failure.message, self._client.api_key)  # the key the SDK resolved
        return failure if message == failure.message else _with(failure, message=message)


class _MessagesCall:
    """One Messages API request for ``provider_stream``; a paused turn (``pause_turn``) is
    sent again with the paused content as the assistant's prefix, into the same stream."""

    request_id_header = "request-id"

    def __init__(self, adapter: AnthropicAdapter, request: GenerateRequest) -> None:
        self._adapter = adapter
        self._request = request
        self._params: dict[str, Any] | None = None
        self._decoder = _Decoder()

    def open(self) -> Awaitable[Any]:
        if self._params is None:
            self._params = self._adapter.build_params(self._request)
        return self._adapter._open(self._params)

    def feed(self, event: Any) -> list[StreamChunk]:
        return self._decoder.push(event)

    @property
    def done(self) -> bool:
        return self._decoder.done

    def end(self, request_id: str | None) -> list[StreamChunk] | None:
        decoder = self._decoder
        if not decoder.done:
            failure = LlmFailure(
                message="the stream ended before message_stop",
                code="INCOMPLETE_STREAM",
                retryable=True,
                request_id=request_id,
            )
            return [error_finish(failure)]
        if decoder.stop_reason == "pause_turn" and self._params is not None:
            messages = _continued(self._params["messages"], decoder.resume())
            self._params = {**self._params, "messages": messages}
            return None
        return [decoder.finish()]

    def failure(self, exc: Exception) -> LlmFailure:
        return self._adapter._failure(exc)


# --- request translation ---------------------------------------------------------------


class InvalidConfig(ValueError):
    """A request's configuration the adapter cannot send (a bad ``extra`` value)."""


def _cache_control(value: Any) -> dict[str, Any] | None:
    """The ``cache_control`` object a ``prompt_cache`` setting asks for (``None``: off)."""
    if value is False or value is None:
        return None
    if value is True:
        return dict(_EPHEMERAL)
    if isinstance(value, Mapping) and isinstance(value.get("type"), str):
        return dict(value)
    raise InvalidConfig(
        f"{PROMPT_CACHE} must be true, false or a cache_control object, not {value!r}"
    )


def _add_breakpoints(params: dict[str, Any], cache: Mapping[str, Any]) -> None:
    """``cache_control`` on the system prompt, the last tool and the last cacheable block of
    the last message: at most three of the API's four breakpoints, each ending a prefix
    that stays unchanged for the rest of the session."""
    system = params.get("system")
    if isinstance(system, str) and system:
        params["system"] = [{"type": "text", "text": system, "cache_control": dict(cache)}]
    tools = params.get("tools")
    if isinstance(tools, list) and tools and isinstance(tools[-1], Mapping):
        params["tools"] = [*tools[:-1], {**tools[-1], "cache_control": dict(cache)}]
    messages = params.get("messages")
    if not isinstance(messages, list) or not messages:
        return
    last = messages[-1]
    content = last.get("content") if isinstance(last, Mapping) else None
    if not isinstance(content, list):
        return
    for i in range(len(content) - 1, -1, -1):
        block = content[i]
        if isinstance(block, Mapping) and block.get("type") in _CACHEABLE:
            content = [*content[:i], {**block, "cache_control": dict(cache)}, *content[i + 1 :]]
            messages[-1] = {**last, "content": content}
            return


def sdk_arguments(params: Mapping[str, Any]) -> dict[str, Any]:
    """``params`` (a wire body) as keyword arguments of ``messages.create``."""
    kwargs = {k: v for k, v in params.items() if k in _SDK_FIELDS}
    extra = {k: v for k, v in params.items() if k not in _SDK_FIELDS}
    if extra:
        kwargs["extra_body"] = extra
    return kwargs


def _continued(
    messages: Sequence[Mapping[str, Any]], content: list[dict[str, Any]]
) -> list[Mapping[str, Any]]:
    """``messages`` with ``content`` appended to the trailing assistant prefix."""
    out = list(messages)
    if out and out[-1].get("role") == "assistant":
        out[-1] = {"role": "assistant", "content": [*out[-1]["content"], *content]}
    else:
        out.append({"role": "assistant", "content": content})
    return out


def to_anthropic_messages(
    history: Sequence[Message],
) -> tuple[str, list[dict[str, Any]]]:
    """Split ``history`` into the top-level ``system`` text and Messages API turns.

    Consecutive messages of one role are merged into one turn (tool results of one step
    become one user message), with ``tool_result`` blocks first as the API requires.
    """
    system: list[str] = []
    turns: list[dict[str, Any]] = []

    def add(role: str, content: list[dict[str, Any]]) -> None:
        if not content:
            return
        if turns and turns[-1]["role"] == role:
            turns[-1]["content"].extend(content)
        else:
            turns.append({"role": role, "content": content})

    for message in history:
        if isinstance(message, SystemMessage):
            text = "".join(b.text for b in message.content if isinstance(b, TextBlock))
            if text:
                system.append(text)
        elif isinstance(message, UserMessage):
            add("user", [p for b in message.content if (p := _user_part(b)) is not None])
        elif isinstance(message, AssistantMessage):
            add("assistant", [p for b in message.content if (p := _assistant_part(b)) is not None])
        elif isinstance(message, ToolResultMessage):
            add("user", [_tool_result(message)])
    for turn in turns:
        if turn["role"] == "user":
            content = turn["content"]
            turn["content"] = [p for p in content if p["type"] == "tool_result"] + [
                p for p in content if p["type"] != "tool_result"
            ]
    return "\n\n".join(system), turns


def _text_of(block: TextBlock | ReasoningBlock | ToolCallBlock) -> str:
    if isinstance(block, TextBlock | ReasoningBlock):
        return block.text
    return json.dumps({"tool_call": block.name, "id": block.id, "arguments": block.arguments})


def _user_part(block: Block) -> dict[str, Any] | None:
    if isinstance(block, ImageBlock | FileBlock):
        return anthropic_part(block)
    text = _text_of(block)
    return {"type": "text", "text": text} if text else None


def _assistant_part(block: Block) -> dict[str, Any] | None:
    if isinstance(block, TextBlock):
        return {"type": "text", "text": block.text} if block.text else None
    if isinstance(block, ReasoningBlock):
        # Only signed Anthropic thinking can be replayed; anything else (another provider's
        # reasoning, an interrupted prefix cut before its signature) is left out.
        state = block.replay_state
        if isinstance(state, Mapping):
            if state.get("kind") == THINKING and isinstance(state.get("signature"), str):
                return {"type": "thinking", "thinking": block.text, "signature": state["signature"]}
            if state.get("kind") == REDACTED_THINKING and isinstance(state.get("data"), str):
                return {"type": "redacted_thinking", "data": state["data"]}
        return None
    if isinstance(block, ImageBlock | FileBlock):
        return anthropic_part(block)  # no adapter produces one; a hand-built log may
    try:
        arguments = json.loads(block.arguments) if block.arguments else {}
    except ValueError:
        arguments = {}
    if not isinstance(arguments, dict):
        arguments = {}
    return {"type": "tool_use", "id": block.id, "name": block.name, "input": arguments}


def _tool_result(message: ToolResultMessage) -> dict[str, Any]:
    parts = [p for b in message.content if (p := _user_part(b)) is not None]
    out: dict[str, Any] = {"type": "tool_result", "tool_use_id": message.call_id}
    if parts:
        out["content"] = parts
    if message.is_error:
        out["is_error"] = True
    return out


def _tool(tool: ToolSchema) -> dict[str, Any]:
    out: dict[str, Any] = {"name": tool.name, "input_schema": dict(tool.parameters)}
    if tool.description:
        out["description"] = tool.description
    return out


# --- stream decoding -------------------------------------------------------------------

_STOP_KINDS: Mapping[str, FinishKind] = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "tool_use": "tool-calls",
    "max_tokens": "max-tokens",
    "model_context_window_exceeded": "max-tokens",
}


class _Open:
    __slots__ = ("id", "kind", "name", "parts", "state")

    def __init__(self, kind: str, id: str = "", name: str = "") -> None:
        self.kind = kind
        self.id = id
        self.name = name
        self.parts: list[str] = []
        self.state: dict[str, Any] | None = None


class _Decoder:
    """Folds Messages API stream events into steerloop chunks.

    It also keeps the wire form of every content block, so a turn the server paused can be
    sent back verbatim (``resume``); the chunks of the continuation carry block indices after
    the paused ones and usage summed over the requests.
    """

    def __init__(self) -> None:
        self.open: dict[int, _Open] = {}
        self.usage: dict[str, int] = {}
        self.base: dict[str, int] = {}  # usage of the paused requests before this one
        self.offset = 0  # block index of this response's block 0
        self.raw: dict[int, dict[str, Any]] = {}
        self.raw_json: dict[int, list[str]] = {}
        self.stop_reason: str | None = None
        self.done = False

    def push(self, event: Any) -> list[StreamChunk]:
        kind = getattr(event, "type", None)
        if kind == "message_start":
            self._usage(getattr(event.message, "usage", None))
            return [self._usage_chunk()]
        if kind == "content_block_start":
            self._record_start(event.index, event.content_block)
            return self._start(event.index + self.offset, event.content_block)
        if kind == "content_block_delta":
            self._record_delta(event.index, event.delta)
            return self._delta(event.index + self.offset, event.delta)
        if kind == "content_block_stop":
            return self._stop(event.index + self.offset)
        if kind == "message_delta":
            self.stop_reason = getattr(event.delta, "stop_reason", None) or self.stop_reason
            self._usage(getattr(event, "usage", None))
            return [self._usage_chunk()]
        if kind == "message_stop":
            self.done = True
        return []

    def _record_start(self, index: int, block: Any) -> None:
        dump = getattr(block, "model_dump", None)
        self.raw[index] = dump(mode="json", exclude_none=True) if dump is not None else {}

    def _record_delta(self, index: int, delta: Any) -> None:
        raw = self.raw.get(index)
        if raw is None:
            return
        kind = getattr(delta, "type", None)
        if kind == "text_delta":
            raw["text"] = raw.get("text", "") + delta.text
        elif kind == "thinking_delta":
            raw["thinking"] = raw.get("thinking", "") + delta.thinking
        elif kind == "signature_delta":
            raw["signature"] = raw.get("signature", "") + delta.signature
        elif kind == "input_json_delta":
            self.raw_json.setdefault(index, []).append(delta.partial_json or "")

    def resume(self) -> list[dict[str, Any]]:
        """The paused response's content in wire form; readies the decoder for the next."""
        content = []
        for index in sorted(self.raw):
            block = self.raw[index]
            text = "".join(self.raw_json.get(index, ()))
            if text:
                # Unparsable input: the server gets back what it sent at the block's start.
                with contextlib.suppress(ValueError):
                    block["input"] = json.loads(text)
            content.append(block)
        self.offset += max(self.raw, default=-1) + 1
        for name, value in self.usage.items():
            self.base[name] = self.base.get(name, 0) + value
        self.usage, self.raw, self.raw_json, self.open = {}, {}, {}, {}
        self.stop_reason, self.done = None, False
        return content

    def _start(self, index: int, block: Any) -> list[StreamChunk]:
        kind = getattr(block, "type", None)
        if kind == "text":
            self.open[index] = part = _Open("text")
            out: list[StreamChunk] = [BlockStart(index=index, block_type="text")]
            if block.text:
                part.parts.append(block.text)
                out.append(TextDelta(index=index, text=block.text))
            return out
        if kind == "thinking":
            self.open[index] = part = _Open("thinking")
            out = [BlockStart(index=index, block_type="reasoning")]
            if getattr(block, "thinking", ""):
                part.parts.append(block.thinking)
                out.append(ReasoningDelta(index=index, text=block.thinking))
            if getattr(block, "signature", ""):
                part.state = {"kind": THINKING, "signature": block.signature}
            return out
        if kind == "redacted_thinking":
            self.open[index] = part = _Open("redacted")
            part.state = {"kind": REDACTED_THINKING, "data": block.data}
            return [BlockStart(index=index, block_type="reasoning")]
        if kind == "tool_use":
            self.open[index] = part = _Open("tool", block.id, block.name)
            if getattr(block, "input", None):
                part.state = {"input": block.input}
            return [
                BlockStart(index=index, block_type="tool-call"),
                ToolCallDelta(index=index, id=block.id, name=block.name, arguments_delta=""),
            ]
        return []  # server tools, citations and future block types are not modelled

    def _delta(self, index: int, delta: Any) -> list[StreamChunk]:
        part = self.open.get(index)
        if part is None:
            return []
        kind = getattr(delta, "type", None)
        if kind == "text_delta" and part.kind == "text":
            part.parts.append(delta.text)
            return [TextDelta(index=index, text=delta.text)]
        if kind == "thinking_delta" and part.kind == "thinking":
            part.parts.append(delta.thinking)
            return [ReasoningDelta(index=index, text=delta.thinking)]
        if kind == "signature_delta" and part.kind == "thinking":
            previous = part.state["signature"] if part.state else ""
            part.state = {"kind": THINKING, "signature": previous + delta.signature}
            return []
        if kind == "input_json_delta" and part.kind == "tool":
            if not delta.partial_json:
                return []
            part.parts.append(delta.partial_json)
            return [ToolCallDelta(index=index, id=part.id, arguments_delta=delta.partial_json)]
        return []

    def _stop(self, index: int) -> list[StreamChunk]:
        part = self.open.pop(index, None)
        if part is None:
            return []
        text = "".join(part.parts)
        if part.kind == "text":
            return [BlockEnd(index=index, block=TextBlock(text))]
        if part.kind in ("thinking", "redacted"):
            return [BlockEnd(index=index, block=ReasoningBlock(text, part.state))]
        out: list[StreamChunk] = []
        if not text:
            # A call without arguments streams no JSON; its input is the start block's (``{}``).
            text = json.dumps(part.state["input"] if part.state else {})
            out.append(ToolCallDelta(index=index, id=part.id, arguments_delta=text))
        out.append(BlockEnd(index=index, block=ToolCallBlock(part.id, part.name, text)))
        return out

    def _usage(self, usage: Any) -> None:
        if usage is None:
            return
        for name in (
            "input_tokens",
            "output_tokens",
            "cache_read_input_tokens",
            "cache_creation_input_tokens",
        ):
            value = getattr(usage, name, None)
            if isinstance(value, int):
                self.usage[name] = value

    def _usage_chunk(self) -> UsageChunk:
        # Anthropic's input_tokens already excludes cache reads and writes: disjoint counts.
        u = {k: self.base.get(k, 0) + self.usage.get(k, 0) for k in {*self.base, *self.usage}}
        return UsageChunk(
            usage=TokenUsage(
                input_tokens=u.get("input_tokens", 0),
                output_tokens=u.get("output_tokens", 0),
                cache_read_tokens=u.get("cache_read_input_tokens"),
                cache_write_tokens=u.get("cache_creation_input_tokens"),
            )
        )

    def finish(self) -> Finish:
        reason = self.stop_reason
        if reason == "refusal":
            return error_finish(
                LlmFailure(message="the model refused to answer", code="REFUSAL", retryable=False)
            )
        return Finish(reason=FinishReason(kind=_STOP_KINDS.get(reason or "", "stop")))


# --- failures --------------------------------------------------------------------------


def _with(failure: LlmFailure, **changes: Any) -> LlmFailure:
    fields = failure.to_json()
    fields.update(changes)
    return LlmFailure(**fields)


def failure_of(exc: BaseException) -> LlmFailure:
    """Translate an SDK or transport exception into an ``LlmFailure``."""
    if isinstance(exc, anthropic.APIStatusError):
        return _status_failure(exc)
    if isinstance(exc, anthropic.APITimeoutError | _httpx.TimeoutException):
        return LlmFailure(
            message=f"request timed out: {_describe(exc)}", code="TIMEOUT", retryable=True
        )
    if isinstance(exc, anthropic.APIConnectionError | _httpx.TransportError):
        return LlmFailure(
            message=f"connection failed: {_describe(exc)}", code="CONNECTION", retryable=True
        )
    if isinstance(exc, ValueError | anthropic.APIResponseValidationError):
        return LlmFailure(
            message=f"malformed response from the API: {_describe(exc)}",
            code="BAD_RESPONSE",
            retryable=False,
        )
    return LlmFailure(message=_describe(exc), code="UNKNOWN", retryable=False)


def _status_failure(exc: anthropic.APIStatusError) -> LlmFailure:
    # An SSE ``error`` event arrives on a 200 response: only its body says what failed.
    status = exc.status_code if exc.status_code >= 400 else None
    error = exc.body.get("error") if isinstance(exc.body, dict) else None
    err_type = error.get("type") if isinstance(error, dict) else None
    detail = error.get("message") if isinstance(error, dict) else None
    if not isinstance(err_type, str):
        err_type = None
    if not isinstance(detail, str):
        detail = None
    text = detail or exc.message
    code, retryable = classify(status=status, error_type=err_type, text=text)
    headers = exc.response.headers
    should_retry = headers.get("x-should-retry")
    if should_retry in ("true", "false") and status is not None:
        retryable = should_retry == "true"
    prefix = " ".join(p for p in (str(status) if status else None, err_type) if p)
    return LlmFailure(
        message=f"{prefix}: {text}" if prefix and detail else text,
        code=code,
        status=status,
        retryable=retryable,
        provider_retry_after_ms=retry_after_ms(headers),
        request_id=exc.request_id,
    )


def _describe(exc: BaseException) -> str:
    parts = [str(exc) or type(exc).__name__]
    cause = exc.__cause__ or exc.__context__
    if cause is not None and str(cause) and str(cause) not in parts[0]:
        parts.append(str(cause))
    return ": ".join(parts)
