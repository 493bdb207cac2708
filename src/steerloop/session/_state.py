"""The shared state document (EVENTS.md ``state/changed``): one JSON object per session,
``{}`` until the first change, folded from the RFC 6902 patches of its ``state/changed``
events. Patches are applied with ``jsonpatch`` (python-json-patch); this module only checks
their shape strictly first (the six operations, their members and nothing else), so a stored
or sent patch either applies whole or is refused whole."""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any

import jsonpatch
import jsonpointer

from ..errors import SessionCorruptError
from ._events import SessionEvent, StateChanged

__all__ = ["MAX_PATCH_OPS", "StatePatchError", "apply_state_patch", "check_patch", "fold_state"]

MAX_PATCH_OPS = 10_000
"""The most operations one ``state/changed`` may carry."""

# The members each operation has (RFC 6902 §4); any other member is refused.
_MEMBERS: dict[str, frozenset[str]] = {
    "add": frozenset(("op", "path", "value")),
    "remove": frozenset(("op", "path")),
    "replace": frozenset(("op", "path", "value")),
    "move": frozenset(("op", "from", "path")),
    "copy": frozenset(("op", "from", "path")),
    "test": frozenset(("op", "path", "value")),
}


class StatePatchError(ValueError):
    """A state patch that is malformed or does not apply; nothing was changed."""


def check_patch(patch: Any) -> tuple[dict[str, Any], ...]:
    """``patch`` as a tuple of operation objects, checked for shape (not applied).

    Raises:
        StatePatchError: not a list of RFC 6902 operations (unknown ``op``, a missing or
            extra member, a pointer that is not a string), or more than ``MAX_PATCH_OPS``.
    """
    if isinstance(patch, str | bytes | Mapping) or not isinstance(patch, Sequence):
        raise StatePatchError("a state patch must be a list of RFC 6902 operations")
    if len(patch) > MAX_PATCH_OPS:
        raise StatePatchError(f"a state patch has at most {MAX_PATCH_OPS} operations")
    out: list[dict[str, Any]] = []
    for index, op in enumerate(patch):
        if not isinstance(op, Mapping):
            raise StatePatchError(f"operation {index} must be an object")
        name = op.get("op")
        members = _MEMBERS.get(name) if isinstance(name, str) else None
        if members is None:
            raise StatePatchError(f"operation {index}: unknown op {name!r}")
        keys = set(op)
        if keys != members:
            missing, extra = sorted(members - keys), sorted(keys - members)
            what = f"missing {', '.join(missing)}" if missing else f"unknown {', '.join(extra)}"
            raise StatePatchError(f"operation {index} ({name}): {what}")
        for pointer in ("path", "from"):
            if pointer in op and (
                not isinstance(op[pointer], str)
                or (op[pointer] and not op[pointer].startswith("/"))
            ):
                raise StatePatchError(f"operation {index}: {pointer!r} must be a JSON pointer")
        out.append(dict(op))
    return tuple(out)


def apply_state_patch(
    document: Mapping[str, Any], patch: Sequence[Mapping[str, Any]]
) -> dict[str, Any]:
    """The document after ``patch`` (``document`` itself is not changed).

    Raises:
        StatePatchError: the patch does not apply (a missing path, a failed ``test``), or
            the result is not a JSON object.
    """
    ops = check_patch(patch)
    try:
        result = jsonpatch.apply_patch(copy.deepcopy(dict(document)), list(ops), in_place=True)
    except (jsonpatch.JsonPatchException, jsonpointer.JsonPointerException) as exc:
        raise StatePatchError(f"the patch does not apply: {exc}") from None
    except (TypeError, ValueError, KeyError, IndexError) as exc:  # a pointer into a scalar
        raise StatePatchError(f"the patch does not apply: {exc!r}") from None
    if not isinstance(result, dict):
        raise StatePatchError("the state document must stay a JSON object")
    return result


def fold_state(
    events: Sequence[SessionEvent], start: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The state document after ``events`` (each ``state/changed`` applied in order).

    Raises:
        SessionCorruptError: a stored patch that does not apply (naming its seq).
    """
    document: dict[str, Any] = {} if start is None else start
    for event in events:
        if isinstance(event.data, StateChanged):
            try:
                document = apply_state_patch(document, event.data.patch)
            except StatePatchError as exc:
                raise SessionCorruptError(f"seq {event.seq} (state/changed): {exc}") from None
    return document
