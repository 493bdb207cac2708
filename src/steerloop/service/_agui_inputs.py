"""Input requests in AG-UI 1.0: a pending ``input/requested`` (an MCP server asks the user
during a call) ends a run with an interrupt, and a ``resume`` entry answers it.

The interrupt is named by the input's id and carries its message; ``responseSchema`` is what
the resume payload must be: ``{"action": "accept" | "decline" | "cancel", "content"?: …}``
with ``content`` the server's requested schema. The answer goes through the same path as
``POST /v1/sessions/{id}/inputs/{input_id}`` (``host.submit_input``): one check, one command,
one ``input/answered`` event.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ag_ui.core import Interrupt, ResumeEntry

from ..session import InputAction
from ._errors import ApiError

__all__ = ["INPUT_REASON", "input_interrupt", "input_resume", "resume_schema"]

INPUT_REASON = "input_request"
"""``Interrupt.reason`` of a question an MCP server asks the user during a call."""

_ACTIONS = ("accept", "decline", "cancel")


def resume_schema(requested: Any) -> dict[str, Any]:
    """The ``resume`` payload an input interrupt expects, around the requested schema."""
    properties: dict[str, Any] = {"action": {"enum": list(_ACTIONS)}}
    if isinstance(requested, Mapping):
        properties["content"] = dict(requested)
    return {
        "type": "object",
        "properties": properties,
        "required": ["action"],
        "additionalProperties": False,
    }


def input_interrupt(data: Mapping[str, Any]) -> Interrupt:
    """The interrupt of an ``input/requested`` (its stored JSON data)."""
    call_id = data.get("call_id")
    metadata = {"server": data.get("server"), "kind": data.get("kind") or "elicitation"}
    if data.get("url"):
        metadata["url"] = data.get("url")
    return Interrupt(
        id=str(data.get("id")),
        reason=INPUT_REASON,
        message=str(data.get("message") or ""),
        tool_call_id=str(call_id) if call_id else None,
        response_schema=resume_schema(data.get("schema")),
        metadata=metadata,
    )


def input_resume(entry: ResumeEntry) -> tuple[InputAction, dict[str, Any] | None]:
    """``(action, content)`` of a resume entry answering an input interrupt; a
    ``cancelled`` entry is a ``cancel``. The content is checked against the requested
    schema where the answer is submitted.

    Raises:
        ApiError: 422 ``invalid_resume`` for a payload of another shape.
    """
    if entry.status == "cancelled":
        return "cancel", None
    payload = entry.payload
    if isinstance(payload, Mapping) and not set(payload) - {"action", "content"}:
        action, content = payload.get("action"), payload.get("content")
        if action in _ACTIONS and (content is None or isinstance(content, dict)):
            return action, content
    raise ApiError(
        422,
        "invalid_resume",
        'an input request is resumed with {"action": "accept" | "decline" | "cancel", '
        '"content"?: object}',
    )
