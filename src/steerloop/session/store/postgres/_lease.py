"""PostgreSQL write leases (G-2): a row of the leases table per session.

* **Acquire.** The upsert succeeds only when there is no lease, the lease was released, or it
  has expired (judged by the server's clock, so hosts need no synchronised clocks). Each
  success bumps the session's **fencing token**, stamps a fresh lease id and records the
  store's ``owner`` and ``owner_key``; it runs in one short transaction bounded by
  ``lock_timeout``, so a lease row locked by a committing owner is reported as a conflict
  rather than waited for. The same transaction reads what is stored of the session.
* **Fence / renew.** One statement over every lease the store holds renews exactly those
  whose (lease id, token) are still current and unexpired; the batch commit runs it inside
  its transaction, the heartbeat on its own. A lease it does not return is lost.
* **Local deadline.** Each successful acquire, fence or renewal moves the lease's
  ``deadline``: the local monotonic time at which the statement was sent, plus the TTL. The
  server's expiry (its ``now()`` of that transaction plus the TTL) is never earlier, so until
  the deadline nobody can have taken the lease over; past it (a process paused by SIGSTOP
  wakes up to a passed deadline) the writer must fence again before a tool may start.
* **Release.** Best effort, and only by a holder that has not lost the lease; one that
  cannot be released expires after the TTL.
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ....errors import SessionConflictError, SessionPersistenceError, SessionStorageError
from ._pool import Connected
from ._schema import LeaseInfo

__all__ = ["PgLease", "PgLeases"]


@dataclass(eq=False, slots=True)
class PgLease:
    """A lease row this store holds (a ``WriteLease``)."""

    session_id: str
    owner: str
    lease_id: uuid.UUID
    token: int
    leases: PgLeases = field(repr=False)
    lost: bool = False
    """Taken over (or revoked, or expired): releasing it is not ours to do."""
    deadline: float = 0.0
    """Local monotonic time until which the lease is surely held (see the module note)."""

    def confirmed(self, sent: float, ttl: float) -> None:
        """A fence or renewal sent at monotonic ``sent`` committed: held until ``sent+ttl``."""
        self.deadline = max(self.deadline, sent + ttl)

    def valid(self) -> bool:
        """Whether the lease cannot have expired (nor been found lost)."""
        return not self.lost and time.monotonic() < self.deadline

    async def release(self) -> None:
        if not self.lost:
            await self.leases.release(self)


@dataclass(slots=True)
class Taken:
    """What ``PgLeases.acquire`` found: the lease (``None`` when it is held elsewhere), and
    either what is stored of the session or the holder's row."""

    lease: PgLease | None
    row: Any


