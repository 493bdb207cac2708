"""Event-sourced sessions: the log, its events and the surface projection."""

from ._events import Replace, SessionEvent, TurnEndReason
from ._session import EventSink, Session, SessionEventPayload

__all__ = [
    "EventSink",
    "Replace",
    "Session",
    "SessionEvent",
    "SessionEventPayload",
    "TurnEndReason",
]
