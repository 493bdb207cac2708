"""Typed handles of the runtime's hooks: ``rt.hooks.on(hooks.PRE_STEP, listener)``.

Each handle is the hook's name (a ``str``: the string names of API.md still work) carrying its
payload and result types and its mode, so a type checker checks a listener against the hook.
"""

from __future__ import annotations

from typing import Any

from ._hooks import EmitHook, HookPayload, SerialHook, WaterfallHook
from ._runtime import RuntimeClosing
from .agent._handles import (
    AGENT_COMPACT,
    AGENT_CREATED,
    AGENT_DISPOSED,
    AGENT_ERROR,
    ASSISTANT_STREAM,
    INBOX_CLAIMED,
    INBOX_DISCARDED,
    INBOX_INSERTED,
    PRE_STEP,
    REQUEST,
    REQUEST_ERROR,
    SESSION_EVENT,
    SESSION_START,
    STATUS,
    TOOLS_POST_EXECUTE,
    TOOLS_PRE_EXECUTE,
    TOOLS_RESULT,
    TURN_STOPPING,
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
    "PRE_STEP",
    "REQUEST",
    "REQUEST_ERROR",
    "RUNTIME_CLOSING",
    "SESSION_EVENT",
    "SESSION_START",
    "STATUS",
    "TOOLS_POST_EXECUTE",
    "TOOLS_PRE_EXECUTE",
    "TOOLS_RESULT",
    "TURN_STOPPING",
    "HookPayload",
    "RuntimeClosing",
]

RUNTIME_CLOSING: EmitHook[RuntimeClosing] = EmitHook("runtime/closing")

HANDLES: tuple[EmitHook[Any] | SerialHook[Any, Any] | WaterfallHook[Any, Any], ...] = (
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
    RUNTIME_CLOSING,
)
"""Every handle, one per hook of the runtime."""
