"""The typed handles of the agent's hooks, and every handle of the loop (``LOOP_HANDLES``).

Each hook is declared once, by its handle, in the layer that emits it: ``SESSION_EVENT`` in
``session``, ``TOOLS_*`` in ``tools``, the agent's here, ``RUNTIME_CLOSING`` in ``_runtime``.
``steerloop.hooks`` re-exports them all with their payload types.
"""

from __future__ import annotations

from .._hooks import AnyHook, EmitHook, SerialHook, WaterfallHook
from ..llm._types import CallConfig
from ..session._events import SessionEvent
from ..session._session import SESSION_EVENT
from ..tools._hooks import (
    TOOLS_APPROVAL_REQUESTED,
    TOOLS_POST_EXECUTE,
    TOOLS_PRE_EXECUTE,
    TOOLS_RESULT,
)
from ._decisions import (
    AgentPayload,
    ClaimedPayload,
    CompactPayload,
    ErrorPayload,
    InboxMessagePayload,
    PreStepDecision,
    PreStepPayload,
    RequestErrorAction,
    RequestErrorPayload,
    RequestPayload,
    SessionStartPayload,
    StatusPayload,
    StreamFramePayload,
    TurnStoppingPayload,
)

__all__ = [
    "AGENT_COMPACT",
    "AGENT_CREATED",
    "AGENT_DISPOSED",
    "AGENT_ERROR",
    "ASSISTANT_STREAM",
    "INBOX_CLAIMED",
    "INBOX_DISCARDED",
    "INBOX_INSERTED",
    "LOOP_HANDLES",
    "PRE_STEP",
    "REQUEST",
    "REQUEST_ERROR",
    "SESSION_EVENT",
    "SESSION_START",
    "STATUS",
    "TOOLS_APPROVAL_REQUESTED",
    "TOOLS_POST_EXECUTE",
    "TOOLS_PRE_EXECUTE",
    "TOOLS_RESULT",
    "TURN_STOPPING",
]

AGENT_CREATED: EmitHook[AgentPayload] = EmitHook("agent/created")
AGENT_DISPOSED: EmitHook[AgentPayload] = EmitHook("agent/disposed")
STATUS: EmitHook[StatusPayload] = EmitHook("agent/status")
AGENT_ERROR: EmitHook[ErrorPayload] = EmitHook("agent/error")
SESSION_START: EmitHook[SessionStartPayload] = EmitHook("agent/session-start")
INBOX_INSERTED: EmitHook[InboxMessagePayload] = EmitHook("agent/inbox/inserted")
INBOX_CLAIMED: EmitHook[ClaimedPayload] = EmitHook("agent/inbox/claimed")
INBOX_DISCARDED: EmitHook[InboxMessagePayload] = EmitHook("agent/inbox/discarded")
ASSISTANT_STREAM: EmitHook[StreamFramePayload] = EmitHook("agent/assistant-stream")
PRE_STEP: WaterfallHook[PreStepPayload, PreStepDecision] = WaterfallHook("agent/pre-step")
REQUEST: WaterfallHook[RequestPayload, CallConfig] = WaterfallHook("agent/request")
REQUEST_ERROR: WaterfallHook[RequestErrorPayload, RequestErrorAction | None] = WaterfallHook(
    "agent/request-error"
)
TURN_STOPPING: SerialHook[TurnStoppingPayload, object] = SerialHook("agent/turn-stopping")
AGENT_COMPACT: SerialHook[CompactPayload, SessionEvent] = SerialHook("agent/compact")

LOOP_HANDLES: tuple[AnyHook, ...] = (
    AGENT_CREATED,
    AGENT_DISPOSED,
    STATUS,
    AGENT_ERROR,
    SESSION_START,
    INBOX_INSERTED,
    INBOX_CLAIMED,
    INBOX_DISCARDED,
    ASSISTANT_STREAM,
    PRE_STEP,
    REQUEST,
    REQUEST_ERROR,
    TURN_STOPPING,
    AGENT_COMPACT,
    SESSION_EVENT,
    TOOLS_PRE_EXECUTE,
    TOOLS_POST_EXECUTE,
    TOOLS_RESULT,
    TOOLS_APPROVAL_REQUESTED,
)
"""The handles of the loop's hooks (``steerloop.hooks.HANDLES`` adds ``RUNTIME_CLOSING``)."""
