"""OpenAI chat-completions server-sent events, as the API streams them.

One builder per kind of event (``chunk``, ``usage``, ``DONE``) and the event sequences of
whole answers (text, a tool call), to be served by ``tests.llm.sse_server``. Used by the
adapter tests (``tests/llm``) and the command-line tests (``tests/cli``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from .sse_server import Reply, sse, sse_reply

__all__ = [
    "DONE",
    "chunk",
    "text_events",
    "text_reply",
    "tool_call_events",
    "tool_delta",
    "usage",
]


def chunk(
    delta: dict[str, Any] | None = None,
    finish: str | None = None,
    *,
    usage: dict[str, Any] | None = None,
    model: str = "m",
    **extra: Any,
) -> bytes:
    """One ``chat.completion.chunk`` event (no choice when neither ``delta`` nor ``finish``)."""
    body: dict[str, Any] = {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": model,
        "choices": [],
        **extra,
    }
    if delta is not None or finish is not None:
        body["choices"] = [{"index": 0, "delta": delta or {}, "finish_reason": finish}]
    if usage is not None:
        body["usage"] = usage
    return sse(body)


def usage(
    prompt: int, completion: int, cached: int | None = None, reasoning: int | None = None
) -> bytes:
    """The usage chunk; the token details are sent when ``cached`` or ``reasoning`` is given."""
    body: dict[str, Any] = {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }
    if cached is not None or reasoning is not None:
        body["prompt_tokens_details"] = {"cached_tokens": cached or 0}
        body["completion_tokens_details"] = {"reasoning_tokens": reasoning or 0}
    return chunk(usage=body)


DONE = sse("[DONE]")


def text_events(*pieces: str) -> list[bytes]:
    """The role chunk, then one content chunk per piece."""
    return [chunk({"role": "assistant", "content": ""}), *(chunk({"content": p}) for p in pieces)]


def text_reply(
    *pieces: str,
    finish: str = "stop",
    prompt_tokens: int = 10,
    completion_tokens: int | None = None,
    cached: int | None = None,
    reasoning: int | None = None,
    **kwargs: Any,
) -> Reply:
    """A complete streamed text answer with usage (``completion_tokens`` defaults to the
    number of pieces; ``kwargs`` go to ``sse_reply``)."""
    out = len(pieces) if completion_tokens is None else completion_tokens
    return sse_reply(
        [
            *text_events(*pieces),
            chunk({}, finish),
            usage(prompt_tokens, out, cached, reasoning),
            DONE,
        ],
        **kwargs,
    )


def tool_delta(index: int, **fields: Any) -> bytes:
    """A ``tool_calls`` delta of call ``index``; an ``id`` field opens the call."""
    call: dict[str, Any] = {"index": index}
    if "id" in fields:
        call["id"] = fields.pop("id")
        call["type"] = "function"
    call["function"] = fields
    return chunk({"tool_calls": [call]})


def tool_call_events(call_id: str, name: str, args: Mapping[str, Any]) -> list[bytes]:
    """One tool call whose arguments arrive in two halves, then its finish and usage."""
    raw = json.dumps(args)
    half = len(raw) // 2
    return [
        tool_delta(0, id=call_id, name=name, arguments=raw[:half]),
        tool_delta(0, arguments=raw[half:]),
        chunk({}, "tool_calls"),
        usage(20, 9),
        DONE,
    ]
