"""The embedded durable store (``sqlite:///path``): SQLite behind one writer thread.

Design note.

*Write-behind with group commit.* ``EventSink.write`` stays synchronous and cheap: it
checks the seq, encodes the event to its JSON text and puts it on the store's queue. One
dedicated thread owns the only writing connection and drives the shared group committer
(``store._group``): each time it wakes it drains everything queued — events of every
session, publications, barriers — into one batch and commits it in one transaction. While a
commit is in progress the next group accumulates, so the commit rate adapts to the load.
The waiters a group settles are handed to their event loop in one wake-up, and a busy
loop cannot starve the inserts of the GIL (``_Inserter``).

*Durability.* The database runs in WAL mode. A commit that acknowledges a barrier
(``flush``, ``close``, ``delete``, store close) runs with ``synchronous=FULL``; the others
with ``NORMAL``, which already survives a killed process (G-1) because a transaction is
atomic: a crash leaves whole committed groups, never a torn event nor a gap. An event is
durable once ``await session.flush()`` returned after it.

*Failures.* When a group fails (disk full, read-only file, I/O error) it is rolled back and
retried one session at a time, so one session's failure does not fail the others. A
session whose events could not be stored is *failed* for good: the writer thread drops its
later events (storing them would leave a gap), the next ``flush()`` or ``close()`` raises
``SessionStorageError``, and so does every later ``write``. ``Session.append`` calls
``write`` before it folds an event, so the agent stops taking work instead of running
ahead of its log: the failing turn ends in error, and ``followup``/``steer`` raise. The
stored log stays a valid prefix holding every acknowledged event; resuming it repairs the
open turn (C7.2-9).

*Publication (C7.2-19).* A writer buffers until ``publish()``; a fresh session's header
row and buffered events go to the database in the same transaction. ``discard()`` and
closing an unpublished writer store nothing.

*Write lease (G-2).* Owning a session's writer means holding an exclusive ``flock`` on a
lock file next to the database's real path (``<db>.leases/<sha256(device, inode, id)>.lock``),
so every spelling of the file's path (symlink, ``..``, relative) contends for one lock. A
database file with more than one hard link is refused: SQLite keeps its WAL next to the
name it was opened by, so two names of one file would also corrupt it. The kernel releases it
when the process dies, however it dies, so a crashed writer never blocks a resume; a second
opener — another process or another store object in this process — gets
``SessionConflictError`` at ``open_writer`` time. The writer thread releases the lease only
after the writer's final commit.

*Reads.* ``load``/``list``/``exists`` run on a separate reader thread and connection, after
a barrier through the writer queue so they see everything this store accepted.

*Schema.* ``schema_version`` holds one row; ``MIGRATIONS[i]`` brings a database from
version ``i`` to ``i + 1`` and runs inside the opening ``BEGIN IMMEDIATE`` transaction. A
database from a newer build is refused (``SessionStorageError``).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import os
import queue
import re
import sqlite3
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from ...._media import blob_hash, check_blob_hash
from ....errors import (
    SessionCorruptError,
    SessionPersistenceError,
    SessionPersistenceNotFoundError,
    SessionStorageError,
)
from ..._blobs import StoredBlob
from ..._events import SessionEvent
from ..._json import dumps
from ..._session import EventSink
from .._group import (
    Barrier,
    Batch,
    Close,
    Delete,
    Failure,
    GroupCommitter,
    GroupWriter,
    Op,
    Publish,
    Stop,
    Unit,
    Waiter,
    raise_failure,
)
from .._interface import (
    SessionInfo,
    SessionStore,
    check_page,
    decode_header,
    decode_rows,
    encode_header,
    last_time,
    page_rows,
)
from ._blobs import collect_blobs, put_blob, read_blob, store_blobs
from ._schema import (
    LOG_VERSION,
    MIGRATIONS,
    SCHEMA_VERSION,
    Lease,
    is_corruption,
    migrate,
    translate,
)

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

__all__ = ["LOG_VERSION", "MIGRATIONS", "SCHEMA_VERSION", "SqliteStore", "migrate"]

_MAX_GROUP = 20_000  # ops per transaction, so one firehose cannot hold a barrier forever
_PRAGMA_NAME = re.compile(r"^[a-z_]+$")


def _rollback(conn: sqlite3.Connection) -> None:
    if conn.in_transaction:
        with contextlib.suppress(sqlite3.Error):  # a failed rollback rolls back on its own
            conn.execute("ROLLBACK")


class _WriterThread:
    """The one thread that writes to the database: the group-commit driver of SQLite.

    Everything arrives through ``ops``; each wake-up drains what is queued into one
    ``Batch`` (``GroupCommitter.plan``), commits it (``commit_batch``) and settles it.
    """

    def __init__(self, path: str, pragmas: Mapping[str, int | str], busy_timeout: float) -> None:
        self.path = path
        self.ops: queue.SimpleQueue[Op] = queue.SimpleQueue()
        self.group = GroupCommitter(path)
        self.failed = self.group.failed  # writer key -> why its events are not stored
        self.commits = 0
        self._inserter = _Inserter()
        self._pragmas = dict(pragmas)
        self._busy_timeout = busy_timeout
        self._conn: sqlite3.Connection | None = None
        self._sync = ""
        self._ready: concurrent.futures.Future[None] = concurrent.futures.Future()
        self._thread = threading.Thread(
            target=self._main, name=f"steerloop-sqlite-writer:{os.path.basename(path)}", daemon=True
        )

    def start(self) -> None:
        """Open and migrate the database on the writer thread; raise what went wrong."""
        self._thread.start()
        self._ready.result()

    def join(self) -> None:
        self._thread.join()

    # --- thread body -------------------------------------------------------------------

    def _main(self) -> None:
        try:
            self._conn = self._connect()
        except BaseException as exc:
            self._ready.set_exception(translate(exc, f"cannot open {self.path}"))
            return
        self._ready.set_result(None)
        group = self.group
        stop: Stop | None = None
        try:
            while stop is None:
                ops = [self.ops.get()]
                while len(ops) < _MAX_GROUP:
                    try:
                        ops.append(self.ops.get_nowait())
                    except queue.Empty:
                        break
                try:
                    batch = group.plan(ops)
                    stop = group.finish(batch, self.commit_batch(batch))
                except BaseException as exc:  # a bug or a failed rollback: fail loudly, go on
                    group.abandon(ops, exc)
                    stop = next((op for op in ops if isinstance(op, Stop)), None)
                if stop is None:
                    group.deliver()
        finally:
            conn, self._conn = self._conn, None
            close_error: BaseException | None = None
            try:
                conn.close()
            except sqlite3.Error as exc:
                close_error = translate(exc, f"closing {self.path}")
            if close_error is None and group.stop_error is not None:
                close_error = SessionStorageError(group.stop_error)
            if stop is not None:
                group.resolve(stop.waiter, close_error)
            group.deliver()

    def _connect(self) -> sqlite3.Connection:
        conn = sqlite3.connect(
            self.path, timeout=self._busy_timeout, isolation_level=None, check_same_thread=True
        )
        try:
            mode = conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]
            if str(mode).lower() != "wal":
                raise SessionStorageError(f"{self.path}: cannot switch to WAL mode ({mode})")
            self._set_sync("NORMAL", conn)
            for name, value in self._pragmas.items():
                conn.execute(f"PRAGMA {name}={value}")
            migrate(conn, self.path)
        except BaseException:
            conn.close()
            raise
        return conn

    def _set_sync(self, mode: str, conn: sqlite3.Connection | None = None) -> None:
        if mode != self._sync:
            (conn or self._conn_()).execute(f"PRAGMA synchronous={mode}")
            self._sync = mode

    def _conn_(self) -> sqlite3.Connection:
        assert self._conn is not None
        return self._conn

    # --- one batch ---------------------------------------------------------------------

    def commit_batch(self, batch: Batch) -> str | None:
        """Commit a batch; why a durable batch could not be synced, if it could not.

        A batch that fails (disk full, read-only file, I/O error) is rolled back and retried
        one session at a time, so one session's failure does not fail the others.
        """
        committed = self._commit(batch.units, batch.durable) if batch.units else False
        if batch.durable and not committed:
            # Nothing (more) was written, but a barrier means "durable through a FULL
            # sync": the earlier NORMAL commits reach the disk with the next FULL commit.
            return self._full_sync()
        return None

    def _commit(self, units: dict[int, Unit], durable: bool) -> bool:
        """Commit the units; whether any transaction of them committed."""
        try:
            self._transaction(list(units.items()), durable)
            return True
        except sqlite3.Error as exc:
            if len(units) == 1:
                self._fail(units, exc)
                return False
        committed = False
        for key, unit in units.items():  # isolate the failure to the sessions it hits
            try:
                self._transaction([(key, unit)], durable)
                committed = True
            except sqlite3.Error as exc:
                self._fail({key: unit}, exc)
        return committed

    def _fail(self, units: dict[int, Unit], exc: sqlite3.Error) -> None:
        for key, unit in units.items():
            if unit.delete is not None:
                error = translate(exc, f"deleting session {unit.session_id!r}")
                self.group.fail_unit(key, unit, (type(error), str(error)))
                continue
            first = unit.first_seq()
            since = f" from seq {first} on" if first is not None else ""
            kind = "corrupt" if is_corruption(exc) else "failed"
            message = (
                f"session {unit.session_id!r}: writing to {self.path} {kind} ({exc}); its "
                f"events{since} are not stored and the session takes no more writes"
            )
            self.group.fail_unit(key, unit, (SessionStorageError, message))

    def _transaction(self, units: list[tuple[int, Unit]], durable: bool) -> None:
        conn = self._conn_()
        self._set_sync("FULL" if durable else "NORMAL")
        conn.execute("BEGIN IMMEDIATE")
        try:
            rows: list[tuple[str, int, str]] = []
            deleted: list[tuple[Delete, int]] = []
            for _key, unit in units:
                if unit.publish is not None:
                    self._publish(conn, unit.publish)
                    session_id = unit.session_id
                    rows.extend((session_id, seq, body) for seq, body in unit.publish.rows)
                if unit.blobs:  # before the rows that reference them
                    store_blobs(conn, unit.session_id, unit.blobs)
                if unit.delete is not None:
                    collect_blobs(conn, unit.session_id)
                    conn.execute("DELETE FROM events WHERE session_id = ?", (unit.session_id,))
                    cursor = conn.execute("DELETE FROM sessions WHERE id = ?", (unit.session_id,))
                    deleted.append((unit.delete, cursor.rowcount))
                rows.extend(unit.rows)
            if rows:
                self._inserter.insert(conn, rows)
            conn.execute("COMMIT")
        except BaseException:
            _rollback(conn)
            raise
        self.commits += 1
        for delete, count in deleted:
            self.group.release(delete.release)
            self.group.resolve(
                delete.waiter,
                None
                if count
                else SessionPersistenceNotFoundError(
                    f"no session {delete.session_id!r} in {self.path}"
                ),
            )

    def _publish(self, conn: sqlite3.Connection, op: Publish) -> None:
        if op.header is not None:
            try:
                conn.execute(
                    "INSERT INTO sessions (id, header) VALUES (?, ?)",
                    (op.session_id, encode_header(op.header)),
                )
            except sqlite3.IntegrityError:
                raise sqlite3.IntegrityError(
                    f"session {op.session_id!r} was stored by someone else since it was opened"
                ) from None
            return
        stored = conn.execute(
            "SELECT count(*), max(seq) FROM events WHERE session_id = ?", (op.session_id,)
        ).fetchone()
        if (stored[1] or 0) != op.base_len or stored[0] != op.base_len:
            raise sqlite3.IntegrityError(
                f"session {op.session_id!r} changed since it was opened (stored {stored[0]} "
                f"events, expected {op.base_len})"
            )

    def _full_sync(self) -> str | None:
        conn = self._conn_()
        try:
            self._set_sync("FULL")
            conn.execute("BEGIN IMMEDIATE")
            conn.execute("UPDATE schema_version SET version = version")
            conn.execute("COMMIT")
        except sqlite3.Error as exc:
            _rollback(conn)
            return f"syncing {self.path} failed: {exc}"
        self.commits += 1
        return None


_INSERT = "INSERT INTO events (session_id, seq, body) VALUES (?,?,?)"
_INSERT_JSON = """INSERT INTO events (session_id, seq, body)
    SELECT max(CASE c.key WHEN 0 THEN c.value END), max(CASE c.key WHEN 1 THEN c.value END),
        max(CASE c.key WHEN 2 THEN c.value END)
    FROM json_each(?) AS r, json_each(r.value) AS c GROUP BY r.key"""


class _Inserter:
    """Inserts a group's rows, keeping the writer thread from starving on the GIL.

    ``executemany`` is the fastest way in, but it takes the GIL back after every row.
    While the event loop thread is busy, each take waits until that thread yields, so a
    loaded loop lets the writer store about one row per loop iteration: it falls behind
    for as long as the load lasts (measured: 200 busy agents, 0-1 % of their events stored
    by the end of the run). The same rows sent as one JSON array that SQLite unpacks take
    the GIL once, at ~1.5x the cost per row when nobody competes.

    So rows go through ``executemany`` in slices of ``SLICE``; a slice that takes longer
    than ``SLOW_ROW`` per row waited for the GIL. Two such slices in a row (one alone may
    be a collector pause of the loop thread) switch the writer to one statement per group
    for ``HOLD`` seconds.
    """

    SLICE = 32
    SLOW_ROW = 1e-3  # seconds; an uncontended row takes 3-20 us
    HOLD = 5.0  # seconds in single-statement mode after starving

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._json_until = float("-inf")
        self._starved = 0  # slow slices in a row

    def insert(self, conn: sqlite3.Connection, rows: list[tuple[str, int, str]]) -> None:
        if len(rows) == 1:
            conn.execute(_INSERT, rows[0])
            return
        if self._clock() < self._json_until and _json_safe(rows):
            conn.execute(_INSERT_JSON, (dumps(rows),))
            return
        for start in range(0, len(rows), self.SLICE):
            chunk = rows[start : start + self.SLICE]
            began = self._clock()
            conn.executemany(_INSERT, chunk)
            now = self._clock()
            if now - began <= self.SLOW_ROW * len(chunk):
                self._starved = 0
                continue
            self._starved += 1
            if self._starved >= 2:
                self._starved = 0
                self._json_until = now + self.HOLD
                rest = rows[start + self.SLICE :]
                if rest:
                    self.insert(conn, rest)
                return


def _json_safe(rows: list[tuple[str, int, str]]) -> bool:
    """Whether SQLite's JSON functions give every value back exactly: no NUL in a session
    id, and no id ``executemany`` would refuse (lone surrogates). Bodies are JSON text
    written by orjson, so always safe."""
    for session_id in {row[0] for row in rows}:
        if "\x00" in session_id:
            return False
        try:
            session_id.encode()
        except UnicodeEncodeError:
            return False
    return True


# --- the store ---------------------------------------------------------------------------


def _sqlite_path(url: str) -> str:
    if not url.startswith("sqlite:///"):
        raise ValueError(f"a SQLite store URL looks like 'sqlite:///path/to/file.db', not {url!r}")
    path = url[len("sqlite:///") :]
    if not path or "?" in path or path.endswith("/"):
        raise ValueError(f"SQLite store URL {url!r} does not name a database file")
    return os.path.expanduser(path)  # sqlite:///~/sessions.db is under the home directory


def _create_private(path: str) -> None:
    """Create the database file with mode 0600 unless it exists."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return
    except OSError as exc:
        raise SessionStorageError(f"cannot create {path}: {exc}") from None
    os.fchmod(fd, 0o600)
    os.close(fd)


