"""Event-sourced sessions: the log, its events, the surface projection and persistence."""

from . import events
from ._approvals import pending_approvals
from ._events import Replace, SessionEvent, TurnEndReason
from ._input_events import InputRequest
from ._inputs import pending_inputs
from ._session import EventSink, Session, SessionEventPayload
from .store import MemoryStore, SessionInfo, SessionStore

__all__ = [
    "EventSink",
    "InputRequest",
    "MemoryStore",
    "Replace",
    "Session",
    "SessionEvent",
    "SessionEventPayload",
    "SessionInfo",
    "SessionStore",
    "TurnEndReason",
    "events",
    "pending_approvals",
    "pending_inputs",
]
