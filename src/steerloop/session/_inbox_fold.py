"""The inbox state as a fold of the log: both queues rebuilt from ``agent/inbox/spliced``.

It lives in the session layer because loading a log validates it (the codec folds it once);
the live ``Inbox`` of the agent layer writes the same splices and must agree with this fold.
"""

from __future__ import annotations

from collections.abc import Iterable

from ..errors import SessionCorruptError
from ..messages import UserMessage
from ._events import InboxSpliced, SessionEvent

__all__ = ["fold_inbox"]


def _is_index(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def fold_inbox(events: Iterable[SessionEvent]) -> dict[str, list[UserMessage]]:
    """Rebuild both queues from ``agent/inbox/spliced`` events, validating each splice.

    Raises:
        SessionCorruptError: a splice is out of range or makes a pending id appear twice.
    """
    queues: dict[str, list[UserMessage]] = {"next-turn": [], "next-step": []}
    pending: set[str] = set()  # the ids in both queues, kept alongside them
    for event in events:
        if event.type != "agent/inbox/spliced":
            continue
        data = event.data
        if not isinstance(data, InboxSpliced) or data.target not in queues:
            raise SessionCorruptError(f"seq {event.seq}: malformed agent/inbox/spliced")
        queue = queues[data.target]
        if not (_is_index(data.start) and _is_index(data.removed_count)):
            raise SessionCorruptError(
                f"seq {event.seq}: splice start={data.start!r} "
                f"removed={data.removed_count!r} are not integers"
            )
        if not (0 <= data.start <= len(queue)) or not (
            0 <= data.removed_count <= len(queue) - data.start
        ):
            raise SessionCorruptError(
                f"seq {event.seq}: splice start={data.start} removed={data.removed_count} "
                f"is outside a {data.target} queue of {len(queue)}"
            )
        end = data.start + data.removed_count
        pending.difference_update(m.id for m in queue[data.start : end])
        for message in data.inserted:
            if message.id in pending:
                raise SessionCorruptError(f"seq {event.seq}: a pending message id appears twice")
            pending.add(message.id)
        queue[data.start : end] = data.inserted
    return queues
