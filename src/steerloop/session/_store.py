"""Compatibility path: the stores live in ``steerloop.session.store``."""

from .store._interface import (
    LOG_VERSION,
    BufferedWriter,
    SessionInfo,
    SessionStore,
    decode_rows,
    last_time,
    stored_header,
)
from .store._memory import MemoryStore
from .store._open import open_store

__all__ = [
    "LOG_VERSION",
    "BufferedWriter",
    "MemoryStore",
    "SessionInfo",
    "SessionStore",
    "decode_rows",
    "last_time",
    "open_store",
    "stored_header",
]
