"""Anthropic Messages API server-sent events, written as the API writes them.

Builders for the event sequence of one streamed message (``message_start``,
``content_block_start`` / ``_delta`` / ``_stop``, ``message_delta``, ``message_stop``, ``ping``,
``error``), to be served by ``tests.llm.sse_server``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .sse_server import Reply, json_reply, sse, sse_reply

MODEL = "claude-sonnet-4-6"


def event(data: dict[str, Any]) -> bytes:
    return sse(data, event=data["type"])


def message_start(
    input_tokens: int = 10,
    *,
    output_tokens: int = 1,
    cache_read: int | None = None,
    cache_write: int | None = None,
    id: str = "msg_01",
) -> bytes:
    usage: dict[str, Any] = {"input_tokens": input_tokens, "output_tokens": output_tokens}
    if cache_read is not None:
        usage["cache_read_input_tokens"] = cache_read
    if cache_write is not None:
        usage["cache_creation_input_tokens"] = cache_write
    return event(
        {
            "type": "message_start",
            "message": {
                "id": id,
                "type": "message",
                "role": "assistant",
                "model": MODEL,
                "content": [],
                "stop_reason": None,
                "stop_sequence": None,
                "usage": usage,
            },
        }
    )


def ping() -> bytes:
    return event({"type": "ping"})


def block_start(index: int, block: dict[str, Any]) -> bytes:
    return event({"type": "content_block_start", "index": index, "content_block": block})


def delta(index: int, body: dict[str, Any]) -> bytes:
    return event({"type": "content_block_delta", "index": index, "delta": body})


def block_stop(index: int) -> bytes:
    return event({"type": "content_block_stop", "index": index})


def text(index: int, *pieces: str) -> list[bytes]:
    return [
        block_start(index, {"type": "text", "text": ""}),
        *(delta(index, {"type": "text_delta", "text": p}) for p in pieces),
        block_stop(index),
    ]


def thinking(index: int, pieces: Sequence[str], signature: str | None) -> list[bytes]:
    out = [
        block_start(index, {"type": "thinking", "thinking": "", "signature": ""}),
        *(delta(index, {"type": "thinking_delta", "thinking": p}) for p in pieces),
    ]
    if signature is not None:
        out.append(delta(index, {"type": "signature_delta", "signature": signature}))
    return [*out, block_stop(index)]


def redacted_thinking(index: int, data: str) -> list[bytes]:
    return [block_start(index, {"type": "redacted_thinking", "data": data}), block_stop(index)]


def tool_use(index: int, id: str, name: str, *json_pieces: str, stop: bool = True) -> list[bytes]:
    out = [
        block_start(index, {"type": "tool_use", "id": id, "name": name, "input": {}}),
        delta(index, {"type": "input_json_delta", "partial_json": ""}),
        *(delta(index, {"type": "input_json_delta", "partial_json": p}) for p in json_pieces),
    ]
    return [*out, block_stop(index)] if stop else out


def message_delta(stop_reason: str, output_tokens: int = 20) -> bytes:
    return event(
        {
            "type": "message_delta",
            "delta": {"stop_reason": stop_reason, "stop_sequence": None},
            "usage": {"output_tokens": output_tokens},
        }
    )


def message_stop() -> bytes:
    return event({"type": "message_stop"})


def error_event(error_type: str, message: str) -> bytes:
    return event({"type": "error", "error": {"type": error_type, "message": message}})


def message(
    *blocks: list[bytes],
    stop_reason: str = "end_turn",
    output_tokens: int = 20,
    **start: Any,
) -> list[bytes]:
    """A whole streamed message: start, a ping, the blocks, the delta and the stop."""
    body = [b for block in blocks for b in block]
    return [
        message_start(**start),
        ping(),
        *body,
        message_delta(stop_reason, output_tokens),
        message_stop(),
    ]


def streamed(events: Sequence[bytes], **kwargs: Any) -> Reply:
    headers = {"request-id": "req_stream", **kwargs.pop("headers", {})}
    return sse_reply(events, headers=headers, **kwargs)


def api_error(
    status: int, error_type: str, message: str, headers: dict[str, str] | None = None
) -> Reply:
    return json_reply(
        status,
        {"type": "error", "error": {"type": error_type, "message": message}},
        headers={"request-id": f"req_{status}", **(headers or {})},
    )
