"""The public payload records of the durable event types (EVENTS.md §2).

One record per type; each names its type in ``TYPE`` (``events.TurnEnd.TYPE == "turn/end"``),
so code reading a log (``event.data``) or writing one (``session.append(record)``) needs no
private import.
"""

from __future__ import annotations

from ..messages import UserMessage
from ._events import (
    ApprovalDecided,
    ApprovalRequested,
    AssistantAttempt,
    AssistantMessageEvent,
    ContextCompacted,
    EventRecord,
    InboxSpliced,
    Replace,
    RequestContext,
    RequestHeader,
    SessionEndSeed,
    SessionEvent,
    StateChanged,
    StepBoundary,
    StepEnd,
    StepStart,
    StreamRecord,
    SurfaceOp,
    SystemMessageEvent,
    ToolCallEvent,
    ToolDeferred,
    ToolErrorInfo,
    ToolResultEvent,
    TurnEnd,
    TurnEndReason,
    TurnOutput,
    TurnStart,
)
from ._input_events import (
    InputAnswered,
    InputRequest,
    MCPResourceUpdated,
    MCPSampled,
    MCPTaskCreated,
)

__all__ = [
    "ApprovalDecided",
    "ApprovalRequested",
    "AssistantAttempt",
    "AssistantMessageEvent",
    "ContextCompacted",
    "EventRecord",
    "InboxSpliced",
    "InputAnswered",
    "InputRequest",
    "MCPResourceUpdated",
    "MCPSampled",
    "MCPTaskCreated",
    "Replace",
    "RequestContext",
    "RequestHeader",
    "SessionEndSeed",
    "SessionEvent",
    "StateChanged",
    "StepBoundary",
    "StepEnd",
    "StepStart",
    "StreamRecord",
    "SurfaceOp",
    "SystemMessageEvent",
    "ToolCallEvent",
    "ToolDeferred",
    "ToolErrorInfo",
    "ToolResultEvent",
    "TurnEnd",
    "TurnEndReason",
    "TurnOutput",
    "TurnStart",
    "UserMessage",
]
