"""Fold of the deferred calls (``tool/deferred``): a call waits for a result from outside
the process until its ``tool/result`` is written (the answer, or a cancel or a crash repair
closing it)."""

from __future__ import annotations

from collections.abc import Iterable

from ._events import SessionEvent, ToolDeferred, ToolResultEvent

__all__ = ["pending_deferred"]


def pending_deferred(events: Iterable[SessionEvent]) -> tuple[ToolDeferred, ...]:
    """The ``tool/deferred`` records without a ``tool/result`` yet, in call order."""
    waiting: dict[str, ToolDeferred] = {}
    for event in events:
        data = event.data
        if isinstance(data, ToolDeferred):
            waiting[data.call_id] = data
        elif isinstance(data, ToolResultEvent):
            waiting.pop(data.message.call_id, None)
    return tuple(waiting.values())
