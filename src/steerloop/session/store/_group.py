"""Group commit, shared by the database stores: typed operations, barriers, sticky failures.

Writers put operations on one queue; a committer drains everything queued — events of
every session, publications, barriers, closes — and hands it to the backend's
``commit_batch`` as one ``Batch``, so the commit rate adapts to the load. This module owns
what both database stores used to rebuild on their own:

* the operations (typed, one class each) and how a drained group becomes a ``Batch``;
* **sticky failure**: a writer whose events could not be stored is failed for good
  (``failed[key]``): its later events are dropped (storing them would leave a gap) and
  every later write, flush and close raises the recorded error;
* **barriers**: a flush, close, delete or store stop is settled only after everything
  queued before it was committed (or refused); a ``Fence`` is a writer's barrier whose
  commit also confirms the writer's lease, even when it has no events left to store;
* **close ordering**: a closing writer's lease is released only after its final commit,
  and its close is settled after the release, so a new writer can never get in ahead of
  queued events.

The backend commits; the driver (a thread for SQLite, an asyncio task for PostgreSQL)
loops ``drain → plan → commit_batch → finish``. Waiters may belong to any event loop: the
settlements of a group reach each loop in one wake-up (``deliver``).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from ...errors import SessionPersistenceError, SessionStorageError
from ._interface import BlobPut, BufferedWriter, stored_header
from ._lease import WriteLease

__all__ = [
    "Append",
    "Barrier",
    "Batch",
    "Close",
    "Delete",
    "Failure",
    "Fence",
    "GroupCommitter",
    "GroupWriter",
    "Op",
    "Publish",
    "PutBlobs",
    "Stop",
    "Unit",
    "Waiter",
    "raise_failure",
]

Failure = tuple[type[SessionPersistenceError], str]
"""Why a writer takes no more writes: the error to raise, and its message."""


def raise_failure(failure: Failure | None) -> None:
    """Raise the recorded failure, if any."""
    if failure is not None:
        raise failure[0](failure[1])


class Waiter:
    """An awaiting caller: its event loop and the future the committer settles."""

    __slots__ = ("future", "loop")

    def __init__(self) -> None:
        self.loop = asyncio.get_running_loop()
        self.future: asyncio.Future[None] = self.loop.create_future()


# --- operations ----------------------------------------------------------------------------


@dataclass(slots=True)
class Append:
    """One published event of writer ``key``: ``row`` is ``(session_id, seq, body)``."""

    key: int
    row: tuple[str, int, str]


@dataclass(slots=True)
class Publish:
    """A writer's publication: the session's header if it is new (``None`` on a resume),
    the stored length it was opened at, and its buffered events in seq order."""

    key: int
    session_id: str
    header: dict[str, Any] | None
    base_len: int
    rows: list[tuple[int, str]]
    blobs: list[BlobPut] = field(default_factory=list)
    """The blobs the buffered events reference, stored in the same transaction, first."""


@dataclass(slots=True)
class PutBlobs:
    """The blobs of writer ``key``'s next event(s): queued before them, so they are stored
    in the same transaction as those events or an earlier one — never after."""

    key: int
    session_id: str
    blobs: list[BlobPut]


@dataclass(slots=True)
class Barrier:
    """Settled once everything queued before it is committed; with a writer ``key``, with
    that writer's failure (a durable barrier). ``key=None`` only orders a read."""

    key: int | None
    waiter: Waiter


@dataclass(slots=True)
class Fence:
    """A writer's durable barrier that also confirms its lease in the commit (a fenced
    commit), whether or not the writer has events left to store: the barrier before a
    side-effecting tool starts."""

    key: int
    session_id: str
    waiter: Waiter


@dataclass(slots=True)
class Close:
    """A writer's last barrier: then ``release`` (its lease), then the waiter."""

    key: int
    waiter: Waiter
    release: Callable[[], Awaitable[None] | None]


@dataclass(slots=True)
class Delete:
    """Delete a stored session under its lease (SQLite); ``release`` the lease after."""

    key: int
    session_id: str
    waiter: Waiter
    release: Callable[[], Awaitable[None] | None]


@dataclass(slots=True)
class Stop:
    """The last operation: the driver settles it once the backend is closed."""

    waiter: Waiter


Op = Append | Publish | PutBlobs | Barrier | Fence | Close | Delete | Stop


