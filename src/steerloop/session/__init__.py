"""Event-sourced sessions: the log, its events, the surface projection and persistence."""

from . import events
from ._approvals import approval_state, pending_approvals
from ._blobs import StoredBlob, event_blobs
from ._deferred import pending_deferred
from ._events import (
    COMPACTION_PLUGIN,
    SURFACE_TYPES,
    Replace,
    SessionEvent,
    TurnEndReason,
    surface_message,
)
from ._input_events import InputAction, InputRequest
from ._inputs import input_state, pending_inputs
from ._session import EventSink, Session, SessionEventPayload
from ._state import fold_state
from .store import MemoryStore, SessionInfo, SessionStore

__all__ = [
    "COMPACTION_PLUGIN",
    "SURFACE_TYPES",
    "EventSink",
    "InputAction",
    "InputRequest",
    "MemoryStore",
    "Replace",
    "Session",
    "SessionEvent",
    "SessionEventPayload",
    "SessionInfo",
    "SessionStore",
    "StoredBlob",
    "TurnEndReason",
    "approval_state",
    "event_blobs",
    "events",
    "fold_state",
    "input_state",
    "pending_approvals",
    "pending_deferred",
    "pending_inputs",
    "surface_message",
]
