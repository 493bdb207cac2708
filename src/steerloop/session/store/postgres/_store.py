"""The PostgreSQL store (``postgresql://``): one database shared by many hosts.

Installed with the extra ``steerloop[postgres]`` (asyncpg, imported lazily).

Design note — write ownership (G-2) and durability:

* **Lease.** ``open_writer`` takes the session's row in the lease table: the upsert succeeds
  only when there is no lease, the lease was released, or it has expired (judged by the
  server's clock, so hosts need no synchronised clocks). Each success bumps the session's
  **fencing token** and stamps a fresh lease id; a live lease makes the opener fail with
  ``SessionConflictError`` at open time. Taking over an expired lease is the explicit takeover
  path; ``revoke_lease`` ends a lease at once (an operator fencing a host known to be dead).
* **Fencing.** Every batch commit runs ``UPDATE lease ... WHERE token = held AND lease_id =
  held`` in the same transaction as the event inserts. An owner whose lease was taken over
  (paused process, network split) matches no row, so nothing of its batch is stored and its
  next ``flush``/``close`` raises ``SessionConflictError``. Row locks on the lease row order a
  commit and a takeover: whichever commits first wins, the other sees its result.
* **Heartbeat.** The store's background task renews the leases of its open writers every
  third of the TTL (and each commit renews the sessions it writes). A loop that stops running
  stops renewing, so its leases expire and can be taken over; an expired lease is lost to its
  owner even before a takeover (the fence only renews unexpired leases).
* **Group commit.** ``EventSink.write`` is synchronous: it queues the event and wakes the
  store's single writer task, which drives the shared group committer (``store._group``):
  everything queued (for every session of the store) goes to ``commit_batch`` as one
  transaction. ``flush`` is a barrier on that queue; ``close`` is a last barrier after which
  the task gives the lease back. A commit that fails fails the writers of that batch for
  good (``SessionStorageError``, or ``SessionConflictError`` for a refused fence): their next
  write raises at once, the stored log stays a valid prefix, and resume repair continues
  from there.
* **Opening.** ``open_writer`` takes the lease in one short transaction on the pool, bounded
  by ``lock_timeout``: a lease row locked by a committing owner is reported as a conflict
  rather than waited for.
* **Publication (C7.2-19).** A writer buffers in memory until ``publish()``; only then are
  the session row and its events queued. ``discard`` and an unpublished ``close`` release the
  lease and store nothing.

Payloads are stored in a ``json`` column (the exact text, unlike ``jsonb``, which also
refuses ``\\u0000``). Tables live in one schema (default ``steerloop``, or ``?schema=`` in
the URL) with a schema-version table; migrations run on first use under an advisory lock.
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import json
import os
import socket
import uuid
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from ....errors import (
    SessionConflictError,
    SessionPersistenceError,
    SessionPersistenceNotFoundError,
    SessionStorageError,
)
from ..._events import SessionEvent
from ..._session import EventSink
from .._group import (
    Append,
    Barrier,
    Batch,
    Close,
    Failure,
    GroupCommitter,
    Op,
    Publish,
    Unit,
    Waiter,
    raise_failure,
)
from .._interface import (
    BufferedWriter,
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
from ._schema import (
    LOG_VERSION,
    SCHEMA_VERSION,
    LeaseInfo,
    Tables,
    Url,
    asyncpg_module,
    migrate,
)

__all__ = [
    "FEED_CHANNEL",
    "LOG_VERSION",
    "SCHEMA_VERSION",
    "LeaseInfo",
    "PostgresStore",
    "escape_id",
    "feed_payloads",
    "parse_feed_payload",
]

FEED_CHANNEL = "steerloop_feed"
"""The channel a ``notify=True`` store announces its committed batches on."""

PAYLOAD_BYTES = 7900  # the server refuses a payload of 8000 bytes or more


def escape_id(session_id: str) -> str:
    """A session id as it appears in a ``steerloop_feed`` payload (no bare ``,`` or ``:``)."""
    return session_id.replace("%", "%25").replace(",", "%2C").replace(":", "%3A")


def _unescape(text: str) -> str:
    return text.replace("%3A", ":").replace("%2C", ",").replace("%25", "%")


def feed_payloads(tops: Mapping[str, int]) -> builtins.list[str]:
    """The ``steerloop_feed`` payloads announcing ``{session_id: max_seq}``:
    ``<sid>:<max_seq>[,<sid>:<max_seq>…]`` with ids escaped (``escape_id``). One payload
    unless it would pass the server's 8000-byte limit."""
    payloads: builtins.list[str] = []
    items: builtins.list[str] = []
    size = 0
    for sid, seq in tops.items():
        item = f"{escape_id(sid)}:{seq}"
        length = len(item.encode()) + 1
        if items and size + length > PAYLOAD_BYTES:
            payloads.append(",".join(items))
            items, size = [], 0
        items.append(item)
        size += length
    if items:
        payloads.append(",".join(items))
    return payloads


