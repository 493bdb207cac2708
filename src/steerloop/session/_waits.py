"""Durable waits: started tool calls that wait for an answer from outside the process, read
from the log alone, so that a crash or another worker does not end the wait.

Two kinds:

* a **client call** — a client tool's call whose body handed it to the client
  (``tool/deferred``): its result comes with the client's next run;
* an **input wait** — a call whose tool's server asked a person (``input/requested``) and
  whose transport recorded how to finish the call with the answer (``resume``, opaque state:
  the 2026-07-28 stateless rounds). The latest request of the call decides; it may be
  answered already (``input/answered`` is durable) when the process died before the call
  finished with it.

``waiting_step`` finds the open step a crash left waiting: the last turn never ended, its
open step's assistant message asked for calls, the calls answered so far are the first ones
in model order (results commit in model order), the started calls after them all wait
durably (none held for an approval nobody allowed), and the calls after those never
started. Restore repair keeps such a turn open and the resumed agent re-enters the step
(``agent/_waits``); anything else is closed as C7.2-9 says.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from .._model import Finish
from ..messages import ToolCallBlock
from ._approvals import held_calls
from ._events import (
    AssistantMessageEvent,
    SessionEvent,
    StepBoundary,
    ToolCallEvent,
    ToolDeferred,
    ToolResultEvent,
)
from ._input_events import InputAnswered, InputRequest

__all__ = ["ClientWait", "DurableWait", "InputWait", "WaitingStep", "waiting_step"]


@dataclass(frozen=True, slots=True, kw_only=True)
class ClientWait:
    """A client call waiting for the client's result (its ``tool/deferred``)."""

    kind: Literal["client"] = "client"
    call: ToolCallEvent
    call_seq: int
    deferred: ToolDeferred


@dataclass(frozen=True, slots=True, kw_only=True)
class InputWait:
    """A call waiting for a person's answer that its transport can finish it with."""

    kind: Literal["input"] = "input"
    call: ToolCallEvent
    call_seq: int
    request: InputRequest
    answer: InputAnswered | None = None  # already answered: only the finishing is owed


DurableWait = ClientWait | InputWait


@dataclass(frozen=True, slots=True, kw_only=True)
class WaitingStep:
    """The open step of a crashed turn whose unanswered calls all wait durably.

    ``calls[:committed]`` have their results, ``waits`` are the next calls (model order),
    and ``calls[committed + len(waits):]`` never started.
    """

    turn: int
    step: int
    message_seq: int
    calls: tuple[ToolCallBlock, ...]
    committed: int
    waits: tuple[DurableWait, ...]
    max_tokens: bool = False  # an earlier step of the turn ended max-tokens (sticky)


def waiting_step(events: Sequence[SessionEvent]) -> WaitingStep | None:
    """The step the log's open last turn waits in, or ``None`` when there is none (the turn
    is closed, or what is unanswered is not only durable waits)."""
    start = _open_turn_start(events)
    if start is None:
        return None
    tail = events[start + 1 :]
    step: StepBoundary | None = None
    message: SessionEvent | None = None
    max_tokens = False
    for event in tail:
        data = event.data
        if event.type == "step/start" and isinstance(data, StepBoundary):
            step, message = data, None
        elif event.type == "step/end" and isinstance(data, StepBoundary):
            step, message = None, None
        elif isinstance(data, AssistantMessageEvent) and not data.interrupted:
            max_tokens = max_tokens or _hit_max_tokens(data)
            message = event if step is not None else None
    if step is None or message is None:
        return None
    assert isinstance(message.data, AssistantMessageEvent)
    if message.data.turn != step.turn or message.data.step != step.step:
        return None
    calls = message.data.message.tool_calls
    after = [event for event in tail if event.seq > message.seq]
    waits = _waits_after(calls, after)
    if waits is None:
        return None
    committed, found = waits
    return WaitingStep(
        turn=step.turn,
        step=step.step,
        message_seq=message.seq,
        calls=calls,
        committed=committed,
        waits=found,
        max_tokens=max_tokens,
    )


def _open_turn_start(events: Sequence[SessionEvent]) -> int | None:
    """The index of the last ``turn/start`` when no ``turn/end`` follows it."""
    for index in range(len(events) - 1, -1, -1):
        kind = events[index].type
        if kind == "turn/end":
            return None
        if kind == "turn/start":
            return index
    return None


def _hit_max_tokens(data: AssistantMessageEvent) -> bool:
    for record in reversed(data.stream):
        chunk = record.chunk
        if isinstance(chunk, Finish):
            return chunk.reason.kind == "max-tokens"
    return False


def _waits_after(
    calls: Sequence[ToolCallBlock], after: Sequence[SessionEvent]
) -> tuple[int, tuple[DurableWait, ...]] | None:
    """``(committed, waits)`` for ``calls`` given the events after their message; ``None``
    unless the unanswered calls are durable waits followed by calls never started."""
    started: dict[str, tuple[int, ToolCallEvent]] = {}
    answered: set[str] = set()
    deferred: dict[str, ToolDeferred] = {}
    requests: dict[str, InputRequest] = {}  # call id -> its latest input request
    answers: dict[str, InputAnswered] = {}  # input id -> its answer
    for event in after:
        data = event.data
        if isinstance(data, ToolCallEvent):
            started[data.call_id] = (event.seq, data)
        elif isinstance(data, ToolResultEvent):
            answered.add(data.message.call_id)
        elif isinstance(data, ToolDeferred):
            deferred[data.call_id] = data
        elif isinstance(data, InputRequest) and data.call_id is not None:
            requests[data.call_id] = data
        elif isinstance(data, InputAnswered):
            answers[data.id] = data
    committed = 0
    while committed < len(calls) and calls[committed].id in answered:
        committed += 1
    held = held_calls(after)
    waits: list[DurableWait] = []
    index = committed
    while index < len(calls) and calls[index].id in started:
        call_id = calls[index].id
        seq, call = started[call_id]
        request = requests.get(call_id)
        if call_id in held or call_id in answered:
            return None
        if call_id in deferred:
            waits.append(ClientWait(call=call, call_seq=seq, deferred=deferred[call_id]))
        elif request is not None and request.resume is not None:
            waits.append(
                InputWait(call=call, call_seq=seq, request=request, answer=answers.get(request.id))
            )
        else:
            return None  # started, and nothing says how its result could still come
        index += 1
    rest = calls[index:]
    if not waits or any(c.id in started or c.id in answered for c in rest):
        return None
    return committed, tuple(waits)