@dataclass(slots=True)
class Unit:
    """What one batch holds for one writer (or one delete)."""

    session_id: str
    publish: Publish | None = None
    rows: list[tuple[str, int, str]] = field(default_factory=list)
    delete: Delete | None = None
    blobs: list[BlobPut] = field(default_factory=list)
    """Blobs to store (and reference from the session) before the unit's rows."""

    def first_seq(self) -> int | None:
        """The first seq this unit would store (for failure messages)."""
        if self.publish is not None and self.publish.rows:
            return self.publish.rows[0][0]
        return self.rows[0][1] if self.rows else None

    def last_seq(self) -> int | None:
        """The last seq this unit would store."""
        if self.rows:
            return self.rows[-1][1]
        if self.publish is not None and self.publish.rows:
            return self.publish.rows[-1][0]
        return None


@dataclass(slots=True)
class Batch:
    """One drained group, as the backend commits it."""

    units: dict[int, Unit]
    settle: list[Barrier | Fence | Close | Stop]
    durable: bool
    """A barrier of a writer, a close, a delete or a stop asks for a durable commit."""


# --- the write handle ------------------------------------------------------------------------

LeaseT = TypeVar("LeaseT", bound=WriteLease)


class GroupWriter(BufferedWriter, Generic[LeaseT]):
    """The write handle of a database store: it holds the session's lease, and its published
    lines and its publication go on the store's group-commit queue (``Append``, ``Publish``).

    Subclasses say when the store takes no more operations (``_check_queue``), how a failure
    refuses writes (``_refuse``), and how the lease is given back.
    """

    def __init__(
        self,
        session_id: str,
        base_len: int,
        *,
        key: int,
        lease: LeaseT,
        stored: bool,
        enqueue: Callable[[Op], None],
    ) -> None:
        super().__init__(session_id, base_len)
        self.key = key  # the committer's name for this writer (``failed[key]``)
        self._lease = lease
        self._stored = stored  # the session is already stored: publication adds no header
        self._enqueue = enqueue  # bound once: a published write is one check and one put
        # Operations queued, and how many of them a completed barrier covered: a flush
        # with nothing new since a *completed* barrier needs none (one still in flight
        # does not count: its caller, not this one, is the one it answers).
        self._queued = 0
        self._synced = 0
        self._publish_blobs: list[BlobPut] = []

    def _check_blobs(self, blobs: list[BlobPut], seq: int) -> None:
        """The store checks a reference to a blob it does not hold in the commit."""

    def _store_blobs(self, blobs: list[BlobPut]) -> None:
        if self._state == "open":  # the publication's: they ride on its Publish
            self._publish_blobs = list(blobs)
            return
        self._check_queue()
        self._enqueue(PutBlobs(self.key, self.session_id, blobs))
        self._queued += 1

    def _check_queue(self) -> None:
        """Raise when the store takes no more operations (by default it always does)."""

    def _store_line(self, seq: int, line: str) -> None:
        self._check_queue()
        self._enqueue(Append(self.key, (self.session_id, seq, line)))
        self._queued += 1

    def _publish(self, pending: list[tuple[int, str]]) -> None:
        self._refuse()
        self._check_queue()
        header = None if self._stored else stored_header(self.session_id, self._header)
        blobs, self._publish_blobs = self._publish_blobs, []
        self._enqueue(Publish(self.key, self.session_id, header, self._base_len, pending, blobs))
        self._queued += 1


# --- the committer -------------------------------------------------------------------------