def parse_feed_payload(payload: str) -> builtins.list[tuple[str, int, int | None]]:
    """The items of a ``steerloop_feed`` payload as ``(session_id, seq, n)``: a committed
    batch is ``<sid>:<max_seq>`` (``n`` None), live frames are ``<sid>:<after_seq>:<n>``.
    Malformed items are skipped."""
    out: builtins.list[tuple[str, int, int | None]] = []
    for item in payload.split(","):
        parts = item.split(":")
        if len(parts) not in (2, 3) or not parts[0] or not all(p.isdigit() for p in parts[1:]):
            continue
        n = int(parts[2]) if len(parts) == 3 else None
        out.append((_unescape(parts[0]), int(parts[1]), n))
    return out


class PostgresStore(SessionStore):
    """Sessions in PostgreSQL, shared by every runtime that opens the same database.

    Args:
        url: ``postgresql://user[:password]@host[:port]/db[?schema=NAME&lease_ttl=SECONDS
            &notify=1]``.
        schema: the schema holding steerloop's tables (overrides ``?schema=``).
        lease_ttl: seconds a write lease lives without a heartbeat (default 30).
        notify: announce every committed batch on the channel ``steerloop_feed`` (one
            ``pg_notify`` inside the batch's transaction, payload ``<sid>:<max_seq>`` per
            session, comma-separated; see ``feed_payloads``). Off by default (overrides
            ``?notify=``): the service's SSE readers need it, library users pay nothing.
        connect_timeout: seconds to wait for the server.
        lock_timeout: seconds ``open_writer`` waits for a lease row locked by a committing
            owner before it reports a conflict.
        owner_key: recorded with every lease this store takes (``steerloop_leases.owner_key``):
            the service worker's liveness key, so routing and revocation find the owner's
            process. Settable; a new value applies to leases taken afterwards.

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
        self._pg = asyncpg_module()
        self._url = Url(url)
        self.notify = self._url.notify if notify is None else bool(notify)
        self.url = self._url.display
        ttl = lease_ttl if lease_ttl is not None else self._url.lease_ttl
        self.lease_ttl = 30.0 if ttl is None else float(ttl)
        if not self.lease_ttl > 0:
            raise ValueError(f"lease_ttl must be positive, not {self.lease_ttl!r}")
        self._tables = Tables(schema or self._url.schema)
        self._connect_timeout = connect_timeout
        self._lock_timeout_ms = max(1, int(lock_timeout * 1000))
        self._pool_size = pool_size
        self.owner = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self.owner_key = owner_key
        self.application_name = f"steerloop {self.owner}"[-63:]  # the server keeps 63 bytes
        self._pool: Any = None
        self._pool_lock: asyncio.Lock | None = None
        self._writers: dict[str, _PostgresWriter] = {}
        self._by_key: dict[int, _PostgresWriter] = {}
        self._keys = 0
        # Group commit: operations in order, drained by the writer task (``_run``).
        self._group = GroupCommitter(self.url)
        self._ops: builtins.list[Op] = []
        self._inflight: builtins.list[Op] = []  # the batch being committed
        self._wake: asyncio.Event | None = None
        self._task: asyncio.Task[None] | None = None
        self._stopping = False
        self._closed = False
        self._commits = 0

    @property
    def schema(self) -> str:
        return self._tables.schema

    @property
    def dsn(self) -> str:
        """What asyncpg connects to (the URL without steerloop's options; may hold a
        password: never log it, log ``url``)."""
        return self._url.dsn

    @property
    def tables(self) -> Tables:
        """The schema-qualified table names (for the service, which shares the database)."""
        return self._tables

    async def pool(self) -> Any:
        """The store's asyncpg pool (opened and migrated on first use)."""
        return await self._acquire_pool()

    def writer(self, session_id: str) -> _PostgresWriter | None:
        """The open write handle of ``session_id`` in this store, if any (for ``attach``)."""
        return self._writers.get(session_id)

    @property
    def commits(self) -> int:
        """Batch transactions committed so far (group commit makes this < events written)."""
        return self._commits

    # --- connections and error translation ------------------------------------------------

    @contextlib.contextmanager
    def _errors(self, what: str) -> Iterator[None]:
        """Translate backend failures into ``SessionStorageError`` (never naming the password)."""
        try:
            yield
        except SessionPersistenceError:
            raise
        except (
            OSError,
            TimeoutError,
            self._pg.PostgresError,
            self._pg.InterfaceError,
            self._pg.exceptions.InternalClientError,
        ) as exc:
            detail = self._url.scrub(f"{type(exc).__name__}: {exc}")
            raise SessionStorageError(
                f"PostgreSQL store {self.url}: {what} failed: {detail}"
            ) from None

    def _connect_kwargs(self) -> dict[str, Any]:
        # A paused owner must not keep the lease row locked forever inside a transaction.
        idle_ms = max(1000, int(self.lease_ttl * 1000))
        return {
            "dsn": self._url.dsn,
            "timeout": self._connect_timeout,
            "server_settings": {
                "idle_in_transaction_session_timeout": str(idle_ms),
                # Which store a server connection belongs to (operators; fault tests).
                "application_name": self.application_name,
            },
        }

    async def _acquire_pool(self) -> Any:
        if self._closed:
            raise SessionStorageError(f"PostgreSQL store {self.url} is closed")
        if self._pool is not None:
            return self._pool
        if self._pool_lock is None:
            self._pool_lock = asyncio.Lock()
        async with self._pool_lock:
            if self._pool is None:
                with self._errors("connecting"):
                    pool = await self._pg.create_pool(
                        min_size=1, max_size=self._pool_size, **self._connect_kwargs()
                    )
                    try:
                        async with pool.acquire() as conn:
                            await migrate(conn, self._tables)
                    except BaseException:
                        pool.terminate()
                        raise
                    self._pool = pool
        return self._pool

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
        pool = await self._acquire_pool()
        with self._errors(f"reading the lease of {session_id!r}"):
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
                deleted = await conn.fetchval(
                    f"DELETE FROM {t.sessions} WHERE session_id = $1 RETURNING 1", session_id
                )
                if deleted is None:
                    raise SessionPersistenceNotFoundError(
                        f"no session {session_id!r} in {self.url}"
                    )
                await conn.execute(f"DELETE FROM {t.leases} WHERE session_id = $1", session_id)

    async def revoke_lease(self, session_id: str) -> bool:
        """End the write lease of ``session_id`` now and bump its fencing token.

        For an operator who knows the holder is gone: the holder's next commit is refused
        (``SessionConflictError``) and the next ``open_writer`` succeeds at once. Returns
        whether a lease was held.
        """
        pool = await self._acquire_pool()
        with self._errors(f"revoking the lease of {session_id!r}"):
            return (
                await pool.fetchval(
                    f"UPDATE {self._tables.leases} SET lease_id = NULL, token = token + 1, "
                    "expires_at = now() WHERE session_id = $1 AND lease_id IS NOT NULL "
                    "RETURNING 1",
                    session_id,
                )
                is not None
            )

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
        lease_id = uuid.uuid4()
        t = self._tables
        lock_ms = self._lock_timeout_ms

        async def take(conn: Any) -> tuple[int | None, Any]:
            try:
                return await take_in(conn)
            except self._pg.exceptions.LockNotAvailableError:
                return None, None  # a committing owner or a concurrent taker holds the row

        async def take_in(conn: Any) -> tuple[int | None, Any]:
            async with conn.transaction():
                await conn.execute(f"SET LOCAL lock_timeout = {lock_ms}")
                token = await conn.fetchval(
                    t.acquire, session_id, self.owner, lease_id, self.lease_ttl, self.owner_key
                )
                if token is None:
                    held = await conn.fetchrow(
                        f"SELECT owner, token, expires_at FROM {t.leases} WHERE session_id = $1",
                        session_id,
                    )
                    return None, held
                base = await conn.fetchrow(
                    f"SELECT EXISTS (SELECT 1 FROM {t.sessions} WHERE session_id = $1) AS stored,"
                    f" coalesce((SELECT max(seq) FROM {t.events} WHERE session_id = $1), 0)"
                    " AS last",
                    session_id,
                )
                return token, base

        try:
            pool = await self._acquire_pool()
        except SessionStorageError as exc:
            raise SessionStorageError(f"taking the write lease of {session_id!r}: {exc}") from None
        with self._errors(f"taking the write lease of {session_id!r}"):
            async with pool.acquire() as conn:
                token, row = await take(conn)
        if session_id in self._writers:  # another opener won while this one awaited
            raise SessionConflictError(f"session {session_id!r} already has a writer")
        if token is None and row is None:
            raise SessionConflictError(
                f"session {session_id!r} already has a writer: its lease is being committed "
                "or taken over by another host"
            )
        if token is None:
            raise SessionConflictError(
                f"session {session_id!r} already has a writer: {row['owner']} holds its lease "
                f"(token {row['token']}) until {row['expires_at'].isoformat()}"
            )
        self._keys += 1
        writer = _PostgresWriter(
            self,
            self._keys,
            session_id,
            lease_id,
            token,
            stored=row["stored"],
            base_len=row["last"],
        )
        self._writers[session_id] = writer
        self._by_key[writer.key] = writer
        self._ensure_task(loop)
        return writer

    def _ensure_task(self, loop: asyncio.AbstractEventLoop) -> None:
        if self._task is None:
            self._wake = asyncio.Event()
            self._task = loop.create_task(self._run(), name=f"steerloop-postgres {self.url}")
            self._task.add_done_callback(self._task_ended)
        assert self._wake is not None
        self._wake.set()  # start heartbeats for the new lease

    def _enqueue(self, op: Op) -> None:
        self._ops.append(op)
        if self._wake is not None:
            self._wake.set()

    def _check_task(self) -> None:
        if self._task is None or self._task.done():
            raise SessionStorageError(f"PostgreSQL store {self.url}: the writer task is gone")

    async def _barrier(self, key: int) -> None:
        """Return once everything queued so far was committed (or refused); raise the
        writer's failure."""
        self._check_task()
        waiter = Waiter()
        self._enqueue(Barrier(key, waiter))
        await waiter.future

    def _task_ended(self, task: asyncio.Task[None]) -> None:
        error = None if task.cancelled() else task.exception()
        message = f"PostgreSQL store {self.url}: the writer task ended ({error!r})"
        if not self._stopping:  # nothing more will be committed: every write must fail
            for writer in self._writers.values():
                writer.fail(
                    SessionStorageError,
                    f"{message}; session {writer.session_id!r} takes no more writes",
                )
        ops, self._ops = self._inflight + self._ops, []
        self._inflight = []
        self._group.abandon(ops, SessionStorageError(message))
        self._group.drop_releases()  # nobody runs them now: those leases expire instead
        self._group.deliver()

    async def _run(self) -> None:
        """The store's writer task (the group-commit driver of PostgreSQL): group commits,
        and lease heartbeats between them."""
        assert self._wake is not None
        loop = asyncio.get_running_loop()
        group = self._group
        interval = self.lease_ttl / 3
        next_beat = loop.time() + interval
        while True:
            if not self._ops and not self._stopping:
                timeout = max(0.0, next_beat - loop.time()) if self._writers else None
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(timeout):
                        await self._wake.wait()
            self._wake.clear()
            if self._ops:
                ops, self._ops = self._ops, []
                self._inflight = ops
                try:
                    batch = group.plan(ops)
                    group.finish(batch, await self.commit_batch(batch))
                except Exception as exc:  # a bug must fail this batch, not end the task
                    group.abandon(ops, exc)
                await group.released()  # a close returns after its lease is given back
                self._inflight = []
                group.deliver()
            if self._writers and loop.time() >= next_beat:
                await self._renew()
                next_beat = loop.time() + interval
            if self._stopping and not self._ops:
                return

    def _fence_args(self, writers: builtins.list[_PostgresWriter]) -> tuple[Any, ...]:
        return (
            [w.session_id for w in writers],
            [w.lease_id for w in writers],
            [w.token for w in writers],
            self.lease_ttl,
        )

    async def commit_batch(self, batch: Batch) -> str | None:
        """One transaction for the whole batch; a refused fence drops only that session."""
        units = {key: unit for key, unit in batch.units.items() if key in self._by_key}
        if not units:
            return None
        lost: builtins.list[int] = []
        try:
            pool = await self._acquire_pool()
            with self._errors("committing events"):
                async with pool.acquire() as conn, conn.transaction():
                    lost = await self._commit_in(conn, units)
            self._commits += 1
        except SessionPersistenceError as exc:
            for key in units:
                if key not in lost:
                    self._group.fail(key, (type(exc), str(exc)))
        except Exception as exc:  # a bug must fail this batch, not end the writer task
            for key in units:
                self._group.fail(
                    key, (SessionStorageError, f"committing to {self.url} failed: {exc!r}")
                )
        for key in lost:
            self._by_key[key].lose()
        for key in units:  # ran (with their events) or lost with them
            writer = self._by_key.get(key)
            if writer is not None and writer._riders:
                top = writer._planned
                failed = writer.error is not None
                writer._riders = [] if failed else [r for r in writer._riders if r[0] > top]
        return None

    async def _commit_in(self, conn: Any, units: dict[int, Unit]) -> builtins.list[int]:
        """The body of a batch transaction; returns the writers whose fence was refused."""
        t = self._tables
        writers = {key: self._by_key[key] for key in units}
        fenced = {
            row[0] for row in await conn.fetch(t.fence, *self._fence_args(list(writers.values())))
        }
        lost = [key for key, w in writers.items() if w.session_id not in fenced]
        live = [key for key, w in writers.items() if w.session_id in fenced]
        for key in live:
            top = units[key].last_seq()
            if top is not None:
                writers[key]._planned = max(writers[key]._planned, top)
        live = [key for key in live if await self._run_riders(conn, writers[key])]
        fresh = [
            key
            for key in live
            if (publish := units[key].publish) is not None and publish.header is not None
        ]
        if fresh:
            headers = [units[key].publish.header for key in fresh]  # type: ignore[union-attr]
            created = await conn.fetch(
                f"INSERT INTO {t.sessions} (session_id, header) "
                "SELECT * FROM unnest($1::text[], $2::json[]) "
                "ON CONFLICT DO NOTHING RETURNING session_id",
                [units[key].session_id for key in fresh],
                [encode_header(header) for header in headers],
            )
            clash = {units[key].session_id for key in fresh} - {row[0] for row in created}
            for key in live:
                if units[key].session_id in clash:
                    self._group.fail(
                        key,
                        (
                            SessionConflictError,
                            f"session {units[key].session_id!r} was stored in {self.url} by "
                            "someone else since its writer was opened",
                        ),
                    )
            live = [key for key in live if units[key].session_id not in clash]
        sids: builtins.list[str] = []
        seqs: builtins.list[int] = []
        texts: builtins.list[str] = []
        for key in live:
            unit = units[key]
            if unit.publish is not None:
                for seq, text in unit.publish.rows:
                    sids.append(unit.session_id)
                    seqs.append(seq)
                    texts.append(text)
            for sid, seq, text in unit.rows:
                sids.append(sid)
                seqs.append(seq)
                texts.append(text)
        if sids:
            await conn.execute(t.insert_events, sids, seqs, texts)
            if self.notify:
                # Delivered at commit, and only if the batch commits: a refused fence or a
                # failed transaction announces nothing.
                tops: dict[str, int] = {}
                for sid, seq in zip(sids, seqs, strict=True):
                    tops[sid] = max(seq, tops.get(sid, 0))
                for payload in feed_payloads(tops):
                    await conn.execute("SELECT pg_notify($1, $2)", FEED_CHANNEL, payload)
        return lost

    async def _run_riders(self, conn: Any, writer: _PostgresWriter) -> bool:
        """Run the statements attached to the events of ``writer`` this batch commits, in a
        savepoint: a failing one fails that writer (its events of this batch are not stored
        either, so event and statement stay together). Returns whether the writer is kept."""
        due = [r for r in writer._riders if r[0] <= writer._planned]
        if not due:
            return True
        try:
            async with conn.transaction():  # a savepoint inside the batch transaction
                for _seq, sql, args in due:
                    await conn.execute(sql, *args)
        except self._pg.PostgresError as exc:
            writer.fail(
                SessionStorageError,
                f"session {writer.session_id!r}: a statement attached to seq {due[0][0]} "
                f"failed: {type(exc).__name__}: {self._url.scrub(str(exc))}",
            )
            return False
        return True

    async def _renew(self) -> None:
        """Heartbeat: extend this store's leases; a lease found taken over fences its writer."""
        held = [w for w in self._writers.values() if w.error is None]
        if not held:
            return
        try:
            pool = await self._acquire_pool()
            with self._errors("renewing leases"):
                rows = await pool.fetch(self._tables.fence, *self._fence_args(held))
        except Exception:
            return  # transient: a lease that really expires is caught by the next fence
        renewed = {row[0] for row in rows}
        for w in held:
            if w.session_id not in renewed:
                w.lose()

    async def _release(self, writer: _PostgresWriter) -> None:
        if self._writers.get(writer.session_id) is writer:
            del self._writers[writer.session_id]
        self._by_key.pop(writer.key, None)
        if writer.lost:
            return  # not ours any more
        # Best effort: a lease that cannot be released expires after ``lease_ttl``.
        with contextlib.suppress(SessionPersistenceError):
            pool = await self._acquire_pool()
            with self._errors("releasing a lease"):
                await pool.execute(
                    self._tables.release, writer.session_id, writer.lease_id, writer.token
                )

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


