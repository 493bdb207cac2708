"""Typed handles of the runtime's hooks: ``rt.hooks.on(hooks.PRE_STEP, listener)``.

Each handle is the hook's name (a ``str``: the string names of API.md still work) carrying its
payload and result types and its mode, so a type checker checks a listener against the hook.
"""

from __future__ import annotations

from typing import Any

from ._hooks import EmitHook, HookPayload, SerialHook, WaterfallHook
from ._runtime import RuntimeClosing
from .agent import _handles
from .agent._handles import *  # noqa: F403 - the loop's handles, named in its __all__

__all__ = ["HANDLES", "RUNTIME_CLOSING", "HookPayload", "RuntimeClosing"]
__all__ += _handles.__all__

RUNTIME_CLOSING: EmitHook[RuntimeClosing] = EmitHook("runtime/closing")

HANDLES: tuple[EmitHook[Any] | SerialHook[Any, Any] | WaterfallHook[Any, Any], ...] = (
    *_handles.LOOP_HANDLES,
    RUNTIME_CLOSING,
)
"""Every handle, one per hook of the runtime."""