def _identity(path: str) -> tuple[int, int]:
    """The database file's device and inode (what its write leases are keyed on).

    Raises:
        SessionStorageError: the file cannot be read, or it has another hard link.
    """
    try:
        st = os.stat(path)
    except OSError as exc:
        raise SessionStorageError(f"cannot open {path}: {exc}") from None
    if st.st_nlink > 1:
        raise SessionStorageError(
            f"cannot open {path}: the database file has {st.st_nlink} hard links; SQLite "
            "keeps a journal per name, so writers through two names would corrupt it and "
            "could not see each other's write leases (use one name, or a symlink)"
        )
    return st.st_dev, st.st_ino


class SqliteStore(SessionStore):
    """The embedded durable store: one SQLite file, one writer thread, one reader thread.

    ``pragmas`` are applied to the writing connection after it opened (names are bare
    identifiers, values integers or identifiers; e.g. ``{"max_page_count": 64}`` caps the
    file size).
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        pragmas: Mapping[str, int | str] | None = None,
        busy_timeout: float = 5.0,
    ) -> None:
        self.path = os.fspath(path)
        self.url = f"sqlite:///{self.path}"
        for name, value in (pragmas or {}).items():
            if not _PRAGMA_NAME.match(name) or not re.match(r"^[A-Za-z0-9_]+$", str(value)):
                raise ValueError(f"invalid pragma {name}={value!r}")
        if os.path.exists(self.path) and not os.access(self.path, os.W_OK):
            raise SessionStorageError(f"cannot open {self.path}: the file is read-only")
        _create_private(self.path)
        self._identity = _identity(self.path)
        self._lease_dir = os.path.realpath(self.path) + ".leases"
        try:
            os.makedirs(self._lease_dir, mode=0o700, exist_ok=True)
        except OSError as exc:
            raise SessionStorageError(f"cannot create {self._lease_dir}: {exc}") from None
        self._writer = _WriterThread(self.path, pragmas or {}, busy_timeout)
        self._writer.start()
        self._reader = concurrent.futures.ThreadPoolExecutor(
            max_workers=1, thread_name_prefix="steerloop-sqlite-reader"
        )
        self._local = threading.local()
        self._reader_conns: list[sqlite3.Connection] = []
        self._keys = 0
        self._writers: dict[int, _SqliteWriter] = {}
        self._closed = False
        self._closing: asyncio.Future[None] | None = None

    @property
    def commits(self) -> int:
        """Transactions committed by the writer thread so far (for benchmarks)."""
        return self._writer.commits

    # --- reads -------------------------------------------------------------------------

    async def load(self, session_id: str) -> tuple[SessionEvent, ...]:
        await self._sync()
        events: tuple[SessionEvent, ...] = await self._read(
            lambda conn: self._load(conn, session_id), session_id
        )
        return events

    async def load_after(
        self, session_id: str, after: int, limit: int
    ) -> tuple[dict[str, Any], ...]:
        check_page(after, limit)
        await self._sync()
        where = f"session {session_id!r} in {self.path}"

        def read(conn: sqlite3.Connection) -> tuple[dict[str, Any], ...] | None:
            conn.execute("BEGIN")  # one snapshot for the page and the existence check
            try:
                rows = conn.execute(
                    "SELECT seq, body FROM events WHERE session_id = ? AND seq > ? "
                    "ORDER BY seq LIMIT ?",
                    (session_id, after, limit),
                ).fetchall()
                if (
                    not rows
                    and not conn.execute(
                        "SELECT 1 FROM sessions WHERE id = ?", (session_id,)
                    ).fetchone()
                ):
                    return None
            finally:
                conn.execute("COMMIT")
            return page_rows(rows, after, where)

        page = await self._read(read, session_id)
        if page is None:
            raise SessionPersistenceNotFoundError(f"no session {session_id!r} in {self.url}")
        return page  # type: ignore[no-any-return]

    async def load_header(self, session_id: str) -> dict[str, Any]:
        """The stored session header (EVENTS.md §2.7); optional fields absent when unset.

        Raises:
            SessionPersistenceNotFoundError: nothing is stored under the id.
        """
        await self._sync()
        text = await self._read(lambda conn: _read_header(conn, session_id), session_id)
        if text is None:
            raise SessionPersistenceNotFoundError(f"no session {session_id!r} in {self.url}")
        return decode_header(text, f"session {session_id!r} in {self.path}")

    async def info(self, session_id: str) -> SessionInfo:
        await self._sync()

        def read(conn: sqlite3.Connection) -> tuple[Any, int, str | None]:
            conn.execute("BEGIN")  # one snapshot
            try:
                header = _read_header(conn, session_id)
                count, last = conn.execute(
                    "SELECT count(*), (SELECT body FROM events WHERE session_id = ?1 "
                    "ORDER BY seq DESC LIMIT 1) FROM events WHERE session_id = ?1",
                    (session_id,),
                ).fetchone()
            finally:
                conn.execute("COMMIT")
            return header, count, last

        header, count, last = await self._read(read, session_id)
        if header is None:
            raise SessionPersistenceNotFoundError(f"no session {session_id!r} in {self.url}")
        where = f"session {session_id!r} in {self.path}"
        return SessionInfo(session_id, count, last_time(last), decode_header(header, where))

    async def list(self) -> tuple[str, ...]:
        await self._sync()
        rows = await self._read(
            lambda conn: conn.execute("SELECT id FROM sessions ORDER BY id").fetchall(), None
        )
        return tuple(row[0] for row in rows)

    async def exists(self, session_id: str) -> bool:
        await self._sync()
        row = await self._read(
            lambda conn: conn.execute(
                "SELECT 1 FROM sessions WHERE id = ?", (session_id,)
            ).fetchone(),
            session_id,
        )
        return row is not None

    # --- blobs -------------------------------------------------------------------------

    async def get_blob(self, hash: str, *, session_id: str | None = None) -> StoredBlob:
        check_blob_hash(hash)
        await self._sync()  # a blob queued with an accepted event is readable
        blob: StoredBlob = await self._read(
            lambda conn: read_blob(conn, hash, session_id, self.path), session_id
        )
        return blob

    async def put_blob(self, data: bytes, media_type: str) -> str:
        if not isinstance(data, bytes) or not isinstance(media_type, str):
            raise ValueError("put_blob takes bytes and a media type")
        hash = blob_hash(data)

        def write(conn: sqlite3.Connection) -> None:
            conn.execute("PRAGMA synchronous=FULL")  # durable on return
            put_blob(conn, hash, media_type, data)

        await self._read(write, None)
        return hash

    async def blob_exists(self, hash: str) -> bool:
        check_blob_hash(hash)
        await self._sync()
        row = await self._read(
            lambda conn: conn.execute("SELECT 1 FROM blobs WHERE hash = ?", (hash,)).fetchone(),
            None,
        )
        return row is not None

    def _load(self, conn: sqlite3.Connection, session_id: str) -> tuple[SessionEvent, ...]:
        where = f"session {session_id!r} in {self.path}"
        conn.execute("BEGIN")  # one snapshot for the header and the events
        try:
            if conn.execute("SELECT 1 FROM sessions WHERE id = ?", (session_id,)).fetchone():
                rows = conn.execute(
                    "SELECT seq, body FROM events WHERE session_id = ? ORDER BY seq",
                    (session_id,),
                )
                return decode_rows(rows, where)  # read while decoded: one pass
            orphan = conn.execute(
                "SELECT 1 FROM events WHERE session_id = ? LIMIT 1", (session_id,)
            ).fetchone()
        finally:
            conn.execute("COMMIT")
        if orphan is not None:
            raise SessionCorruptError(f"{where}: events are stored without a session header")
        raise SessionPersistenceNotFoundError(f"no session {session_id!r} in {self.url}")

    async def _read(self, fn: Callable[[sqlite3.Connection], Any], session_id: str | None) -> Any:
        self._check_open()
        if session_id is not None:
            self._check_id(session_id)
        what = f"reading {'the session list' if session_id is None else repr(session_id)}"

        def run() -> Any:
            conn = getattr(self._local, "conn", None)
            try:
                if conn is None:
                    conn = self._local.conn = sqlite3.connect(
                        self.path, isolation_level=None, check_same_thread=True
                    )
                    self._reader_conns.append(conn)
                return fn(conn)
            except SessionPersistenceError:
                raise
            except (sqlite3.Error, OSError) as exc:
                raise translate(exc, f"{what} from {self.path}") from None

        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._reader, run)

    # --- writes ------------------------------------------------------------------------

    async def open_writer(self, session_id: str) -> EventSink:
        self._check_open()
        self._check_id(session_id)
        lease = Lease.acquire(self._lease_dir, self._identity, session_id)
        try:
            stored, count = await self._read(lambda conn: _peek(conn, session_id), session_id)
        except BaseException:
            lease.release()
            raise
        self._keys += 1
        writer = self._writers[self._keys] = _SqliteWriter(
            self, self._keys, session_id, lease, stored, count
        )
        return writer

    async def delete(self, session_id: str) -> None:
        self._check_open()
        self._check_id(session_id)
        lease = Lease.acquire(self._lease_dir, self._identity, session_id)
        waiter = Waiter()
        self._keys += 1
        self._writer.ops.put(Delete(self._keys, session_id, waiter, lease.release))
        await waiter.future

    async def _sync(self) -> None:
        """Wait until everything queued before this call is committed (read-your-writes)."""
        self._check_open()
        waiter = Waiter()
        self._writer.ops.put(Barrier(None, waiter))
        await waiter.future

    def _put(self, op: Op) -> None:
        self._check_open()
        self._writer.ops.put(op)

    def _failure(self, key: int) -> Failure | None:
        return self._writer.failed.get(key)

    def _check_open(self) -> None:
        if self._closed:
            raise SessionStorageError(f"the store {self.url} is closed")

    def _check_id(self, session_id: str) -> None:
        """Refuse an id SQLite cannot bind (a lone surrogate is not UTF-8), as the
        store's own error rather than a bare ``UnicodeEncodeError``."""
        try:
            session_id.encode()
        except UnicodeEncodeError as exc:
            raise SessionStorageError(
                f"session id {session_id!r} cannot be stored in {self.url}: {exc}"
            ) from None

    async def close(self) -> None:
        """Commit everything queued (``synchronous=FULL``), then close the database."""
        if self._closing is None:
            self._closing = asyncio.ensure_future(self._close())
        await asyncio.shield(self._closing)

    async def _close(self) -> None:
        self._closed = True
        waiter = Waiter()
        self._writer.ops.put(Stop(waiter))
        try:
            await waiter.future
        finally:
            await asyncio.get_running_loop().run_in_executor(None, self._writer.join)
            for writer in list(self._writers.values()):
                writer._abandon()

            def close_readers() -> None:
                for conn in self._reader_conns:
                    conn.close()

            await asyncio.get_running_loop().run_in_executor(self._reader, close_readers)
            self._reader.shutdown(wait=True)


