"""The dispatch gate: nothing changes the world before the log says it will.

Design note. A tool body may act on the world the moment it starts, so before a call that
is not concurrency-safe (or whose tool says ``durable_dispatch=True``) starts, the events
announcing it — the turn's open events, the assistant message carrying the call, its
``tool/call``, an approval decision — must be durable: a crash after the effect then leaves
a log that knows the call started (resume answers it ``TOOL_OUTCOME_UNKNOWN`` or reconciles
it) instead of one that forgot it and runs it again.

* **One fence for the calls that wait together.** The gate of a step keeps the fence in
  flight and the seq it covers. A call whose events that fence covers awaits it instead of
  queueing its own, so the calls a step starts together (its parallel pool) pay for one
  commit. A fence covers what was appended before it was issued: the first waiter issues it
  once the scheduler yields, after every call starting with it has written its ``tool/call``.
* **Fenced.** The fence is ``Session.fence``: on PostgreSQL a commit that confirms the write
  lease; a refused one fails the writer for good, so no later tool of the session starts in
  this process.
* **The lease's clock, before every start.** Any call, safe or not, first asks
  ``Session.lease_valid`` (synchronous, cheap): when the lease may have expired since its
  last renewal (a process paused past its TTL wakes up to a passed deadline), it is fenced
  again before it starts, whatever its class.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from ..errors import SessionConflictError

if TYPE_CHECKING:
    from ..session._session import Session

__all__ = ["DispatchGate"]


class DispatchGate:
    """The fences of one tool group (one step's scheduler)."""

    __slots__ = ("_covered", "_flight", "_flight_covers", "_session", "fences")

    def __init__(self, session: Session) -> None:
        self._session = session
        self._covered = 0  # every seq up to this was fenced
        self._flight: asyncio.Future[None] | None = None  # the fence in progress
        self._flight_covers = 0
        self.fences = 0  # issued by this gate (tests count them)

    async def enter(self, seq: int, durable: bool) -> None:
        """Return when a call whose announcing events end at ``seq`` may start.

        Raises:
            SessionPersistenceError: the fence failed; the writer takes no more writes.
        """
        session = self._session
        if durable and self._covered < seq:
            await self._fence(seq)
        if session.lease_valid():
            return
        # The lease may have expired since (or the writer failed): fence again, now.
        await self._fence(session.next_seq - 1)
        if not session.lease_valid():
            raise SessionConflictError(
                f"session {session.id!r}: the write lease may have expired; the tool does not start"
            )

    async def _fence(self, seq: int) -> None:
        flight = self._flight
        if flight is not None and self._flight_covers >= seq:
            await asyncio.shield(flight)
            return
        covers = self._session.next_seq - 1
        flight = self._flight = asyncio.get_running_loop().create_future()
        self._flight_covers = covers
        self.fences += 1
        try:
            await self._session.fence()
        except BaseException as exc:
            if isinstance(exc, asyncio.CancelledError):
                flight.cancel()
            else:
                flight.set_exception(exc)
                flight.exception()  # retrieved: its awaiters, if any, raise it themselves
            raise
        finally:
            if self._flight is flight:
                self._flight = None
        self._covered = max(self._covered, covers)
        flight.set_result(None)
