"""Input requests: a person asked for input while a call runs, and the answer (log-only).

``input/requested`` is written when a tool's server asks the user something during a call
(an MCP ``elicitation/create``, or a sampling request held for approval); ``input/answered``
is its one answer: ``accept`` (with the content, valid against the requested schema),
``decline`` or ``cancel``. A request is pending from its ``input/requested`` until its
answer, its call's ``tool/result`` or the end of its turn (a cancel or a crash repair ends
the call without an answer). ``pending_inputs`` folds that from the log alone, so a service
can list the requests of a session it has not loaded.

The MCP records beside them: ``mcp/task-created`` (the handle of a task-augmented call,
written before the call waits for it), ``mcp/resource-updated`` (a server said a resource
changed; nothing is re-read) and ``mcp/sampled`` (a server's sampling request and how it was
answered, with the model's usage).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Literal

from ._events import SessionEvent, ToolResultEvent, TurnEnd
from ._input_events import InputAnswered, InputRequest

__all__ = ["InputState", "input_state", "pending_inputs"]

InputState = Literal["pending", "answered", "closed", "unknown"]
"""``pending``: waiting; ``answered``: has its ``input/answered``; ``closed``: its call or
turn ended without an answer; ``unknown``: never requested."""


def _closes(data: Any, request: InputRequest) -> bool:
    if isinstance(data, ToolResultEvent):
        return request.call_id is not None and data.message.call_id == request.call_id
    return isinstance(data, TurnEnd) and (request.turn is None or data.turn == request.turn)


def pending_inputs(events: Iterable[SessionEvent]) -> tuple[InputRequest, ...]:
    """The ``input/requested`` records still waiting for an answer, in log order."""
    pending: dict[str, InputRequest] = {}
    for event in events:
        data = event.data
        if isinstance(data, InputRequest):
            pending[data.id] = data
        elif isinstance(data, InputAnswered):
            pending.pop(data.id, None)
        elif pending and isinstance(data, ToolResultEvent | TurnEnd):
            for key in [k for k, r in pending.items() if _closes(data, r)]:
                del pending[key]
    return tuple(pending.values())


def input_state(events: Iterable[SessionEvent], input_id: str) -> InputState:
    """Where the input request ``input_id`` stands."""
    state: InputState = "unknown"
    request: InputRequest | None = None
    for event in events:
        data = event.data
        if isinstance(data, InputRequest) and data.id == input_id:
            state, request = "pending", data
        elif isinstance(data, InputAnswered) and data.id == input_id:
            state = "answered"
        elif state == "pending" and request is not None and _closes(data, request):
            state = "closed"
    return state
