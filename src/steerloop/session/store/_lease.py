"""The write lease (G-2) as both database stores hold it: one writer per session.

A store hands out a session's writer only while it holds the session's lease, and gives the
lease back only after the writer's final commit (``Close`` in ``_group``), so a new writer
can never get in ahead of queued events. Each backend's lease class has an ``acquire``
constructor taking what its medium needs and raising ``SessionConflictError`` when the lease
is held elsewhere; what they share is ``WriteLease``:

* **SQLite** (``sqlite._schema.Lease``): an exclusive ``flock`` on a lock file. The kernel
  holds it until it is released or the process dies, so nobody can take it over while it is
  held: it is never renewed, its commits need no fence, and it has no fencing token
  (``token`` is ``None``). ``release`` is synchronous.
* **PostgreSQL** (``postgres._lease.PgLease``): a row of the leases table with a TTL judged
  by the server's clock. Every acquisition bumps the session's fencing ``token``; the store's
  heartbeat renews and every batch commit fences all its held leases in one statement
  (``PgLeases.fence``), and a lease found taken over is ``lost``: its writer fails and the
  lease is not released (it is someone else's). ``release`` is a coroutine (best effort: a
  lease that cannot be given back expires after its TTL).
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Protocol

__all__ = ["WriteLease"]


class WriteLease(Protocol):
    """A held write lease of one session."""

    @property
    def session_id(self) -> str:
        """The session the lease is for."""
        ...

    @property
    def owner(self) -> str:
        """Who holds it, as other openers are told on a conflict."""
        ...

    @property
    def token(self) -> int | None:
        """The fencing token (``None`` for a lease nobody can take over while it is held)."""
        ...

    def release(self) -> Awaitable[None] | None:
        """Give the lease back; idempotent. An awaitable when the release does I/O (the
        group committer awaits it before it settles the writer's close)."""
        ...
