"""Restore repair (C7.2-9, EVENTS.md §2.7): close a log whose last turn never closed.

Only the last turn is repaired; malformed structure anywhere before it is refused with
``SessionCorruptError`` (``check_structure``).

A crashed process can leave the log ending inside a turn. Before a new lifecycle (resume or
fork) writes anything, the Session appends, in this order:

1. one conservative ``tool/result`` per tool call of the turn's latest assistant message
   that has no result, in model order — ``TOOL_OUTCOME_UNKNOWN`` when a ``tool/call`` was
   recorded (the body may have had effects), ``TOOL_NOT_STARTED`` when none was, or when
   the call was held for approval and never allowed (its body cannot have run);
2. ``step/end`` if a step was open;
3. ``turn/end{reason.kind: "interrupted"}``.

One exception (``plan_restore``, used by resume): a turn whose open step only waits durably
(``_waits``: client calls and input requests a transport can finish, the later calls never
started) is not closed. Its wait is not over because a process died: the resumed agent
re-enters the step, the answers become those calls' results, and the turn goes on — still
closed exactly once, by the process that finishes it. A fork child, an abandoned activity
and a log with anything else unanswered are repaired as above.

The classification is the one in-step recovery uses (``conservative_result`` is shared with
``agent/_recovery.py``, C7.10-8). Committed events are never changed; a balanced log gets
nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from .._ids import new_id
from ..errors import SessionCorruptError
from ..messages import TextBlock, ToolCallBlock, ToolResultMessage
from ._approvals import held_calls
from ._events import (
    AssistantMessageEvent,
    EventRecord,
    SessionEvent,
    StepBoundary,
    StepEnd,
    SurfaceOp,
    ToolCallEvent,
    ToolErrorInfo,
    ToolResultEvent,
    TurnEnd,
    TurnEndReason,
    TurnStart,
)
from ._waits import WaitingStep, waiting_step

__all__ = [
    "NOT_STARTED_TEXT",
    "OUTCOME_UNKNOWN_TEXT",
    "RepairEvent",
    "check_structure",
    "conservative_result",
    "plan_repair",
    "plan_restore",
]

OUTCOME_UNKNOWN_TEXT = (
    "The outcome of this tool call is unknown: it was started but its result was never "
    "recorded. Its effects may or may not have happened; verify the current state before "
    "retrying it."
)
NOT_STARTED_TEXT = "This tool call was never started: it did not run and had no effect."


def conservative_result(
    turn: int, step: int, call: ToolCallBlock, call_seq: int | None, *, held: bool = False
) -> ToolResultEvent:
    """The result written for a requested call that has no ``tool/result``.

    ``held``: the call has a ``tool/approval-requested`` and no ``allow`` decision, so its
    body never ran even though its ``tool/call`` exists.
    """
    unknown = call_seq is not None and not held
    code = "TOOL_OUTCOME_UNKNOWN" if unknown else "TOOL_NOT_STARTED"
    text = OUTCOME_UNKNOWN_TEXT if unknown else NOT_STARTED_TEXT
    return ToolResultEvent(
        turn=turn,
        step=step,
        message=ToolResultMessage(
            id=new_id("msg"), call_id=call.id, content=(TextBlock(text),), is_error=True
        ),
        error=ToolErrorInfo(code=code),
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class RepairEvent:
    """One synthetic event to append (the Session assigns seq and time)."""

    type: str
    data: EventRecord
    surface_op: SurfaceOp | None = None
    source_event_seqs: tuple[int, ...] | None = None


def check_structure(events: Sequence[SessionEvent]) -> None:
    """Refuse a log whose turns are malformed anywhere but in an open last turn.

    Only the last turn may be open (a crash; ``plan_repair`` closes it). Earlier damage —
    a turn that never ended, a turn nested in another, a step left open or outside a turn,
    a tool call of a closed step without its result — cannot be repaired without inserting
    events into committed history, so it is refused.

    Raises:
        SessionCorruptError: naming the seq of the first offending event.
    """
    open_turn: int | None = None
    open_step: StepBoundary | None = None
    unanswered: dict[str, int] = {}  # call id -> seq of the assistant message asking for it

    def corrupt(event: SessionEvent, what: str) -> SessionCorruptError:
        return SessionCorruptError(f"malformed log at seq {event.seq} ({event.type}): {what}")

    def close_step(event: SessionEvent) -> None:
        if unanswered:
            call_id, seq = next(iter(unanswered.items()))
            raise corrupt(event, f"tool call {call_id!r} of seq {seq} has no tool/result")

    for event in events:
        data = event.data
        if event.type == "turn/start" and isinstance(data, TurnStart):
            if open_turn is not None:
                raise corrupt(event, f"turn {data.turn} starts inside open turn {open_turn}")
            open_turn = data.turn
        elif event.type == "turn/end" and isinstance(data, TurnEnd):
            if data.turn != open_turn:
                raise corrupt(event, f"turn {data.turn} ends but the open turn is {open_turn}")
            if open_step is not None:
                raise corrupt(event, f"turn ends inside open step {open_step.step}")
            open_turn = None
        elif event.type == "step/start" and isinstance(data, StepBoundary):
            if open_turn is None or data.turn != open_turn:
                raise corrupt(event, f"step {data.turn}.{data.step} is outside its turn")
            if open_step is not None:
                raise corrupt(event, f"step starts inside open step {open_step.step}")
            open_step = data
        elif event.type == "step/end" and isinstance(data, StepBoundary):
            if not _same_step(data, open_step):
                raise corrupt(event, f"step {data.turn}.{data.step} ends but was not open")
            close_step(event)
            open_step = None
        elif isinstance(data, AssistantMessageEvent) and open_step is not None:
            if not data.interrupted:
                unanswered = {c.id: event.seq for c in data.message.tool_calls}
        elif isinstance(data, ToolResultEvent):
            unanswered.pop(data.message.call_id, None)


def _same_step(end: StepBoundary, start: StepBoundary | None) -> bool:
    """``end`` closes ``start`` (a ``step/end`` and a ``step/start`` are different records)."""
    return start is not None and end.turn == start.turn and end.step == start.step


def plan_repair(events: Sequence[SessionEvent]) -> list[RepairEvent]:
    """The synthetic events that close ``events``' last turn; ``[]`` when it is closed.

    Raises:
        SessionCorruptError: damage before the last turn (``check_structure``).
    """
    check_structure(events)
    return _closing(events)


def _closing(events: Sequence[SessionEvent]) -> list[RepairEvent]:
    open_turn: int | None = None
    turn_index = 0
    for index, event in enumerate(events):
        data = event.data
        if event.type == "turn/start" and isinstance(data, TurnStart):
            open_turn, turn_index = data.turn, index
        elif event.type == "turn/end" and isinstance(data, TurnEnd) and data.turn == open_turn:
            open_turn = None
    if open_turn is None:
        return []
    tail = events[turn_index + 1 :]

    open_step: StepBoundary | None = None
    message: SessionEvent | None = None
    for event in tail:
        data = event.data
        if event.type == "step/start" and isinstance(data, StepBoundary):
            open_step = data
        elif (
            event.type == "step/end"
            and isinstance(data, StepBoundary)
            and _same_step(data, open_step)
        ):
            open_step = None
        elif isinstance(data, AssistantMessageEvent) and not data.interrupted:
            message = event

    out: list[RepairEvent] = []
    if message is not None:
        assert isinstance(message.data, AssistantMessageEvent)
        requested = message.data.message.tool_calls
        call_seqs: dict[str, int] = {}
        answered: set[str] = set()
        after = [event for event in tail if event.seq > message.seq]
        for event in after:
            data = event.data
            if isinstance(data, ToolCallEvent):
                call_seqs[data.call_id] = event.seq
            elif isinstance(data, ToolResultEvent):
                answered.add(data.message.call_id)
        held = held_calls(after)
        for call in requested:
            if call.id in answered:
                continue
            call_seq = call_seqs.get(call.id)
            out.append(
                RepairEvent(
                    type="tool/result",
                    data=conservative_result(
                        message.data.turn,
                        message.data.step,
                        call,
                        call_seq,
                        held=call.id in held,
                    ),
                    surface_op="append",
                    source_event_seqs=(call_seq if call_seq is not None else message.seq,),
                )
            )
    if open_step is not None:
        out.append(
            RepairEvent(type="step/end", data=StepEnd(turn=open_step.turn, step=open_step.step))
        )
    out.append(
        RepairEvent(
            type="turn/end", data=TurnEnd(turn=open_turn, reason=TurnEndReason(kind="interrupted"))
        )
    )
    return out


def plan_restore(events: Sequence[SessionEvent]) -> tuple[list[RepairEvent], WaitingStep | None]:
    """What a resume appends before anything else, and the step it re-enters: a last turn
    whose open step only waits durably stays open (``([], step)``); any other open turn is
    repaired (``(plan_repair(events), None)``).

    Raises:
        SessionCorruptError: damage before the last turn (``check_structure``).
    """
    check_structure(events)
    waiting = waiting_step(events)
    if waiting is not None:
        return [], waiting
    return _closing(events), None
