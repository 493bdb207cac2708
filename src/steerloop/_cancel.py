"""Why a turn was cancelled: exactly four kinds."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any, Literal

__all__ = ["CancelCause", "escapes"]

CancelKind = Literal["user", "parent", "hook", "disposed"]


@dataclass(frozen=True, slots=True)
class CancelCause:
    """A cancel cause; build one with ``user()``, ``parent()``, ``hook(reason)``, ``disposed()``."""

    kind: CancelKind
    reason: str | None = None

    def __post_init__(self) -> None:
        if self.kind not in ("user", "parent", "hook", "disposed"):
            raise ValueError(f"unknown cancel cause kind {self.kind!r}")
        if self.kind == "hook":
            if not isinstance(self.reason, str):
                raise ValueError("CancelCause.hook() requires a str reason")
        elif self.reason is not None:
            raise ValueError(f"cancel cause {self.kind!r} takes no reason")

    @classmethod
    def user(cls) -> CancelCause:
        return cls("user")

    @classmethod
    def parent(cls) -> CancelCause:
        return cls("parent")

    @classmethod
    def hook(cls, reason: str) -> CancelCause:
        return cls("hook", reason)

    @classmethod
    def disposed(cls) -> CancelCause:
        return cls("disposed")

    def to_json(self) -> dict[str, Any]:
        return (
            {"kind": self.kind} if self.reason is None else {"kind": "hook", "reason": self.reason}
        )

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> CancelCause:
        return cls(data["kind"], data.get("reason"))


def escapes(exc: BaseException) -> bool:
    """Whether ``exc`` must leave the loop instead of being contained as a failure.

    ``KeyboardInterrupt`` and ``SystemExit`` belong to the host, and so does a
    ``CancelledError`` while the running task is itself being cancelled (``Task.cancel``
    from outside, e.g. ``asyncio.run`` shutting down). Any other ``CancelledError`` (say,
    from awaiting a task someone else cancelled) is an ordinary failure of whoever raised it.
    """
    if isinstance(exc, KeyboardInterrupt | SystemExit):
        return True
    if isinstance(exc, asyncio.CancelledError):
        task = asyncio.current_task()
        return task is not None and task.cancelling() > 0
    return False