class PgLeases:
    """The lease statements of one store."""

    def __init__(self, db: Connected) -> None:
        self._db = db
        self._tables = db.tables

    async def acquire(self, session_id: str) -> Taken:
        """Take the lease of ``session_id`` (taking over an expired one). With the lease,
        ``row`` has ``stored`` and ``last`` (the stored length); without, the holder's
        ``owner``, ``token`` and ``expires_at``, or ``None`` when its row was locked."""
        db, t = self._db, self._tables
        lease_id = uuid.uuid4()
        owner = db.owner
        lock_ms = db._lock_timeout_ms
        sent = time.monotonic()  # before the transaction whose now() stamps the expiry

        async def take_in(conn: Any) -> Taken:
            async with conn.transaction():
                await conn.execute(f"SET LOCAL lock_timeout = {lock_ms}")
                token = await conn.fetchval(
                    t.acquire, session_id, owner, lease_id, db.lease_ttl, db.owner_key
                )
                if token is None:
                    held = await conn.fetchrow(
                        f"SELECT owner, token, expires_at FROM {t.leases} WHERE session_id = $1",
                        session_id,
                    )
                    return Taken(None, held)
                base = await conn.fetchrow(
                    f"SELECT EXISTS (SELECT 1 FROM {t.sessions} WHERE session_id = $1) AS stored,"
                    f" coalesce((SELECT max(seq) FROM {t.events} WHERE session_id = $1), 0)"
                    " AS last",
                    session_id,
                )
                lease = PgLease(session_id, owner, lease_id, token, self)
                lease.confirmed(sent, db.lease_ttl)
                return Taken(lease, base)

        try:
            pool = await db._acquire_pool()
        except SessionStorageError as exc:
            raise SessionStorageError(f"taking the write lease of {session_id!r}: {exc}") from None
        with db._errors(f"taking the write lease of {session_id!r}"):
            async with pool.acquire() as conn:
                try:
                    return await take_in(conn)
                except db._pg.exceptions.LockNotAvailableError:
                    # A committing owner or a concurrent taker holds the row.
                    return Taken(None, None)

    @staticmethod
    def refusal(session_id: str, row: Any) -> SessionConflictError:
        """The conflict an opener gets when ``acquire`` found the lease held (``row``)."""
        if row is None:
            return SessionConflictError(
                f"session {session_id!r} already has a writer: its lease is being committed "
                "or taken over by another host"
            )
        return SessionConflictError(
            f"session {session_id!r} already has a writer: {row['owner']} holds its lease "
            f"(token {row['token']}) until {row['expires_at'].isoformat()}"
        )

    def fence_args(self, leases: Sequence[PgLease]) -> tuple[Any, ...]:
        """The arguments of ``tables.fence`` for ``leases`` (renewed by the TTL)."""
        return (
            [lease.session_id for lease in leases],
            [lease.lease_id for lease in leases],
            [lease.token for lease in leases],
            self._db.lease_ttl,
        )

    async def fence(self, conn: Any, leases: Sequence[PgLease]) -> set[str]:
        """Renew ``leases`` on ``conn`` (inside a batch's transaction): the sessions whose
        lease is still held."""
        return {row[0] for row in await conn.fetch(self._tables.fence, *self.fence_args(leases))}

    async def renew(self, leases: Sequence[PgLease]) -> set[str]:
        """The heartbeat: renew ``leases`` on the pool; the sessions whose lease is held.

        Raises:
            SessionStorageError: the server failed (nothing is known about the leases).
        """
        db = self._db
        pool = await db._acquire_pool()
        with db._errors("renewing leases"):
            rows = await pool.fetch(self._tables.fence, *self.fence_args(leases))
        return {row[0] for row in rows}

    async def release(self, lease: PgLease) -> None:
        """Give ``lease`` back now (best effort: one that cannot be released expires)."""
        db = self._db
        with contextlib.suppress(SessionPersistenceError):
            pool = await db._acquire_pool()
            with db._errors("releasing a lease"):
                await pool.execute(
                    self._tables.release, lease.session_id, lease.lease_id, lease.token
                )

    async def info(self, session_id: str) -> LeaseInfo | None:
        """The stored lease of ``session_id`` (``None`` if it never had one)."""
        db = self._db
        pool = await db._acquire_pool()
        with db._errors(f"reading the lease of {session_id!r}"):
            row = await pool.fetchrow(
                f"SELECT owner, token, expires_at, lease_id IS NOT NULL AND expires_at > now() "
                f"AS live FROM {self._tables.leases} WHERE session_id = $1",
                session_id,
            )
        if row is None:
            return None
        return LeaseInfo(
            session_id=session_id,
            owner=row["owner"],
            token=row["token"],
            expires_at=row["expires_at"],
            live=row["live"],
        )

    async def revoke(self, session_id: str) -> bool:
        """End the lease of ``session_id`` now and bump its token; whether one was held."""
        db = self._db
        pool = await db._acquire_pool()
        with db._errors(f"revoking the lease of {session_id!r}"):
            return (
                await pool.fetchval(
                    f"UPDATE {self._tables.leases} SET lease_id = NULL, token = token + 1, "
                    "expires_at = now() WHERE session_id = $1 AND lease_id IS NOT NULL "
                    "RETURNING 1",
                    session_id,
                )
                is not None
            )
