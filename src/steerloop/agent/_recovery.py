"""Failed-step recovery (§7.10): answer every requested tool call that has no result.

The tracker observes the session only while its step is open, so a ``tool/call`` or
``tool/result`` recorded by any writer during the step counts. Classification is shared
with restore repair: a call with a ``tool/call`` event gets ``TOOL_OUTCOME_UNKNOWN`` (it may
have had effects), one without gets ``TOOL_NOT_STARTED``, and so does one held for approval
and never allowed. Before an unknown result is written, the call's tool may reconcile it
(``_reconcile``), as restore repair does.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from ..messages import ToolCallBlock
from ..session._approvals import held_calls
from ..session._events import (
    AssistantMessageEvent,
    SessionEvent,
    ToolCallEvent,
    ToolResultEvent,
)
from ..session._repair import NOT_STARTED_TEXT, OUTCOME_UNKNOWN_TEXT, conservative_result
from ._reconcile import reconcile_call

if TYPE_CHECKING:
    from ..session._session import Session
    from ._loop_agent import LoopAgent as Agent

__all__ = ["NOT_STARTED_TEXT", "OUTCOME_UNKNOWN_TEXT", "ToolCallTracker", "conservative_result"]


class ToolCallTracker:
    """Which calls of the open step were requested, started and answered."""

    def __init__(self, session: Session) -> None:
        self._session = session
        self.requested: list[ToolCallBlock] = []
        self.message_seq: int | None = None
        self.call_seqs: dict[str, int] = {}
        self.answered: set[str] = set()
        self.reconciled: dict[str, ToolResultEvent] = {}
        session.observe(self._see)

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
        self._session.unobserve(self._see)

    def unanswered(self) -> list[ToolCallBlock]:
        return [c for c in self.requested if c.id not in self.answered]

    def _held(self) -> set[str]:
        # Derived here, not tracked per event: recovery is rare, events are not.
        if self.message_seq is None:
            return set()
        return held_calls(self._session.events[self.message_seq :])

    async def reconcile(self, agent: Agent) -> BaseException | None:
        """Ask the tools of the calls ``recover`` would answer unknown (``_reconcile``); their
        answers replace those results. Returns the host's exception (a cancel of the driver,
        Ctrl-C) if one interrupted the asking: ``recover`` must still run before it goes on."""
        held = self._held()
        session = self._session
        unknown = [
            data
            for call in self.unanswered()
            if call.id in self.call_seqs
            and call.id not in held
            and isinstance(data := session.event(self.call_seqs[call.id]).data, ToolCallEvent)
        ]
        if not unknown or not session.lease_valid():  # a failed writer stores nothing more
            return None
        try:
            answers = await asyncio.gather(*(reconcile_call(agent, data) for data in unknown))
        except BaseException as exc:  # only the host's own: reconcile_call contains the rest
            return exc
        for answer in answers:
            if answer is not None:
                self.reconciled[answer.message.call_id] = answer
        return None

    def recover(self, turn: int, step: int) -> None:
        """Append a conservative (or reconciled) result for each unanswered call, in model
        order."""
        unanswered = self.unanswered()
        held = self._held() if unanswered else set()
        for call in unanswered:
            call_seq = self.call_seqs.get(call.id)
            source = call_seq if call_seq is not None else self.message_seq
            result = self.reconciled.get(call.id) if call.id not in held else None
            self._session.append(
                result or conservative_result(turn, step, call, call_seq, held=call.id in held),
                surface_op="append",
                source_event_seqs=(source,) if source is not None else None,
            )
