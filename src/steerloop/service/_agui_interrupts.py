"""The interrupts that end an AG-UI run on calls waiting for the client: approvals, client tools."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ag_ui.core import Interrupt

__all__ = [
    "APPROVAL_REASON",
    "APPROVAL_SCHEMA",
    "CLIENT_TOOL_REASON",
    "approval_interrupt",
    "client_interrupt",
]

APPROVAL_REASON = "tool_approval"
"""``Interrupt.reason`` of a call held for a person's decision."""
CLIENT_TOOL_REASON = "client_tool"
"""``Interrupt.reason`` of a call to a client tool: the client runs it."""
APPROVAL_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "decision": {"enum": ["allow", "deny"]},
        "reason": {"type": "string", "maxLength": 4096},
    },
    "required": ["decision"],
    "additionalProperties": False,
}
"""The ``resume`` payload an approval interrupt expects."""


def approval_interrupt(data: Mapping[str, Any]) -> Interrupt:
    """The interrupt of a ``tool/approval-requested``: the call, its arguments, the reason."""
    call_id = str(data.get("call_id"))
    reason = data.get("reason")
    return Interrupt(
        id=call_id,
        reason=APPROVAL_REASON,
        message=str(reason) if reason else f"allow the call to {data.get('name')}?",
        tool_call_id=call_id,
        response_schema=APPROVAL_SCHEMA,
        metadata={"tool": data.get("name"), "arguments": data.get("arguments")},
    )


def client_interrupt(data: Mapping[str, Any]) -> Interrupt:
    """The interrupt of a ``tool/deferred``: the client runs the call and resumes with its
    result (a tool message, or a ``resume`` payload)."""
    call_id = str(data.get("call_id"))
    return Interrupt(
        id=call_id,
        reason=CLIENT_TOOL_REASON,
        message=f"run the client tool {data.get('name')} and resume with its result",
        tool_call_id=call_id,
        metadata={"tool": data.get("name"), "arguments": data.get("arguments")},
    )
