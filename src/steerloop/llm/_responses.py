"""``OpenAIResponsesAdapter``: the OpenAI Responses API (``/responses``) over the official SDK.

Stateless by design: every request is sent with ``store=false`` and the whole history as
input items, never ``previous_response_id``. Reasoning items come back with their
``encrypted_content`` (``include=["reasoning.encrypted_content"]``) and are kept verbatim as
``ReasoningBlock.replay_state``; later requests send them back as input items, so a session
resumed or forked in another process continues the model's reasoning.

The stream lifecycle (abort, request id, failures) is ``llm._provider_stream``'s; this module
supplies the body, the SDK call, the decoder and the SDK-exception map (``openai``'s).
"""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator, Awaitable, Iterator, Mapping
from typing import Any

import openai
from openai.resources.responses import AsyncResponses

from ..messages import (
    AssistantMessage,
    Message,
    ReasoningBlock,
    SystemMessage,
    TextBlock,
    ToolCallBlock,
    ToolResultMessage,
    UserMessage,
)
from ._failures import classify
from ._http import redact
from ._openai_shared import (
    REASONING_MODELS,
    failure_from_exception,
    open_client,
    resolve_known,
    wire_parameters,
)
from ._parts import content_parts, has_binary, responses_part
from ._provider_stream import error_finish, provider_stream
from ._tool_choice import openai_tool_fields
from ._types import GenerateRequest, LlmFailure, ModelInfo, TokenUsage
from .chunks import (
    BlockEnd,
    BlockStart,
    BlockType,
    Finish,
    FinishReason,
    ReasoningDelta,
    StreamChunk,
    TextDelta,
    ToolCallDelta,
    UsageChunk,
)

__all__ = ["REASONING_ITEM", "OpenAIResponsesAdapter"]

REASONING_ITEM = "openai/reasoning"
"""``ReasoningBlock.replay_state["kind"]`` of a Responses reasoning item."""

# Keyword arguments ``responses.create`` takes in the installed SDK; other body fields
# (``CallConfig.extra`` keys newer than the SDK) travel in ``extra_body``.
_SDK_FIELDS = frozenset(inspect.signature(AsyncResponses.create).parameters) - {
    "self",
    "extra_headers",
    "extra_query",
    "extra_body",
    "timeout",
}


class OpenAIResponsesAdapter:
    """An ``LlmAdapter`` for the OpenAI Responses API (streaming, stateless).

    Args:
        base_url: the API root; ``None`` is OpenAI's own endpoint.
        api_key: the bearer key; as for ``OpenAIChatAdapter`` (``OPENAI_API_KEY`` only for
            OpenAI's endpoint, a placeholder for any other ``base_url``).
        default_headers: extra headers for every request.
        timeout: seconds for the SDK's HTTP timeout.
        models: ``ModelInfo`` by model name, layered over ``KNOWN_MODELS``.
        reasoning_summary: ``reasoning.summary`` asked of reasoning models (``"auto"``,
            ``"concise"``, ``"detailed"``); ``None`` asks for none (reasoning items are still
            carried, encrypted).

    Requests carry ``prompt_cache_key`` = the session id, ``max_output_tokens``,
    ``reasoning.effort``, and ``CallConfig.extra`` merged over the body (hosted tools,
    ``text``); the adapter owns its SDK client and ``aclose()`` closes it.
    """

    def __init__(
        self,
        base_url: str | None = None,
        api_key: str | None = None,
        *,
        default_headers: Mapping[str, str] | None = None,
        timeout: float | None = 600.0,
        models: Mapping[str, ModelInfo] | None = None,
        reasoning_summary: str | None = "auto",
    ) -> None:
        self._client, self._secret = open_client(base_url, api_key, default_headers, timeout)
        self._models = dict(models or {})
        self._summary = reasoning_summary

    def __repr__(self) -> str:
        return f"OpenAIResponsesAdapter(base_url={str(self._client.base_url)!r})"

    async def aclose(self) -> None:
        """Close the SDK client and its connection pool."""
        await self._client.close()

    async def resolve_model(self, provider: str, model: str) -> ModelInfo:
        return resolve_known(model, self._models)

    # --- request ----------------------------------------------------------------------

    def request_body(self, request: GenerateRequest) -> dict[str, Any]:
        """The ``/responses`` body for ``request``, as sent on the wire."""
        body: dict[str, Any] = {
            "model": request.model,
            "input": to_input_items(request.messages, request.provider),
            "stream": True,
            "store": False,
            "include": ["reasoning.encrypted_content"],
        }
        if request.tools:
            # ``strict: false``: our schemas are plain JSON Schema, not strict-mode subsets.
            body["tools"] = [
                {
                    "type": "function",
                    "name": tool.name,
                    "description": tool.description,
                    "parameters": wire_parameters(tool.parameters),
                    "strict": False,
                }
                for tool in request.tools
            ]
            body.update(openai_tool_fields(request, responses=True))
        if request.session_id:
            body["prompt_cache_key"] = request.session_id
        if request.max_tokens is not None:
            body["max_output_tokens"] = request.max_tokens
        reasoning: dict[str, Any] = {}
        if request.reasoning_effort is not None:
            reasoning["effort"] = request.reasoning_effort
        if self._summary is not None and (reasoning or REASONING_MODELS.match(request.model)):
            reasoning["summary"] = self._summary
        if reasoning:
            body["reasoning"] = reasoning
        config = request.config
        if config is not None:
            if config.temperature is not None:
                body["temperature"] = config.temperature
            if config.top_p is not None:
                body["top_p"] = config.top_p
            if config.extra:
                body.update(config.extra)  # provider fields carried verbatim (tools, text)
        return body

    # --- streaming --------------------------------------------------------------------

    def stream(self, request: GenerateRequest) -> AsyncIterator[StreamChunk]:
        return provider_stream(_ResponsesCall(self, request), request.signal)

    def _open(self, body: Mapping[str, Any]) -> Awaitable[Any]:
        kwargs = {k: v for k, v in body.items() if k in _SDK_FIELDS}
        extra = {k: v for k, v in body.items() if k not in _SDK_FIELDS}
        if extra:
            kwargs["extra_body"] = extra
        return self._client.responses.create(**kwargs)

    def _failure(self, exc: Exception) -> LlmFailure | None:
        if not isinstance(exc, openai.OpenAIError | ValueError):
            return None
        return failure_from_exception(exc, secret=self._secret)


