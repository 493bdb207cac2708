"""The session's shared state document (``agent.state`` / ``agent.update_state``).

The document is the fold of the log's ``state/changed`` events (``session/_state.py``);
``update`` validates and applies a patch to a copy first, so a patch that fails writes
nothing, then appends the one ``state/changed`` that carries it.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from ..session._events import StateChanged
from ..session._json import dumps
from ..session._state import StatePatchError, apply_state_patch, check_patch, fold_state

if TYPE_CHECKING:
    from ..session._session import Session

__all__ = ["SharedState", "StatePatchError"]


class SharedState:
    """One agent's view of its session's state document, folded lazily by seq."""

    __slots__ = ("_document", "_folded", "_session")

    def __init__(self, session: Session) -> None:
        self._session = session
        self._document: dict[str, Any] = {}
        self._folded = 0  # events folded so far

    def _current(self) -> dict[str, Any]:
        events = self._session.events
        if self._folded < len(events):
            self._document = fold_state(events[self._folded :], self._document)
            self._folded = len(events)
        return self._document

    @property
    def document(self) -> Mapping[str, Any]:
        """A read-only copy of the current document (a tool may keep it; it never changes)."""
        return MappingProxyType(copy.deepcopy(self._current()))

    def update(self, patch: Any) -> int:
        """Append one ``state/changed`` carrying ``patch``; returns its seq.

        Raises:
            StatePatchError: a malformed patch, one that does not apply, a value that is not
                JSON or a result that is not an object; nothing is written.
        """
        ops = check_patch(patch)
        result = apply_state_patch(self._current(), ops)
        try:
            dumps(result)
        except (TypeError, ValueError) as exc:
            raise StatePatchError(f"the state document must be JSON: {exc}") from None
        return self._session.append(StateChanged(patch=ops)).seq
