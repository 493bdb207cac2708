"""Durable approvals (EVENTS.md §2.4a): the calls of an agent held for a person's decision.

A ``tools/pre-execute`` policy that answers ``ToolDecision.ask`` makes the scheduler record
``tool/approval-requested`` and wait; ``decide`` writes ``tool/approval-decided``
synchronously (the caller gets its seq) and wakes the wait. The events are the one mechanism:
a terminal prompt, a callback or an HTTP command all end in ``decide``.

A request's wait ends with its decision, or when the turn's signal aborts (the call is
answered ``ABORTED_BEFORE_DISPATCH`` and no decision is written: the request is closed by its
call's result, as a crash repair closes it with ``TOOL_NOT_STARTED``).
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Literal

from ..errors import ApprovalError
from ..session._approvals import approval_state
from ..session._events import ApprovalDecided, ApprovalRequested

if TYPE_CHECKING:
    from .._signal import AbortSignal
    from ..session._session import Session

__all__ = ["Approvals", "Decision"]

Decision = Literal["allow", "deny"]


class _Waiting:
    __slots__ = ("decided", "request", "signal")

    def __init__(
        self,
        request: ApprovalRequested,
        signal: AbortSignal,
        decided: asyncio.Future[ApprovalDecided],
    ) -> None:
        self.request = request
        self.signal = signal
        self.decided = decided


class Approvals:
    """The pending approval requests of one agent (``agent.pending_approvals``)."""

    def __init__(self, session: Session) -> None:
        self._session = session
        self._waiting: dict[str, _Waiting] = {}

    @property
    def pending(self) -> tuple[ApprovalRequested, ...]:
        """Requests still waiting, in request order (a cancelled turn's are gone at once)."""
        return tuple(
            w.request
            for w in self._waiting.values()
            if not w.decided.done() and not w.signal.aborted
        )

    def request(
        self, request: ApprovalRequested, signal: AbortSignal
    ) -> tuple[int, asyncio.Future[ApprovalDecided]]:
        """Append ``request`` and register its wait; ``(seq, future of the decision)``.

        Registered before the append, so a ``session/event`` listener of the request may
        already decide it.
        """
        decided: asyncio.Future[ApprovalDecided] = asyncio.get_running_loop().create_future()
        self._waiting[request.call_id] = _Waiting(request, signal, decided)
        try:
            seq = self._session.append(request).seq
        except BaseException:
            del self._waiting[request.call_id]
            raise
        return seq, decided

    def release(self, call_id: str) -> None:
        """The wait of ``call_id`` is over (decided, cancelled or abandoned)."""
        self._waiting.pop(call_id, None)

    def decide(self, call_id: str, decision: Decision, reason: str | None, by: str | None) -> int:
        """Write ``tool/approval-decided`` for a waiting call; returns its seq.

        Raises:
            ValueError: a bad argument.
            ApprovalError: ``call_id`` is not waiting (unknown, already decided, closed).
        """
        if not isinstance(call_id, str) or not call_id:
            raise ValueError("call_id must be a non-empty string")
        if decision not in ("allow", "deny"):
            raise ValueError(f"decision must be 'allow' or 'deny', not {decision!r}")
        for name, value in (("reason", reason), ("by", by)):
            if value is not None and not isinstance(value, str):
                raise ValueError(f"{name} must be a string or None")
        waiting = self._waiting.get(call_id)
        if waiting is None or waiting.decided.done() or waiting.signal.aborted:
            raise self._refusal(call_id, waiting)
        record = ApprovalDecided(call_id=call_id, decision=decision, reason=reason, by=by)
        seq = self._session.append(record).seq
        waiting.decided.set_result(record)
        return seq

    def _refusal(self, call_id: str, waiting: _Waiting | None) -> ApprovalError:
        if waiting is not None and not waiting.decided.done():
            return ApprovalError(
                call_id, "closed", f"call {call_id!r} no longer waits: its turn was cancelled"
            )
        state = approval_state(self._session.events, call_id)
        if state == "decided":
            return ApprovalError(call_id, "decided", f"call {call_id!r} was already decided")
        if state == "unknown":
            return ApprovalError(
                call_id, "unknown", f"no approval was requested for call {call_id!r}"
            )
        return ApprovalError(call_id, "closed", f"call {call_id!r} no longer waits for a decision")
