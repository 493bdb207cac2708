"""The inbox: two queues (``next-turn``, ``next-step``) whose state is a fold of the log.

Every mutation is one ``agent/inbox/spliced`` event written *before* the state changes, so
``session/event`` listeners read the pre-splice state and a resumed inbox equals the live one.
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any, Literal

from .._hooks import HookBus
from .._owned import RuntimeOwned
from ..messages import UserMessage, check_json, message_to_json
from ..session._events import InboxSpliced
from ..session._inbox_fold import fold_inbox
from ..tools._agent_ref import AgentRef
from ._decisions import ClaimedPayload, InboxMessagePayload
from ._handles import INBOX_CLAIMED, INBOX_DISCARDED, INBOX_INSERTED

if TYPE_CHECKING:
    from ..session._session import Session

__all__ = ["Inbox", "InboxTarget", "fold_inbox", "normalise_splice"]

InboxTarget = Literal["next-turn", "next-step"]
_TARGETS: tuple[InboxTarget, ...] = ("next-turn", "next-step")
_CLEAR_ORDER: tuple[InboxTarget, ...] = ("next-step", "next-turn")


def _index(value: Any, n: int, *, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"{what} must be a number")
    if isinstance(value, float):
        if math.isnan(value):
            return 0
        if math.isinf(value):
            return n if value > 0 else -n - 1  # -inf clamps to 0 below
        value = math.trunc(value)
    return int(value)


def normalise_splice(n: int, start: Any, delete_count: Any) -> tuple[int, int]:
    """Normalise ``(start, delete_count)`` for a queue of length ``n`` (C7.4-16)."""
    s = _index(start, n, what="start")
    s = max(n + s, 0) if s < 0 else min(s, n)
    if isinstance(delete_count, float) and math.isinf(delete_count) and delete_count > 0:
        d = n - s
    else:
        d = _index(delete_count, n, what="delete_count")
    return s, min(max(d, 0), n - s)


class Inbox(metaclass=RuntimeOwned):
    """Pending input of one agent."""

    owned_hint = "every agent has one: `agent.inbox`"

    def __init__(
        self,
        session: Session,
        hooks: HookBus,
        agent: AgentRef,
        next_turn: Iterable[UserMessage] = (),
        next_step: Iterable[UserMessage] = (),
    ) -> None:
        self._session = session
        self._hooks = hooks
        # The agent owns its inbox; the way back is weak so the two are no reference cycle:
        # a disposed agent and its log are freed when the last reference goes, not by a
        # full collection walking the heap (measured: ~200 ms pauses in a busy service).
        self._agent = weakref.ref(agent)
        self._queues: dict[str, list[UserMessage]] = {
            "next-turn": list(next_turn),
            "next-step": list(next_step),
        }
        self._last_seq = 0  # the seq of the last splice written (what append returns)

    def _owner(self) -> AgentRef:
        agent = self._agent()
        if agent is None:  # only an inbox kept past its disposed agent gets here
            raise RuntimeError("this inbox's agent is gone")
        return agent

    @property
    def next_turn(self) -> tuple[UserMessage, ...]:
        return tuple(self._queues["next-turn"])

    @property
    def next_step(self) -> tuple[UserMessage, ...]:
        return tuple(self._queues["next-step"])

    @property
    def has_pending(self) -> bool:
        return bool(self._queues["next-turn"] or self._queues["next-step"])

    def queue(self, target: InboxTarget) -> list[UserMessage]:
        return self._queues[_check_target(target)]

    def pending_ids(self) -> set[str]:
        return {m.id for q in self._queues.values() for m in q}

    # --- host API --------------------------------------------------------------------

    def splice(
        self, target: InboxTarget, start: Any, delete_count: Any, items: Sequence[UserMessage] = ()
    ) -> list[UserMessage]:
        """Remove and insert messages, like ``list`` splice; returns the removed ones."""
        return self._splice(target, start, delete_count, items, outcome="canceled")

    def append(self, target: InboxTarget, message: UserMessage) -> int:
        """Queue ``message`` last in ``target``; returns the seq of the splice written."""
        self._splice(target, len(self.queue(target)), 0, (message,), outcome="canceled")
        return self._last_seq

    def prepend(self, target: InboxTarget, message: UserMessage) -> int:
        """Queue ``message`` first in ``target``; returns the seq of the splice written."""
        self._splice(target, 0, 0, (message,), outcome="canceled")
        return self._last_seq

    def replace(self, message_id: str, message: UserMessage) -> bool:
        """Rewrite a pending message in place; ``False`` if ``message_id`` is not pending."""
        for target in _TARGETS:
            for i, pending in enumerate(self._queues[target]):
                if pending.id == message_id:
                    self._splice(
                        target,
                        i,
                        1,
                        (message,),
                        outcome="canceled",
                        ignore_id=message_id,
                    )
                    return True
        return False

    def remove(self, message_id: str) -> bool:
        """Discard a pending message; ``False`` if it is not pending (e.g. already claimed)."""
        for target in _TARGETS:
            for i, pending in enumerate(self._queues[target]):
                if pending.id == message_id:
                    self._splice(target, i, 1, (), outcome="canceled")
                    return True
        return False

    def clear(self) -> None:
        """Discard everything: ``next-step`` first, then ``next-turn``."""
        for target in _CLEAR_ORDER:
            if self._queues[target]:
                self._splice(target, 0, len(self._queues[target]), (), outcome="canceled")

    # --- loop API --------------------------------------------------------------------

    def claim(self, target: InboxTarget, turn: int) -> list[UserMessage]:
        """Take all of ``next-step`` and, for ``next-turn``, the first queued prompt."""
        claimed: list[UserMessage] = []
        if self._queues["next-step"]:
            claimed += self._splice(
                "next-step", 0, len(self._queues["next-step"]), (), outcome=None
            )
        if target == "next-turn" and self._queues["next-turn"]:
            claimed += self._splice("next-turn", 0, 1, (), outcome=None)
        if self._hooks.has(INBOX_CLAIMED):
            for message in claimed:
                self._hooks.emit(INBOX_CLAIMED, ClaimedPayload(self._owner(), message, turn))
        return claimed

    def _splice(
        self,
        target: InboxTarget,
        start: Any,
        delete_count: Any,
        items: Sequence[UserMessage],
        *,
        outcome: Literal["canceled"] | None,
        ignore_id: str | None = None,
    ) -> list[UserMessage]:
        queue = self.queue(target)
        inserted = tuple(items)
        s, d = normalise_splice(len(queue), start, delete_count)
        if d == 0 and not inserted:
            return []
        if inserted:
            pending = self.pending_ids()
            removing = {m.id for m in queue[s : s + d]}
            seen: set[str] = set()
            for message in inserted:
                if not isinstance(message, UserMessage):
                    raise ValueError(f"the inbox holds UserMessages, not {type(message).__name__}")
                check_json(message_to_json(message), "message content")
                if message.id in seen or (
                    message.id in pending and message.id not in removing and message.id != ignore_id
                ):
                    raise ValueError(f"message {message.id!r} is already pending")
                seen.add(message.id)
        removed = queue[s : s + d]
        self._last_seq = self._session.append(
            InboxSpliced(
                target=target,
                start=s,
                removed_count=d,
                inserted=inserted,
                outcome=outcome if d else None,
            ),
        ).seq
        queue[s : s + d] = inserted
        if outcome is not None:
            if removed and self._hooks.has(INBOX_DISCARDED):
                for message in removed:
                    self._hooks.emit(INBOX_DISCARDED, InboxMessagePayload(self._owner(), message))
            if inserted and self._hooks.has(INBOX_INSERTED):
                for message in inserted:
                    self._hooks.emit(INBOX_INSERTED, InboxMessagePayload(self._owner(), message))
        return removed


def _check_target(target: str) -> str:
    if target not in _TARGETS:
        raise ValueError(f"target must be 'next-turn' or 'next-step', not {target!r}")
    return target