class _ResponsesCall:
    """One ``/responses`` request for ``provider_stream``."""

    request_id_header = "x-request-id"

    def __init__(self, adapter: OpenAIResponsesAdapter, request: GenerateRequest) -> None:
        self._adapter = adapter
        self._request = request
        self._decoder = _Decoder(adapter._secret)

    def open(self) -> Awaitable[Any]:
        return self._adapter._open(self._adapter.request_body(self._request))

    def feed(self, event: Any) -> Iterator[StreamChunk]:
        return self._decoder.feed(event)

    @property
    def done(self) -> bool:
        return self._decoder.finish is not None

    def end(self, request_id: str | None) -> list[StreamChunk]:
        return list(self._decoder.end(request_id))

    def failure(self, exc: Exception) -> LlmFailure | None:
        return self._adapter._failure(exc)


# --- messages → input items -------------------------------------------------------------


def _text(blocks: tuple[Any, ...]) -> str:
    return "\n\n".join(b.text for b in blocks if isinstance(b, TextBlock))


def _input_content(blocks: tuple[Any, ...]) -> str | list[dict[str, Any]]:
    """Text alone as a string (as before images); with images or files, ``input_text`` /
    ``input_image`` / ``input_file`` parts in order (a function call's output takes the same
    list)."""
    if not has_binary(blocks):
        return _text(blocks)
    return content_parts(blocks, "input_text", responses_part)


_REASONING_FIELDS = frozenset({"id", "type", "summary", "content", "encrypted_content"})


def _reasoning_item(block: ReasoningBlock) -> dict[str, Any] | None:
    state = block.replay_state
    if not isinstance(state, Mapping) or state.get("kind") != REASONING_ITEM:
        return None
    item = state.get("item")
    if not isinstance(item, Mapping) or item.get("type") != "reasoning":
        return None
    if not isinstance(item.get("id"), str):
        return None
    # Stored rows are untrusted: only the fields of a reasoning input item go back.
    return {k: v for k, v in item.items() if k in _REASONING_FIELDS}


