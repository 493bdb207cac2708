"""A thread's stored log as AG-UI messages (a run's ``MESSAGES_SNAPSHOT``), and JSON readers."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ag_ui.core import AssistantMessage, FunctionCall, Message, ToolCall, ToolMessage, UserMessage

from ._agui_media import snapshot_content

__all__ = ["json_object", "messages_snapshot", "text_of"]


def json_object(value: Any) -> dict[str, Any]:
    """``value`` when it is a JSON object, else an empty one."""
    return value if isinstance(value, dict) else {}


def text_of(blocks: Any, kind: str = "text") -> str:
    """The text of the ``kind`` blocks of a stored content list."""
    if isinstance(blocks, str):
        return blocks if kind == "text" else ""
    if not isinstance(blocks, list):
        return ""
    return "".join(
        b["text"]
        for b in blocks
        if isinstance(b, dict) and b.get("type") == kind and isinstance(b.get("text"), str)
    )


def _calls_of(blocks: Any) -> list[dict[str, Any]]:
    if not isinstance(blocks, list):
        return []
    return [b for b in blocks if isinstance(b, dict) and b.get("type") == "tool-call"]


def messages_snapshot(events: Iterable[Mapping[str, Any]], session_id: str = "") -> list[Message]:
    """The conversation of a stored log as AG-UI messages, ids as the log has them: user
    messages a person sent (images and files as parts by their blob URL), the model's
    messages (text and tool calls) and tool results. Injected context, system prompts and
    reasoning are left out."""
    out: list[Message] = []
    for event in events:
        kind, data = event.get("type"), json_object(event.get("data"))
        if kind == "user/message" and json_object(data.get("source")).get("kind", "user") == "user":
            content = data.get("content")
            parts = snapshot_content(session_id, content)
            out.append(
                UserMessage(id=str(data.get("id")), content=parts if parts else text_of(content))
            )
        elif kind == "assistant/message":
            message = json_object(data.get("message"))
            text = text_of(message.get("content"))
            calls = [
                ToolCall(
                    id=str(c.get("id")),
                    function=FunctionCall(
                        name=str(c.get("name")), arguments=str(c.get("arguments"))
                    ),
                )
                for c in _calls_of(message.get("content"))
            ]
            if text or calls:
                out.append(
                    AssistantMessage(
                        id=str(message.get("id")), content=text or None, tool_calls=calls or None
                    )
                )
        elif kind == "tool/result":
            message = json_object(data.get("message"))
            error = json_object(data.get("error"))
            out.append(
                ToolMessage(
                    id=str(message.get("id")),
                    tool_call_id=str(message.get("call_id")),
                    content=text_of(message.get("content")),
                    error=str(error.get("code") or "TOOL_FAILED")
                    if message.get("is_error")
                    else None,
                )
            )
    return out
