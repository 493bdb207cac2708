"""Folds of the approval events (EVENTS.md §2.4a): which requests are still waiting.

A request is pending from its ``tool/approval-requested`` until its
``tool/approval-decided`` or its call's ``tool/result`` (a cancel or a crash repair answers
the call without a decision). Pure functions of the log, so a service can list the pending
approvals of a session that is not loaded from its stored events alone.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal

from ._events import ApprovalDecided, ApprovalRequested, SessionEvent, ToolResultEvent

__all__ = ["ApprovalState", "approval_state", "held_calls", "pending_approvals"]

ApprovalState = Literal["pending", "decided", "closed", "unknown"]
"""``pending``: waiting; ``decided``: answered; ``closed``: answered by its call's result
without a decision (cancelled, or repaired after a crash); ``unknown``: never requested."""


def pending_approvals(events: Iterable[SessionEvent]) -> tuple[ApprovalRequested, ...]:
    """The ``tool/approval-requested`` records still waiting for a decision, in log order."""
    pending: dict[str, ApprovalRequested] = {}
    for event in events:
        data = event.data
        if isinstance(data, ApprovalRequested):
            pending[data.call_id] = data
        elif isinstance(data, ApprovalDecided):
            pending.pop(data.call_id, None)
        elif isinstance(data, ToolResultEvent) and pending:
            pending.pop(data.message.call_id, None)
    return tuple(pending.values())


def held_calls(events: Iterable[SessionEvent]) -> set[str]:
    """The calls asked about and never allowed: their bodies cannot have run, so a repair
    answers them ``TOOL_NOT_STARTED`` even though their ``tool/call`` exists."""
    held: set[str] = set()
    for event in events:
        data = event.data
        if isinstance(data, ApprovalRequested):
            held.add(data.call_id)
        elif isinstance(data, ApprovalDecided) and data.decision == "allow":
            held.discard(data.call_id)
    return held


def approval_state(events: Iterable[SessionEvent], call_id: str) -> ApprovalState:
    """Where the latest approval request of ``call_id`` stands."""
    state: ApprovalState = "unknown"
    for event in events:
        data = event.data
        if isinstance(data, ApprovalRequested) and data.call_id == call_id:
            state = "pending"
        elif isinstance(data, ApprovalDecided) and data.call_id == call_id:
            state = "decided"
        elif (
            isinstance(data, ToolResultEvent)
            and data.message.call_id == call_id
            and state == "pending"
        ):
            state = "closed"
    return state