def to_input_items(messages: tuple[Message, ...], provider: str) -> list[dict[str, Any]]:
    """The history as Responses input items, blocks in their original order.

    System messages stay where they are (role ``system``); a reasoning item goes back only
    to the provider that produced it, and only when it carries its Responses item (an
    interrupted block cut before ``output_item.done`` has none and is left out).
    """
    items: list[dict[str, Any]] = []
    for message in messages:
        if isinstance(message, SystemMessage):
            items.append({"role": "system", "content": _text(message.content)})
        elif isinstance(message, UserMessage):
            items.append({"role": "user", "content": _input_content(message.content)})
        elif isinstance(message, ToolResultMessage):
            items.append(
                {
                    "type": "function_call_output",
                    "call_id": message.call_id,
                    "output": _input_content(message.content),
                }
            )
        elif isinstance(message, AssistantMessage):
            same_provider = message.source.provider in (None, provider)
            for block in message.content:
                if isinstance(block, TextBlock):
                    if block.text:
                        items.append({"role": "assistant", "content": block.text})
                elif isinstance(block, ToolCallBlock):
                    items.append(
                        {
                            "type": "function_call",
                            "call_id": block.id,
                            "name": block.name,
                            "arguments": block.arguments,
                        }
                    )
                elif (
                    isinstance(block, ReasoningBlock)
                    and same_provider
                    and (item := _reasoning_item(block)) is not None
                ):
                    items.append(item)
    return items


# --- events → chunks --------------------------------------------------------------------


_BLOCK_TYPES: Mapping[str, BlockType] = {
    "reasoning": "reasoning",
    "message": "text",
    "function_call": "tool-call",
}


class _Item:
    __slots__ = ("call_id", "index", "kind", "name", "parts", "refusal")

    def __init__(self, kind: str, index: int, call_id: str = "", name: str = "") -> None:
        self.kind = kind
        self.index = index
        self.call_id = call_id
        self.name = name
        self.parts: list[str] = []
        self.refusal: list[str] = []


def _dump(value: Any) -> dict[str, Any]:
    dump = getattr(value, "model_dump", None)
    if dump is None:
        return dict(value) if isinstance(value, Mapping) else {}
    out = dump(mode="json", exclude_none=True)
    return out if isinstance(out, dict) else {}


def _usage(usage: Any) -> TokenUsage | None:
    """Disjoint counts: cached input and reasoning output split out of the totals."""
    if usage is None:
        return None
    total_in = getattr(usage, "input_tokens", 0) or 0
    total_out = getattr(usage, "output_tokens", 0) or 0
    cached = getattr(getattr(usage, "input_tokens_details", None), "cached_tokens", None)
    reasoning = getattr(getattr(usage, "output_tokens_details", None), "reasoning_tokens", None)
    return TokenUsage(
        input_tokens=max(total_in - (cached or 0), 0),
        output_tokens=max(total_out - (reasoning or 0), 0),
        cache_read_tokens=cached,
        reasoning_tokens=reasoning,
    )


