"""What the loop uses, as one frozen record built by ``Runtime`` (issue 12, item 2).

The driver, the step and the scheduler read ``agent.services`` instead of reaching into the
runtime, so what a turn can touch is listed here and nowhere else.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass

from .._hooks import HookBus
from .._ids import Clock
from .._media import DEFAULT_LIMITS, AttachmentLimits
from ..llm._runtime import LlmService
from ..prompt import SystemPromptService
from ..tools._runtime import ToolPipeline, ToolRegistry

__all__ = ["LoopLimits", "LoopServices"]


class LoopLimits:
    """Limits the host may change while agents run (read when a tool group begins)."""

    __slots__ = ("attachments", "max_parallel_tool_calls", "reconcile_timeout")

    def __init__(
        self,
        max_parallel_tool_calls: int,
        reconcile_timeout: float = 10.0,
        attachments: AttachmentLimits = DEFAULT_LIMITS,
    ) -> None:
        self.max_parallel_tool_calls = max_parallel_tool_calls
        self.reconcile_timeout = reconcile_timeout
        """Seconds a tool's ``reconcile`` may take at recovery before the call stays unknown."""
        self.attachments = attachments


@dataclass(frozen=True, slots=True)
class LoopServices:
    """The services of one runtime as the loop sees them."""

    hooks: HookBus
    llm: LlmService
    tools: ToolRegistry
    pipeline: ToolPipeline
    prompt: SystemPromptService
    clock: Clock
    ids: Callable[[str], str]
    limits: LoopLimits
    # Frame revisions: process-local, one counter per runtime, never persisted (C7.6-19).
    revisions: itertools.count[int]