class GroupCommitter:
    """The queue-side state of group commit: failures, planning, settlement, delivery.

    Not thread-safe by itself: ``plan``/``finish``/``abandon`` run on the driver (one
    thread or one task); writers only read ``failed`` (a dict lookup, atomic in CPython).
    """

    def __init__(self, where: str) -> None:
        self.where = where
        self.failed: dict[int, Failure] = {}
        self._settled: list[tuple[Waiter, BaseException | None]] = []
        self._releases: list[Awaitable[None]] = []
        self.stop_error: str | None = None  # why the final sync failed, for the store's close

    def fail(self, key: int, failure: Failure) -> None:
        """Fail writer ``key`` for good (the first failure wins)."""
        self.failed.setdefault(key, failure)

    def resolve(self, waiter: Waiter, error: BaseException | None = None) -> None:
        self._settled.append((waiter, error))

    def release(self, release: Callable[[], Awaitable[None] | None]) -> None:
        pending = release()
        if pending is not None:
            self._releases.append(pending)

    def drop_releases(self) -> None:
        """Forget releases nobody will await (the driver is gone)."""
        for item in self._releases:
            if asyncio.iscoroutine(item):
                item.close()
        self._releases = []

    async def released(self) -> None:
        """Await the asynchronous lease releases ``finish`` started (PostgreSQL)."""
        while self._releases:
            pending, self._releases = self._releases, []
            for item in pending:
                await item

    def plan(self, group: list[Op]) -> Batch:
        """Sort a drained group into per-writer units and the waiters it settles."""
        units: dict[int, Unit] = {}
        settle: list[Barrier | Fence | Close | Stop] = []
        failed = self.failed
        durable = False
        for op in group:
            if isinstance(op, Append):  # the hot path: one per event
                key = op.key
                if key in failed:
                    continue  # storing it would leave a gap after what failed
                unit = units.get(key)
                if unit is None:
                    unit = units[key] = Unit(op.row[0])
                unit.rows.append(op.row)
            elif isinstance(op, Publish):
                if op.key not in failed:
                    units[op.key] = Unit(op.session_id, publish=op, blobs=list(op.blobs))
            elif isinstance(op, PutBlobs):
                if op.key not in failed:
                    unit = units.get(op.key)
                    if unit is None:
                        unit = units[op.key] = Unit(op.session_id)
                    unit.blobs.extend(op.blobs)
            elif isinstance(op, Delete):
                units[op.key] = Unit(op.session_id, delete=op)
                durable = True
            elif isinstance(op, Fence):
                if op.key not in failed and op.key not in units:
                    units[op.key] = Unit(op.session_id)  # nothing to store, a lease to confirm
                settle.append(op)
                durable = True
            else:
                settle.append(op)
                # A barrier without a writer only orders a read after what was queued
                # (read-your-writes); it needs no sync of its own.
                durable = durable or not isinstance(op, Barrier) or op.key is not None
        return Batch(units, settle, durable)

    def finish(self, batch: Batch, sync_error: str | None = None) -> Stop | None:
        """Settle the batch's waiters after its commit; returns its ``Stop``, if any, which
        the driver settles once the backend is closed (``stop_error`` says why not)."""
        stop: Stop | None = None
        for op in batch.settle:
            if isinstance(op, Stop):
                stop = op
                self.stop_error = sync_error
                continue
            failure = self.failed.get(op.key) if op.key is not None else None
            if failure is None and sync_error is not None:
                failure = (SessionStorageError, sync_error)
            if isinstance(op, Close):
                self.release(op.release)  # after the final commit, before the close returns
                self.failed.pop(op.key, None)
            self.resolve(op.waiter, None if failure is None else failure[0](failure[1]))
        return stop

    def fail_unit(self, key: int, unit: Unit, failure: Failure) -> None:
        """A unit whose transaction failed: a delete settles with the error (and gives its
        lease back), a writer is failed for good."""
        if unit.delete is not None:
            self.resolve(unit.delete.waiter, failure[0](failure[1]))
            self.release(unit.delete.release)
            return
        self.fail(key, failure)

    def abandon(self, group: list[Op], exc: BaseException) -> None:
        """A bug or a failed rollback: fail every writer and waiter of the group loudly."""
        message = f"writing to {self.where} failed: {type(exc).__name__}: {exc}"
        for op in group:
            if isinstance(op, Append | Publish | PutBlobs):
                session_id = op.row[0] if isinstance(op, Append) else op.session_id
                self.fail(op.key, (SessionStorageError, f"session {session_id!r}: {message}"))
            elif isinstance(op, Barrier | Fence | Close | Stop):
                self.resolve(op.waiter, SessionStorageError(message))
                if isinstance(op, Close):
                    self.release(op.release)
            else:
                self.resolve(op.waiter, SessionStorageError(message))
                self.release(op.release)

    def deliver(self) -> None:
        """Hand the settlements to their loops: one wake-up per loop, not per caller.

        From another thread each ``call_soon_threadsafe`` writes the loop's self-pipe,
        releasing and re-taking the GIL; per flush, that churn cost more than the commits
        themselves. On the loop's own thread they are settled at once.
        """
        if not self._settled:
            return
        settled, self._settled = self._settled, []
        try:
            running: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        by_loop: dict[asyncio.AbstractEventLoop, list[tuple[Waiter, BaseException | None]]] = {}
        for item in settled:
            by_loop.setdefault(item[0].loop, []).append(item)
        for loop, items in by_loop.items():
            if loop is running:
                _settle(items)
                continue
            with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits
                loop.call_soon_threadsafe(_settle, items)


def _settle(items: list[tuple[Waiter, BaseException | None]]) -> None:
    for waiter, error in items:
        future = waiter.future
        if future.done():  # its caller was cancelled
            continue
        if error is None:
            future.set_result(None)
        else:
            future.set_exception(error)