class _Decoder:
    """Folds Responses stream events into steerloop chunks: one block per output item
    (reasoning → reasoning, message → text, function_call → tool-call)."""

    def __init__(self, secret: str | None) -> None:
        self._secret = secret
        self.items: dict[int, _Item] = {}
        self.next_index = 0
        self.saw_calls = False
        self.refusal: list[str] = []
        self.usage: TokenUsage | None = None
        self.finish: Finish | None = None

    def feed(self, event: Any) -> Iterator[StreamChunk]:
        kind = getattr(event, "type", None)
        if kind == "response.output_item.added":
            yield from self._added(event.output_index, event.item)
        elif kind == "response.output_text.delta":
            item = self.items.get(event.output_index)
            if item is not None and item.kind == "message" and event.delta:
                item.parts.append(event.delta)
                yield TextDelta(index=item.index, text=event.delta)
        elif kind == "response.refusal.delta":
            item = self.items.get(event.output_index)
            if item is not None and item.kind == "message":
                item.refusal.append(event.delta or "")
        elif kind == "response.reasoning_summary_text.delta":
            item = self.items.get(event.output_index)
            if item is not None and item.kind == "reasoning" and event.delta:
                item.parts.append(event.delta)
                yield ReasoningDelta(index=item.index, text=event.delta)
        elif kind == "response.reasoning_summary_part.added":
            item = self.items.get(event.output_index)
            if item is not None and item.kind == "reasoning" and item.parts:
                # Summary parts are separate paragraphs of one reasoning block.
                item.parts.append("\n\n")
                yield ReasoningDelta(index=item.index, text="\n\n")
        elif kind == "response.function_call_arguments.delta":
            item = self.items.get(event.output_index)
            if item is not None and item.kind == "function_call" and event.delta:
                item.parts.append(event.delta)
                yield ToolCallDelta(index=item.index, id=item.call_id, arguments_delta=event.delta)
        elif kind == "response.output_item.done":
            yield from self._item_done(event.output_index, event.item)
        elif kind in ("response.completed", "response.incomplete", "response.failed"):
            yield from self._terminal(kind, event.response)
        elif kind == "error":
            self.finish = error_finish(self._stream_error(event.code, event.message))

    def _added(self, output_index: int, raw: Any) -> Iterator[StreamChunk]:
        kind = getattr(raw, "type", None)
        block_type = _BLOCK_TYPES.get(kind) if isinstance(kind, str) else None
        if not isinstance(kind, str) or block_type is None:
            return  # hosted tools' items (web search, file search) are not modelled
        item = _Item(kind, self.next_index)
        self.next_index += 1
        self.items[output_index] = item
        yield BlockStart(index=item.index, block_type=block_type)
        if kind == "function_call":
            self.saw_calls = True
            item.call_id = raw.call_id or f"call_{item.index}"
            item.name = raw.name or ""
            initial = raw.arguments or ""
            item.parts.append(initial)
            yield ToolCallDelta(
                index=item.index, id=item.call_id, name=item.name, arguments_delta=initial
            )

    def _item_done(self, output_index: int, raw: Any) -> Iterator[StreamChunk]:
        item = self.items.pop(output_index, None)
        if item is None:
            return
        streamed = "".join(item.parts)
        if item.kind == "reasoning":
            wire = _dump(raw)
            wire.pop("status", None)
            state = {"kind": REASONING_ITEM, "item": wire}
            yield BlockEnd(index=item.index, block=ReasoningBlock(streamed, state))
        elif item.kind == "message":
            self.refusal.extend(item.refusal)
            yield BlockEnd(index=item.index, block=TextBlock(streamed))
        else:
            # ``arguments`` of the done item is authoritative (a server may skip deltas).
            final = getattr(raw, "arguments", None)
            arguments = final if isinstance(final, str) and final else streamed
            if arguments != streamed and arguments.startswith(streamed):
                rest = arguments[len(streamed) :]
                yield ToolCallDelta(index=item.index, id=item.call_id, arguments_delta=rest)
            block = ToolCallBlock(item.call_id, item.name, arguments)
            yield BlockEnd(index=item.index, block=block)

    def _terminal(self, kind: str, response: Any) -> Iterator[StreamChunk]:
        self.usage = _usage(getattr(response, "usage", None))
        if self.usage is not None:
            yield UsageChunk(usage=self.usage)
        if kind == "response.failed":
            error = getattr(response, "error", None)
            self.finish = error_finish(
                self._stream_error(
                    getattr(error, "code", None),
                    getattr(error, "message", None) or "the response failed",
                )
            )
        elif kind == "response.incomplete":
            details = getattr(response, "incomplete_details", None)
            reason = getattr(details, "reason", None)
            if reason == "max_output_tokens":
                self.finish = Finish(reason=FinishReason(kind="max-tokens"))
            elif reason == "content_filter":
                self.finish = error_finish(
                    LlmFailure(
                        message="the provider's content filter stopped the response",
                        code="CONTENT_FILTER",
                        retryable=False,
                    )
                )
            else:
                self.finish = error_finish(
                    LlmFailure(
                        message=f"the response is incomplete: {reason!r}",
                        code="SERVER",
                        retryable=True,
                    )
                )
        elif self.refusal:
            # A refusal is an error finish (as Anthropic's ``stop_reason: refusal``): the
            # words are the failure's message, not an answer the loop could act on.
            text = "".join(self.refusal)
            self.finish = error_finish(
                LlmFailure(
                    message=redact(f"the model refused to answer: {text}", self._secret),
                    code="REFUSAL",
                    retryable=False,
                )
            )
        else:
            self.finish = Finish(
                reason=FinishReason(kind="tool-calls" if self.saw_calls else "stop")
            )

    def _stream_error(self, code: Any, message: Any) -> LlmFailure:
        code = str(code) if code is not None else None
        text = message if isinstance(message, str) else "stream error"
        name, retryable = classify(status=None, error_code=code, text=text)
        return LlmFailure(
            message=redact(f"stream error: {text}", self._secret), code=name, retryable=retryable
        )

    def end(self, request_id: str | None) -> Iterator[StreamChunk]:
        finish = self.finish
        if finish is not None:
            failure = finish.reason.failure
            if failure is not None and failure.request_id is None and request_id is not None:
                failure = LlmFailure(**{**failure.to_json(), "request_id": request_id})
                finish = error_finish(failure)
            yield finish
            return
        yield error_finish(
            LlmFailure(
                message="the stream ended before the response completed",
                code="INCOMPLETE_STREAM",
                retryable=True,
                request_id=request_id,
            )
        )