class _SqliteWriter(GroupWriter[Lease]):
    """The write handle of one session in a ``SqliteStore`` (holds its lease)."""

    def __init__(
        self,
        store: SqliteStore,
        key: int,
        session_id: str,
        lease: Lease,
        stored: bool,
        count: int,
    ) -> None:
        super().__init__(
            session_id, count, key=key, lease=lease, stored=stored, enqueue=store._writer.ops.put
        )
        self._store = store
        # Per-event path: bound once (a write is a dict lookup and a queue put).
        self._failed = store._writer.failed

    def _refuse(self) -> None:
        raise_failure(self._failed.get(self.key))

    def _check_queue(self) -> None:
        if self._store._closed:
            self._store._check_open()

    async def _release(self) -> None:
        self._store._writers.pop(self.key, None)
        self._lease.release()

    async def read_blob(self, hash: str) -> StoredBlob:
        return await self._store.get_blob(hash)

    async def flush(self) -> None:
        """Return once every published write is durable; raise if one could not be stored."""
        if self._state != "published":
            return
        raise_failure(self._store._failure(self.key))
        queued = self._queued
        if self._synced >= queued:
            return
        waiter = Waiter()
        self._store._put(Barrier(self.key, waiter))
        await waiter.future
        self._synced = max(self._synced, queued)

    def lease_valid(self) -> bool:
        # The flock cannot be taken over while this process lives: only a failure counts.
        return self._failed.get(self.key) is None

    def _abandon(self) -> None:
        """The store closed under this writer: its lease goes, later writes fail."""
        self._state = "closed"
        self._pending = []
        self._lease.release()
        self._store._writers.pop(self.key, None)

    async def close(self) -> None:
        """Flush, release the lease (after the final commit), and surface a failure."""
        if self._state in ("closed", "discarded"):
            return
        published = self._state == "published"
        self._state = "closed"
        self._pending = []
        self._store._writers.pop(self.key, None)
        if not published:
            self._lease.release()
            return
        waiter = Waiter()
        # The writer thread releases the lease once everything before this is committed,
        # so a cancelled close can never let a new writer in ahead of queued events.
        try:
            self._store._put(Close(self.key, waiter, self._lease.release))
        except BaseException:  # the store closed first: nothing more will be committed
            self._lease.release()
            raise
        await waiter.future


def _read_header(conn: sqlite3.Connection, session_id: str) -> Any:
    """The stored header's JSON text, ``None`` when the id has no row."""
    row = conn.execute("SELECT header FROM sessions WHERE id = ?", (session_id,)).fetchone()
    return None if row is None else row[0]


def _peek(conn: sqlite3.Connection, session_id: str) -> tuple[bool, int]:
    """Whether ``session_id`` is stored and how many events it has (read under its lease)."""
    conn.execute("BEGIN")
    try:
        header = conn.execute("SELECT 1 FROM sessions WHERE id = ?", (session_id,)).fetchone()
        count = conn.execute(
            "SELECT count(*) FROM events WHERE session_id = ?", (session_id,)
        ).fetchone()[0]
    finally:
        conn.execute("COMMIT")
    return header is not None, int(count)
