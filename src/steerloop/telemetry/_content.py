"""Message content in the GenAI conventions' JSON shape, redacted (capture_content only)."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any

from ..llm import redact
from ..messages import ReasoningBlock, TextBlock, ToolCallBlock

__all__ = ["input_messages", "output_messages", "redacted", "text_of"]


def redacted(text: str) -> str:
    """``text`` without anything shaped like a secret (the adapters' own redaction)."""
    return redact(text, None)


def _parts(blocks: Iterable[Any]) -> list[dict[str, Any]]:
    parts: list[dict[str, Any]] = []
    for block in blocks:
        if isinstance(block, TextBlock):
            parts.append({"type": "text", "content": block.text})
        elif isinstance(block, ReasoningBlock):
            parts.append({"type": "reasoning", "content": block.text})
        elif isinstance(block, ToolCallBlock):
            parts.append(
                {
                    "type": "tool_call",
                    "id": block.id,
                    "name": block.name,
                    "arguments": block.arguments,
                }
            )
    return parts


def _message(message: Any) -> dict[str, Any]:
    role = getattr(message, "role", "user")
    if role == "tool":
        response = text_of(message.content)
        return {
            "role": "tool",
            "parts": [{"type": "tool_call_response", "id": message.call_id, "response": response}],
        }
    return {"role": role, "parts": _parts(message.content)}


def _dump(value: Any) -> str:
    return redacted(json.dumps(value, ensure_ascii=False, separators=(",", ":")))


def input_messages(messages: Sequence[Any]) -> str:
    """``gen_ai.input.messages``: the model-visible history of one request."""
    return _dump([_message(m) for m in messages])


def output_messages(message: Any, finish_reason: str) -> str:
    """``gen_ai.output.messages``: the assistant message of one attempt."""
    return _dump(
        [{"role": "assistant", "parts": _parts(message.content), "finish_reason": finish_reason}]
    )


def text_of(content: Any) -> str:
    """The text of a tool result's content (a string or blocks)."""
    if isinstance(content, str):
        return content
    return "\n".join(b.text for b in content if isinstance(b, TextBlock))