class _PostgresWriter(BufferedWriter):
    """The write handle of one session: holds its lease, buffers until ``publish``."""

    def __init__(
        self,
        store: PostgresStore,
        key: int,
        session_id: str,
        lease_id: uuid.UUID,
        token: int,
        *,
        stored: bool,
        base_len: int,
    ) -> None:
        super().__init__(session_id, base_len)
        self._store = store
        self.key = key
        self.lease_id = lease_id
        self.token = token
        self._stored = stored
        # Sticky failure: the store's committer keeps it (``failed[key]``); raised by
        # write/flush/close/publish once known, and later events are dropped so the stored
        # log never gets a gap.
        self._failed = store._group.failed
        self.lost = False  # the lease was taken over: releasing it is not ours to do
        # Riders (``attach``): statements committed with the batch that stores their seq.
        self._riders: list[tuple[int, str, tuple[Any, ...]]] = []
        self._planned = base_len  # the highest seq a batch has taken (committed or not)

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
        self.lost = True
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

    def _store_line(self, seq: int, line: str) -> None:
        self._store._enqueue(Append(self.key, (self.session_id, seq, line)))

    def _publish(self, pending: list[tuple[int, str]]) -> None:
        raise_failure(self.error)
        header = None if self._stored else stored_header(self.session_id, self._header)
        self._store._enqueue(Publish(self.key, self.session_id, header, self._base_len, pending))

    async def _release(self) -> None:
        await self._store._release(self)

    async def flush(self) -> None:
        if self._state == "published":
            await self._store._barrier(self.key)
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
