"""The PostgreSQL store (``postgresql://``): one database shared by many hosts.

Installed with the extra ``steerloop[postgres]`` (asyncpg, imported lazily).

Design note — write ownership (G-2) and durability. The store is split by concept:

* ``_pool``: options, the pool (opened and migrated on first use) and error translation.
* ``_lease``: the write lease of a session, a row of the leases table with a fencing token.
  ``open_writer`` takes it (a live lease makes the opener fail with ``SessionConflictError``
  at open time; taking over an expired lease is the explicit takeover path) and
  ``revoke_lease`` ends one at once (an operator fencing a host known to be dead).
* ``_writer``: the write handle. It buffers in memory until ``publish()`` (C7.2-19); only
  then are the session row and its events queued. ``discard`` and an unpublished ``close``
  release the lease and store nothing.
* ``_commit``: the writer task and group commit: every batch is one transaction that first
  fences the leases of its writers (an owner whose lease was taken over stores nothing and
  its next ``flush``/``close`` raises ``SessionConflictError``), runs riders, inserts and,
  with ``notify``, announces the batch (``_notify``); the heartbeat between batches renews
  the leases every third of the TTL (an expired lease is lost to its owner even before a
  takeover: the fence only renews unexpired leases).
* this module: the store itself, reads and administration.

Payloads are stored in a ``json`` column (the exact text, unlike ``jsonb``, which also
refuses ``\\u0000``). Tables live in one schema (default ``steerloop``, or ``?schema=`` in
the URL) with a schema-version table; migrations run on first use under an advisory lock.
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import json
from collections.abc import Iterable, Mapping
from typing import Any

from ...._media import blob_hash, check_blob_hash
from ....errors import (
    SessionConflictError,
    SessionPersistenceError,
    SessionPersistenceNotFoundError,
    SessionStorageError,
)
from ..._blobs import StoredBlob, checked_blob
from ..._events import SessionEvent
from ..._session import EventSink
from .._interface import (
    SessionInfo,
    SessionStore,
    check_page,
    decode_header,
    decode_rows,
    encode_header,
    last_time,
    page_rows,
    stored_header,
)
from ._commit import GroupCommit
from ._notify import FEED_CHANNEL, PAYLOAD_BYTES, escape_id, feed_payloads, parse_feed_payload
from ._schema import LOG_VERSION, SCHEMA_VERSION, LeaseInfo, asyncpg_module
from ._writer import PostgresWriter

__all__ = [
    "FEED_CHANNEL",
    "LOG_VERSION",
    "PAYLOAD_BYTES",
    "SCHEMA_VERSION",
    "LeaseInfo",
    "PostgresStore",
    "escape_id",
    "feed_payloads",
    "parse_feed_payload",
]


class PostgresStore(GroupCommit, SessionStore):
    """Sessions in PostgreSQL, shared by every runtime that opens the same database.

    Args:
        url: ``postgresql://user[:password]@host[:port]/db[?schema=NAME&lease_ttl=SECONDS
            &notify=1]``.
        schema: the schema holding steerloop's tables (overrides ``?schema=``).
        lease_ttl: seconds a write lease lives without a heartbeat (default 30).
        notify: announce every committed batch on the schema's feed channel
            (``steerloop_feed`` in the default schema; ``Tables.feed_channel``) (one
            ``pg_notify`` inside the batch's transaction, payload ``<sid>:<max_seq>`` per
            session, comma-separated; see ``feed_payloads``). Off by default (overrides
            ``?notify=``): the service's SSE readers need it, library users pay nothing.
        connect_timeout: seconds to wait for the server.
        lock_timeout: seconds ``open_writer`` waits for a lease row locked by a committing
            owner before it reports a conflict.
        owner_key: recorded with every lease this store takes (``steerloop_leases.owner_key``):
            the service worker's liveness key, so routing and revocation find the owner's
            process. ``stamp_leases`` changes it for leases taken afterwards.

    Raises:
        ImportError: asyncpg is not installed (extra ``steerloop[postgres]``).
        ValueError: a malformed URL or option.
    """

    def __init__(
        self,
        url: str,
        *,
        schema: str | None = None,
        lease_ttl: float | None = None,
        connect_timeout: float = 5.0,
        lock_timeout: float = 0.25,
        pool_size: int = 4,
        owner_key: int | None = None,
        notify: bool | None = None,
    ) -> None:
        super().__init__(
            url,
            schema=schema,
            lease_ttl=lease_ttl,
            connect_timeout=connect_timeout,
            lock_timeout=lock_timeout,
            pool_size=pool_size,
            owner_key=owner_key,
            notify=notify,
        )

    # --- reading ----------------------------------------------------------------------------

    async def load(self, session_id: str) -> tuple[SessionEvent, ...]:
        pool = await self._acquire_pool()
        t = self._tables
        with self._errors(f"loading session {session_id!r}"):
            async with pool.acquire() as conn, conn.transaction(readonly=True):
                rows = await conn.fetch(
                    f"SELECT seq, payload FROM {t.events} WHERE session_id = $1 ORDER BY seq",
                    session_id,
                )
                if not rows and not await conn.fetchval(
                    f"SELECT EXISTS (SELECT 1 FROM {t.sessions} WHERE session_id = $1)",
                    session_id,
                ):
                    raise SessionPersistenceNotFoundError(
                        f"no session {session_id!r} in {self.url}"
                    )
        return decode_rows(rows, f"session {session_id!r}")

    async def load_after(
        self, session_id: str, after: int, limit: int
    ) -> tuple[dict[str, Any], ...]:
        check_page(after, limit)
        pool = await self._acquire_pool()
        t = self._tables
        with self._errors(f"reading session {session_id!r}"):
            rows = await pool.fetch(self._tables.page, session_id, after, limit)
            if not rows and not await pool.fetchval(
                f"SELECT EXISTS (SELECT 1 FROM {t.sessions} WHERE session_id = $1)", session_id
            ):
                raise SessionPersistenceNotFoundError(f"no session {session_id!r} in {self.url}")
        return page_rows(rows, after, f"session {session_id!r}")

    async def exists(self, session_id: str) -> bool:
        pool = await self._acquire_pool()
        with self._errors(f"looking up session {session_id!r}"):
            return bool(
                await pool.fetchval(
                    f"SELECT EXISTS (SELECT 1 FROM {self._tables.sessions} WHERE session_id = $1)",
                    session_id,
                )
            )

    async def load_header(self, session_id: str) -> dict[str, Any]:
        """The stored session header (EVENTS.md §2.7); optional fields absent when unset.

        Raises:
            SessionPersistenceNotFoundError: nothing is stored under the id.
        """
        pool = await self._acquire_pool()
        with self._errors(f"reading the header of {session_id!r}"):
            text = await pool.fetchval(
                f"SELECT header FROM {self._tables.sessions} WHERE session_id = $1", session_id
            )
        return self._header(session_id, text)

    def _header(self, session_id: str, text: str | None) -> dict[str, Any]:
        if text is None:
            raise SessionPersistenceNotFoundError(f"no session {session_id!r} in {self.url}")
        return decode_header(text, f"session {session_id!r} in {self.url}")

    async def info(self, session_id: str) -> SessionInfo:
        pool = await self._acquire_pool()
        t = self._tables
        with self._errors(f"reading the summary of {session_id!r}"):
            async with pool.acquire() as conn, conn.transaction(readonly=True):
                text = await conn.fetchval(
                    f"SELECT header FROM {t.sessions} WHERE session_id = $1", session_id
                )
                row = await conn.fetchrow(
                    f"SELECT count(*) AS n, (SELECT payload FROM {t.events} WHERE session_id = $1 "
                    f"ORDER BY seq DESC LIMIT 1) AS last FROM {t.events} WHERE session_id = $1",
                    session_id,
                )
        header = self._header(session_id, text)
        return SessionInfo(session_id, row["n"], last_time(row["last"]), header)

    async def list(self) -> tuple[str, ...]:
        pool = await self._acquire_pool()
        with self._errors("listing sessions"):
            rows = await pool.fetch(f"SELECT session_id FROM {self._tables.sessions}")
        return tuple(sorted(row["session_id"] for row in rows))

    async def lease(self, session_id: str) -> LeaseInfo | None:
        """The stored write lease of ``session_id`` (``None`` if it never had one)."""
        return await self._leases.info(session_id)

    async def raw(self, session_id: str) -> tuple[str, ...]:
        """The stored JSON text of each event in seq order (``()`` when nothing is stored)."""
        pool = await self._acquire_pool()
        with self._errors(f"reading session {session_id!r}"):
            rows = await pool.fetch(
                f"SELECT payload FROM {self._tables.events} WHERE session_id = $1 ORDER BY seq",
                session_id,
            )
        return tuple(row["payload"] for row in rows)

    # --- administration ---------------------------------------------------------------------

    async def delete(self, session_id: str) -> None:
        if session_id in self._writers:
            raise SessionConflictError(f"session {session_id!r} has an open writer")
        pool = await self._acquire_pool()
        t = self._tables
        with self._errors(f"deleting session {session_id!r}"):
            async with pool.acquire() as conn, conn.transaction():
                await conn.execute(f"SET LOCAL lock_timeout = {self._lock_timeout_ms}")
                held = await conn.fetchrow(
                    f"SELECT owner, expires_at FROM {t.leases} WHERE session_id = $1 "
                    "AND lease_id IS NOT NULL AND expires_at > now() FOR UPDATE",
                    session_id,
                )
                if held is not None:
                    raise SessionConflictError(
                        f"session {session_id!r} has an open writer ({held['owner']} holds its "
                        f"lease until {held['expires_at'].isoformat()})"
                    )
                await self._collect_blobs(conn, session_id)
                deleted = await conn.fetchval(
                    f"DELETE FROM {t.sessions} WHERE session_id = $1 RETURNING 1", session_id
                )
                if deleted is None:
                    raise SessionPersistenceNotFoundError(
                        f"no session {session_id!r} in {self.url}"
                    )
                await conn.execute(f"DELETE FROM {t.leases} WHERE session_id = $1", session_id)

    async def _collect_blobs(self, conn: Any, session_id: str) -> None:
        """Remove the blobs only ``session_id`` references (its references go with its row).

        In a savepoint: a reference another session's commit took meanwhile makes the
        removal fail on the foreign key, and then the blob is simply kept.
        """
        asyncpg = asyncpg_module()
        try:
            async with conn.transaction():
                await conn.execute(self._tables.collect_blobs, session_id)
        except asyncpg.ForeignKeyViolationError:
            pass

    # --- blobs ----------------------------------------------------------------------------

    async def get_blob(self, hash: str, *, session_id: str | None = None) -> StoredBlob:
        check_blob_hash(hash)
        pool = await self._acquire_pool()
        t = self._tables
        with self._errors(f"reading blob {hash}"):
            if session_id is None:
                row = await pool.fetchrow(t.read_blob, hash)
            else:
                row = await pool.fetchrow(t.read_session_blob, session_id, hash)
        if row is None:
            owner = f" for session {session_id!r}" if session_id is not None else ""
            raise SessionPersistenceNotFoundError(f"no blob {hash}{owner} in {self.url}")
        return checked_blob(hash, row[0], row[1], self.url)

    async def put_blob(self, data: bytes, media_type: str) -> str:
        if not isinstance(data, bytes) or not isinstance(media_type, str):
            raise ValueError("put_blob takes bytes and a media type")
        hash = blob_hash(data)
        pool = await self._acquire_pool()
        with self._errors(f"storing blob {hash}"):
            await pool.execute(self._tables.insert_blobs, [hash], [media_type], [data])
        return hash

    async def blob_exists(self, hash: str) -> bool:
        check_blob_hash(hash)
        pool = await self._acquire_pool()
        with self._errors(f"looking up blob {hash}"):
            return bool(
                await pool.fetchval(
                    f"SELECT EXISTS (SELECT 1 FROM {self._tables.blobs} WHERE hash = $1)", hash
                )
            )

    async def revoke_lease(self, session_id: str) -> bool:
        """End the write lease of ``session_id`` now and bump its fencing token.

        For an operator who knows the holder is gone: the holder's next commit is refused
        (``SessionConflictError``) and the next ``open_writer`` succeeds at once. Returns
        whether a lease was held.
        """
        return await self._leases.revoke(session_id)

    async def put_raw(self, session_id: str, lines: Iterable[str | Mapping[str, Any]]) -> None:
        """Store ``lines`` (JSON text or objects) as the log of ``session_id``, unchecked.

        For tests and repair tools: replaces whatever is stored; refused while a writer of
        this store holds the session.
        """
        if session_id in self._writers:
            raise SessionConflictError(f"session {session_id!r} has an open writer")
        texts = [line if isinstance(line, str) else json.dumps(line) for line in lines]
        pool = await self._acquire_pool()
        t = self._tables
        with self._errors(f"storing session {session_id!r}"):
            async with pool.acquire() as conn, conn.transaction():
                await conn.execute(f"DELETE FROM {t.sessions} WHERE session_id = $1", session_id)
                await conn.execute(
                    f"INSERT INTO {t.sessions} (session_id, header) VALUES ($1, $2)",
                    session_id,
                    encode_header(stored_header(session_id, {})),
                )
                await conn.execute(
                    t.insert_events,
                    [session_id] * len(texts),
                    list(range(1, len(texts) + 1)),
                    texts,
                )

    # --- writing ----------------------------------------------------------------------------

    async def open_writer(self, session_id: str) -> EventSink:
        """Take the write lease of ``session_id`` (taking over an expired one).

        Raises:
            SessionConflictError: a live lease is held, here or by another host.
            SessionStorageError: the server cannot be reached.
        """
        if self._closed:
            raise SessionStorageError(f"PostgreSQL store {self.url} is closed")
        if session_id in self._writers:
            raise SessionConflictError(f"session {session_id!r} already has a writer")
        loop = asyncio.get_running_loop()
        taken = await self._leases.acquire(session_id)
        if session_id in self._writers:  # another opener won while this one awaited
            raise SessionConflictError(f"session {session_id!r} already has a writer")
        if taken.lease is None:
            raise self._leases.refusal(session_id, taken.row)
        self._keys += 1
        writer = PostgresWriter(
            self, self._keys, taken.lease, stored=taken.row["stored"], base_len=taken.row["last"]
        )
        self._writers[session_id] = writer
        self._by_key[writer.key] = writer
        self._ensure_task(loop)
        return writer

    async def close(self) -> None:
        """Close open writers (flushing what they wrote), stop the writer task, disconnect."""
        if self._closed:
            return
        errors: builtins.list[Exception] = []
        for writer in list(self._writers.values()):
            try:
                await writer.close()
            except SessionPersistenceError as exc:
                errors.append(exc)
        self._stopping = True
        if self._task is not None:
            assert self._wake is not None
            self._wake.set()
            with contextlib.suppress(Exception):
                await self._task
        self._closed = True
        if self._pool is not None:
            pool, self._pool = self._pool, None
            with contextlib.suppress(Exception):
                await asyncio.wait_for(pool.close(), 5)
            pool.terminate()
        if len(errors) == 1:
            raise errors[0]
        if errors:
            raise ExceptionGroup(f"closing {self.url} failed", errors)
