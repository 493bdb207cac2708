"""The tool pipeline's hooks: their payloads and their typed handles (one declaration each).

``steerloop.hooks`` re-exports them with the loop's other hooks.
"""

from __future__ import annotations

from dataclasses import dataclass

from .._hooks import EmitHook, SerialHook, WaterfallHook
from .._records import fast_init
from ..session._events import ApprovalRequested
from ._define import PostExecute, ToolDecision, ToolExec, ToolResult

__all__ = [
    "TOOLS_APPROVAL_REQUESTED",
    "TOOLS_POST_EXECUTE",
    "TOOLS_PRE_EXECUTE",
    "TOOLS_RESULT",
    "ApprovalHookPayload",
    "ToolHookPayload",
]


@fast_init
@dataclass(frozen=True, slots=True)
class ToolHookPayload:
    """Payload of ``tools/pre-execute`` (``result`` is ``None``), ``post-execute``, ``result``."""

    exec: ToolExec
    result: ToolResult | None = None

    @property
    def owner(self) -> str:
        """The id of the agent whose tool call this is (``HookPayload``)."""
        return self.exec.agent.id


@fast_init
@dataclass(frozen=True, slots=True)
class ApprovalHookPayload:
    """Payload of ``tools/approval-requested``: the held call, its request record and the
    request's seq. An answerer calls ``agent.decide_approval(exec.call_id, ...)``."""

    exec: ToolExec
    request: ApprovalRequested
    seq: int

    @property
    def owner(self) -> str:
        """The id of the agent whose call waits (``HookPayload``)."""
        return self.exec.agent.id


TOOLS_PRE_EXECUTE: SerialHook[ToolHookPayload, ToolDecision] = SerialHook("tools/pre-execute")
TOOLS_POST_EXECUTE: WaterfallHook[ToolHookPayload, PostExecute] = WaterfallHook(
    "tools/post-execute"
)
TOOLS_RESULT: EmitHook[ToolHookPayload] = EmitHook("tools/result")
# After a call's tool/approval-requested is written: answerers (a terminal prompt, a
# callback) call agent.decide_approval.
TOOLS_APPROVAL_REQUESTED: EmitHook[ApprovalHookPayload] = EmitHook("tools/approval-requested")
