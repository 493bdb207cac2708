"""The steerloop error hierarchy.

::

    SteerloopError
    ├── AbortedError                  cooperative cancellation observed (carries the reason)
    ├── LlmError                      a model call failed; carries an ``LlmFailure``
    ├── ToolDefinitionError           a tool definition is malformed
    ├── ApprovalError                 a decision for a call that is not waiting for one
    ├── CompactionError               a compaction was refused (its summary would not shrink)
    ├── InputError                    an answer to an input request that is not waiting
    └── SessionPersistenceError       the session log could not be loaded or stored
        ├── SessionPersistenceNotFoundError
        ├── SessionCorruptError
        ├── SessionConflictError
        └── SessionStorageError

Misuse raises the builtin ``ValueError`` (bad arguments) or ``RuntimeError`` (wrong state).
Provider SDK exceptions are translated at the adapter boundary and never leak.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ._model import LlmFailure

__all__ = [
    "AbortedError",
    "ApprovalError",
    "CompactionError",
    "InputError",
    "LlmError",
    "SessionConflictError",
    "SessionCorruptError",
    "SessionPersistenceError",
    "SessionPersistenceNotFoundError",
    "SessionStorageError",
    "SteerloopError",
    "ToolDefinitionError",
]


class SteerloopError(Exception):
    """Base class of every error steerloop raises on purpose."""


class AbortedError(SteerloopError):
    """Raised at a checkpoint once a signal was aborted; ``reason`` is the abort reason."""

    def __init__(self, reason: Any = None) -> None:
        super().__init__(f"aborted: {reason!r}")
        self.reason = reason


class LlmError(SteerloopError):
    """A model request failed; ``failure`` holds the facts recorded in the log."""

    def __init__(self, failure: LlmFailure) -> None:
        super().__init__(failure.message)
        self.failure = failure


class ToolDefinitionError(SteerloopError, ValueError):
    """A tool definition is malformed (bad name, schema or options)."""


class ApprovalError(SteerloopError):
    """``decide_approval`` refused: the call is not waiting for a decision.

    ``state`` says why: ``"unknown"`` (never asked about), ``"decided"`` (already answered)
    or ``"closed"`` (its wait ended without a decision: the turn was cancelled or the call
    answered otherwise). Nothing was written.
    """

    def __init__(self, call_id: str, state: str, message: str) -> None:
        super().__init__(message)
        self.call_id = call_id
        self.state = state


class InputError(SteerloopError):
    """``answer_input`` refused: the input request is not waiting for an answer.

    ``state`` says why: ``"unknown"`` (never requested), ``"answered"`` (already answered) or
    ``"closed"`` (its wait ended without an answer: the call or its turn ended). Nothing was
    written.
    """

    def __init__(self, input_id: str, state: str, message: str) -> None:
        super().__init__(message)
        self.input_id = input_id
        self.state = state


class SessionPersistenceError(SteerloopError):
    """A session log could not be loaded from or written to its store."""


class SessionPersistenceNotFoundError(SessionPersistenceError):
    """The store holds no session with the requested id."""


class SessionCorruptError(SessionPersistenceError):
    """A stored log is malformed; the message names the offending seq."""


class SessionConflictError(SessionPersistenceError):
    """Another writer owns the session."""


class SessionStorageError(SessionPersistenceError):
    """The storage backend failed (I/O, disk full, read-only, unreachable)."""


class CompactionError(SteerloopError):
    """A compaction was refused and changed nothing; ``reason`` names why
    (``"not-smaller"``: the summary would not shrink the context)."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
