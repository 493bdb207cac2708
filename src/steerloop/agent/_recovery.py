"""Failed-step recovery (§7.10): answer every requested tool call that has no result.

The tracker observes the session only while its step is open, so a ``tool/call`` or
``tool/result`` recorded by any writer during the step counts. Classification is shared
with restore repair: a call with a ``tool/call`` event gets ``TOOL_OUTCOME_UNKNOWN`` (it may
have had effects), one without gets ``TOOL_NOT_STARTED``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._ids import new_id
from ..messages import TextBlock, ToolCallBlock, ToolResultMessage
from ..session._events import (
    AssistantMessageEvent,
    SessionEvent,
    ToolCallEvent,
    ToolErrorInfo,
    ToolResultEvent,
)

if TYPE_CHECKING:
    from ..session._session import Session

__all__ = ["NOT_STARTED_TEXT", "OUTCOME_UNKNOWN_TEXT", "ToolCallTracker", "conservative_result"]

OUTCOME_UNKNOWN_TEXT = (
    "The outcome of this tool call is unknown: it was started but its result was never "
    "recorded. Its effects may or may not have happened; verify the current state before "
    "retrying it."
)
NOT_STARTED_TEXT = "This tool call was never started: it did not run and had no effect."


def conservative_result(
    turn: int, step: int, call: ToolCallBlock, call_seq: int | None
) -> ToolResultEvent:
    """The result written for a requested call that has no ``tool/result``."""
    code = "TOOL_OUTCOME_UNKNOWN" if call_seq is not None else "TOOL_NOT_STARTED"
    text = OUTCOME_UNKNOWN_TEXT if call_seq is not None else NOT_STARTED_TEXT
    return ToolResultEvent(
        turn=turn,
        step=step,
        message=ToolResultMessage(
            id=new_id("msg"), call_id=call.id, content=(TextBlock(text),), is_error=True
        ),
        error=ToolErrorInfo(code=code),
    )


class ToolCallTracker:
    """Which calls of the open step were requested, started and answered."""

    def __init__(self, session: Session) -> None:
        self._session = session
        self.requested: list[ToolCallBlock] = []
        self.message_seq: int | None = None
        self.call_seqs: dict[str, int] = {}
        self.answered: set[str] = set()
        self._dispose = session.observe(self._see)

    def _see(self, event: SessionEvent) -> None:
        data = event.data
        if isinstance(data, AssistantMessageEvent) and not data.interrupted:
            self.requested = list(data.message.tool_calls)
            self.message_seq = event.seq
        elif isinstance(data, ToolCallEvent):
            self.call_seqs[data.call_id] = event.seq
        elif isinstance(data, ToolResultEvent):
            self.answered.add(data.message.call_id)

    def close(self) -> None:
        self._dispose()

    def unanswered(self) -> list[ToolCallBlock]:
        return [c for c in self.requested if c.id not in self.answered]

    def recover(self, turn: int, step: int) -> None:
        """Append a conservative result for each unanswered call, in model order."""
        for call in self.unanswered():
            call_seq = self.call_seqs.get(call.id)
            source = call_seq if call_seq is not None else self.message_seq
            self._session.append(
                "tool/result",
                conservative_result(turn, step, call, call_seq),
                surface_op="append",
                source_event_seqs=(source,) if source is not None else None,
            )
