"""The runtime's hooks, public: ``rt.hooks.on(hooks.PRE_STEP, listener)``.

Each hook is declared once, by its typed handle: the hook's name (a ``str`` at run time, so
the string names of API.md still register the same listeners) carrying its mode and its
payload and result types, so a type checker checks a listener, and an emission, against the
hook. Every payload type is here too: a plugin needs no private module to name one.

A plugin declares its own hook the same way (``LLM_RETRY: EmitHook[RetryNotice] =
EmitHook("llm/retry")``), has the bus learn it with ``rt.hooks.define(LLM_RETRY)`` and emits
through the handle.
"""

from __future__ import annotations

from ._hooks import (
    AnyHook,
    Disposer,
    EmitHook,
    EmitListener,
    HookBus,
    HookMode,
    HookPayload,
    SerialHook,
    SerialListener,
    WaterfallHook,
    WaterfallListener,
)
from ._runtime import HANDLES, RUNTIME_CLOSING, RuntimeClosing
from .agent._decisions import (
    AgentPayload,
    ClaimedPayload,
    CompactPayload,
    ErrorPayload,
    InboxMessagePayload,
    OfAgent,
    PreStepDecision,
    PreStepPayload,
    RequestErrorAction,
    RequestErrorPayload,
    RequestPayload,
    SessionStartPayload,
    StatusPayload,
    StreamFrame,
    StreamFramePayload,
    TurnStoppingPayload,
)
from .agent._handles import (
    AGENT_COMPACT,
    AGENT_CREATED,
    AGENT_DISPOSED,
    AGENT_ERROR,
    ASSISTANT_STREAM,
    INBOX_CLAIMED,
    INBOX_DISCARDED,
    INBOX_INSERTED,
    LOOP_HANDLES,
    PRE_STEP,
    REQUEST,
    REQUEST_ERROR,
    SESSION_START,
    STATUS,
    TURN_STOPPING,
)
from .session._session import SESSION_EVENT, SessionEventPayload
from .tools._agent_ref import AgentRef
from .tools._hooks import (
    TOOLS_APPROVAL_REQUESTED,
    TOOLS_POST_EXECUTE,
    TOOLS_PRE_EXECUTE,
    TOOLS_RESULT,
    ApprovalHookPayload,
    ToolHookPayload,
)

__all__ = [
    "AGENT_COMPACT",
    "AGENT_CREATED",
    "AGENT_DISPOSED",
    "AGENT_ERROR",
    "ASSISTANT_STREAM",
    "HANDLES",
    "INBOX_CLAIMED",
    "INBOX_DISCARDED",
    "INBOX_INSERTED",
    "LOOP_HANDLES",
    "PRE_STEP",
    "REQUEST",
    "REQUEST_ERROR",
    "RUNTIME_CLOSING",
    "SESSION_EVENT",
    "SESSION_START",
    "STATUS",
    "TOOLS_APPROVAL_REQUESTED",
    "TOOLS_POST_EXECUTE",
    "TOOLS_PRE_EXECUTE",
    "TOOLS_RESULT",
    "TURN_STOPPING",
    "AgentPayload",
    "AgentRef",
    "AnyHook",
    "ApprovalHookPayload",
    "ClaimedPayload",
    "CompactPayload",
    "Disposer",
    "EmitHook",
    "EmitListener",
    "ErrorPayload",
    "HookBus",
    "HookMode",
    "HookPayload",
    "InboxMessagePayload",
    "OfAgent",
    "PreStepDecision",
    "PreStepPayload",
    "RequestErrorAction",
    "RequestErrorPayload",
    "RequestPayload",
    "RuntimeClosing",
    "SerialHook",
    "SerialListener",
    "SessionEventPayload",
    "SessionStartPayload",
    "StatusPayload",
    "StreamFrame",
    "StreamFramePayload",
    "ToolHookPayload",
    "TurnStoppingPayload",
    "WaterfallHook",
    "WaterfallListener",
]
