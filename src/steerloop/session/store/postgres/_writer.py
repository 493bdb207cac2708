"""The PostgreSQL write handle: holds the session's lease, buffers until ``publish``, and
carries riders (``attach``): statements committed with the batch that stores their seq."""

from __future__ import annotations

import uuid
from typing import Any, Protocol

from ....errors import SessionConflictError, SessionPersistenceError, SessionStorageError
from ..._blobs import StoredBlob
from .._group import Close, Failure, GroupCommitter, GroupWriter, Op, Waiter, raise_failure
from ._lease import PgLease

__all__ = ["PostgresWriter", "WriterHost"]


class WriterHost(Protocol):
    """What a writer needs of its store (the store's group-commit side)."""

    _group: GroupCommitter

    def _enqueue(self, op: Op) -> None: ...

    def _check_task(self) -> None: ...

    async def _barrier(self, key: int) -> None: ...

    async def _fence(self, key: int, session_id: str) -> None: ...

    async def _release(self, writer: PostgresWriter) -> None: ...

    async def get_blob(self, hash: str, *, session_id: str | None = None) -> StoredBlob: ...


class PostgresWriter(GroupWriter[PgLease]):
    """The write handle of one session: holds its lease, buffers until ``publish``."""

    def __init__(
        self, store: WriterHost, key: int, lease: PgLease, *, stored: bool, base_len: int
    ) -> None:
        super().__init__(
            lease.session_id,
            base_len,
            key=key,
            lease=lease,
            stored=stored,
            enqueue=store._enqueue,
        )
        self._store = store
        # Sticky failure: the store's committer keeps it (``failed[key]``); raised by
        # write/flush/close/publish once known, and later events are dropped so the stored
        # log never gets a gap.
        self._failed = store._group.failed
        # Riders (``attach``): statements committed with the batch that stores their seq.
        self._riders: list[tuple[int, str, tuple[Any, ...]]] = []
        self._planned = base_len  # the highest seq a batch has taken (committed or not)

    @property
    def lease_id(self) -> uuid.UUID:
        return self._lease.lease_id

    @property
    def token(self) -> int:
        """The fencing token of the lease this writer holds."""
        return self._lease.token

    @property
    def lost(self) -> bool:
        """The lease was taken over: releasing it is not ours to do."""
        return self._lease.lost

    def attach(self, seq: int, sql: str, *args: Any) -> None:
        """Run ``sql`` (with ``args``) inside the fenced transaction that commits event
        ``seq``: a batch refused by the fence loses the statement with the event.

        Call it right after the write of ``seq``, before yielding to the event loop.

        Raises:
            ValueError: ``seq`` is not a written event still waiting for its batch.
            SessionPersistenceError: this writer takes no more writes.
        """
        raise_failure(self.error)
        if type(seq) is not int or not self._planned < seq < self._next:
            raise ValueError(
                f"session {self.session_id!r}: cannot attach to seq {seq!r}: only an event "
                f"written and not yet taken by a commit can carry a statement "
                f"(seqs {self._planned + 1}..{self._next - 1})"
            )
        if not isinstance(sql, str) or not sql.strip():
            raise ValueError("attach needs a SQL statement")
        self._riders.append((seq, sql, args))

    @property
    def error(self) -> Failure | None:
        """Why this writer takes no more writes (``None`` while it is healthy)."""
        return self._failed.get(self.key)

    def fail(self, kind: type[SessionPersistenceError], message: str) -> None:
        self._store._group.fail(self.key, (kind, message))

    def lose(self) -> None:
        self._lease.lost = True
        self.fail(
            SessionConflictError,
            f"session {self.session_id!r}: the write lease (token {self.token}) was taken over; "
            "events after the takeover were not stored",
        )

    def _refuse(self) -> None:
        # Once a commit of this session failed (a refused fence: the lease was taken over),
        # every later append raises at once, as on SQLite: the agent must not run on with
        # a log nobody stores.
        raise_failure(self._failed.get(self.key))

    async def _release(self) -> None:
        await self._store._release(self)

    async def read_blob(self, hash: str) -> StoredBlob:
        return await self._store.get_blob(hash)

    async def flush(self) -> None:
        if self._state == "published":
            await self._store._barrier(self.key)
        raise_failure(self.error)

    def lease_valid(self) -> bool:
        return self.error is None and self._lease.valid()

    async def fence(self) -> None:
        """A fenced commit of everything written so far; then the lease's local deadline
        must still be ahead. A deadline passed again right after a second fence (the
        process keeps stalling past the TTL) fails the writer: it cannot vouch for its
        lease, so no tool of this session starts in this process any more."""
        if self._state != "published":
            await super().fence()  # refuses
            return
        for _ in range(2):
            await self._store._fence(self.key, self.session_id)
            raise_failure(self.error)
            if self._lease.valid():
                return
        self.fail(
            SessionConflictError,
            f"session {self.session_id!r}: the write lease (token {self.token}) expired again "
            "right after it was renewed; this process stopped acting for the session",
        )
        raise_failure(self.error)

    async def close(self) -> None:
        """Commit what was written, then give the lease back (the writer task releases it
        after the final commit, even if this call is cancelled), and surface a failure."""
        if self._state in ("closed", "discarded"):
            return
        published = self._state == "published"
        self._state = "closed"
        self._pending = []  # closing an unpublished handle must not invent an artifact
        if not published:
            await self._store._release(self)
            raise_failure(self.error)
            return
        try:
            self._store._check_task()
        except SessionStorageError:
            await self._store._release(self)
            raise
        waiter = Waiter()
        self._store._enqueue(Close(self.key, waiter, lambda: self._store._release(self)))
        await waiter.future
