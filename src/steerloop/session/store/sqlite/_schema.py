"""SQLite store internals: the schema and its migrations, error translation, the write lease."""

from __future__ import annotations

import contextlib
import hashlib
import os
import sqlite3
import threading
from collections.abc import Sequence
from typing import Final

from ....errors import (
    SessionConflictError,
    SessionCorruptError,
    SessionPersistenceError,
    SessionStorageError,
)

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

from .._interface import LOG_VERSION

__all__ = [
    "LOG_VERSION",
    "MIGRATIONS",
    "SCHEMA_VERSION",
    "Lease",
    "is_corruption",
    "migrate",
    "translate",
]


Migration = Sequence[str]

MIGRATIONS: tuple[Migration, ...] = (
    (
        """CREATE TABLE sessions (
            id TEXT PRIMARY KEY,
            version INTEGER NOT NULL,
            created_at INTEGER NOT NULL,
            cwd TEXT,
            parent_session TEXT,
            is_seeded INTEGER NOT NULL,
            origin TEXT,
            delegation_depth INTEGER
        )""",
        """CREATE TABLE events (
            session_id TEXT NOT NULL,
            seq INTEGER NOT NULL,
            body TEXT NOT NULL,
            PRIMARY KEY (session_id, seq)
        ) WITHOUT ROWID""",
    ),
    # v2: the same (session_id, seq) primary key, on a rowid table: rows sit in append
    # order and the key is a separate index. Clustering rows by session made every group
    # commit split one leaf page per session it touched; appending in commit order halves
    # the bytes each commit writes. The copy goes in session order, so a migrated
    # session's rows stay contiguous for loads.
    (
        """CREATE TABLE events_v2 (
            session_id TEXT NOT NULL,
            seq INTEGER NOT NULL,
            body TEXT NOT NULL,
            PRIMARY KEY (session_id, seq)
        )""",
        """INSERT INTO events_v2 (session_id, seq, body)
            SELECT session_id, seq, body FROM events ORDER BY session_id, seq""",
        "DROP TABLE events",
        "ALTER TABLE events_v2 RENAME TO events",
    ),
    # v3: the header as one JSON object (``encode_header``), the form the PostgreSQL store
    # keeps, instead of a column per field. Optional fields that were NULL are left out, as
    # ``stored_header`` leaves them out; ``origin`` was JSON text already. A row whose origin
    # is not JSON fails the migration, which then rolls back: the file stays at v2, intact.
    (
        """CREATE TABLE sessions_v3 (
            id TEXT PRIMARY KEY,
            header TEXT NOT NULL
        )""",
        # json_remove drops each optional field that is NULL; '$.-' names no field, so an
        # optional field that is set is kept.
        """INSERT INTO sessions_v3 (id, header)
            SELECT id, json_remove(
                json_object(
                    'version', version,
                    'id', id,
                    'created_at', created_at,
                    'is_seeded', json(CASE WHEN is_seeded THEN 'true' ELSE 'false' END),
                    'cwd', cwd,
                    'parent_session', parent_session,
                    'origin', json(origin),
                    'delegation_depth', delegation_depth
                ),
                CASE WHEN cwd IS NULL THEN '$.cwd' ELSE '$.-' END,
                CASE WHEN parent_session IS NULL THEN '$.parent_session' ELSE '$.-' END,
                CASE WHEN origin IS NULL THEN '$.origin' ELSE '$.-' END,
                CASE WHEN delegation_depth IS NULL THEN '$.delegation_depth' ELSE '$.-' END
            ) FROM sessions ORDER BY id""",
        "DROP TABLE sessions",
        "ALTER TABLE sessions_v3 RENAME TO sessions",
    ),
    # v4: image and file bytes, once per file by content hash (``sha256:<hex>``), out of the
    # event rows (an event names its blobs); ``blob_refs`` keeps a blob while a session
    # references it (a fork shares, a delete collects).
    (
        """CREATE TABLE blobs (
            hash TEXT PRIMARY KEY,
            media_type TEXT NOT NULL,
            size INTEGER NOT NULL,
            data BLOB NOT NULL
        )""",
        """CREATE TABLE blob_refs (
            session_id TEXT NOT NULL,
            hash TEXT NOT NULL,
            PRIMARY KEY (session_id, hash)
        ) WITHOUT ROWID""",
        "CREATE INDEX blob_refs_by_hash ON blob_refs (hash)",
    ),
)

SCHEMA_VERSION: Final = len(MIGRATIONS)


# --- errors ------------------------------------------------------------------------------


def is_corruption(exc: sqlite3.Error) -> bool:
    name = getattr(exc, "sqlite_errorname", "") or ""
    return name.startswith(("SQLITE_CORRUPT", "SQLITE_NOTADB"))


def translate(exc: BaseException, what: str) -> SessionPersistenceError:
    if isinstance(exc, SessionPersistenceError):
        return exc
    if isinstance(exc, sqlite3.Error) and is_corruption(exc):
        return SessionCorruptError(f"{what}: the database is corrupt: {exc}")
    if isinstance(exc, sqlite3.Error | OSError):
        return SessionStorageError(f"{what}: {exc}")
    return SessionStorageError(f"{what}: unexpected {type(exc).__name__}: {exc}")


# --- schema ------------------------------------------------------------------------------


def migrate(
    conn: sqlite3.Connection, where: str, migrations: Sequence[Migration] = MIGRATIONS
) -> int:
    """Bring the database behind ``conn`` (autocommit mode) to ``len(migrations)``.

    Returns the version found before migrating (0 for a new database).

    Raises:
        SessionStorageError: the database was written by a newer build.
        SessionCorruptError: the version table is unreadable, or store tables exist
            without one.
    """
    latest = len(migrations)
    conn.execute("BEGIN IMMEDIATE")
    try:
        tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master")}
        if "schema_version" not in tables:
            if tables & {"sessions", "events"}:
                raise SessionCorruptError(
                    f"{where}: store tables exist but schema_version is missing"
                )
            conn.execute("CREATE TABLE schema_version (version INTEGER NOT NULL)")
            conn.execute("INSERT INTO schema_version VALUES (0)")
        rows = conn.execute("SELECT version FROM schema_version").fetchall()
        if len(rows) != 1 or isinstance(rows[0][0], bool) or not isinstance(rows[0][0], int):
            raise SessionCorruptError(
                f"{where}: schema_version must hold one integer, found {rows!r:.80}"
            )
        found: int = rows[0][0]
        if found > latest:
            raise SessionStorageError(
                f"{where}: schema version {found} is newer than this build supports "
                f"({latest}); upgrade steerloop to open it"
            )
        if found < 0:
            raise SessionCorruptError(f"{where}: invalid schema version {found}")
        for version in range(found, latest):
            try:
                for statement in migrations[version]:
                    conn.execute(statement)
            except sqlite3.Error as exc:
                if is_corruption(exc):
                    raise
                # A stored row the migration cannot carry over: say so; the rollback below
                # leaves the file as it was.
                raise SessionStorageError(
                    f"{where}: migrating schema version {version} to {version + 1} failed, "
                    f"nothing was changed: {exc}"
                ) from None
        if found != latest:
            conn.execute("UPDATE schema_version SET version = ?", (latest,))
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
    return found


# --- the write lease ---------------------------------------------------------------------


class Lease:
    """An exclusive ``flock`` on ``<db>.leases/<sha256(dev, inode, id)>.lock`` (G-2).

    The lease is keyed on the database file's identity (device and inode), not on how its
    path was spelled: the directory sits next to the file's real path (symlinks, ``..`` and
    relative spellings resolve to it) and the name hashes the identity, so every spelling
    of one file contends for the same lock, and a file replaced at the same path does not.
    """

    __slots__ = ("_fd", "_lock", "owner", "path", "session_id")

    # A WriteLease (store._lease) that cannot be taken over while held: no fencing token.
    token: Final = None

    def __init__(self, path: str, fd: int, session_id: str, owner: str) -> None:
        self.path = path
        self.session_id = session_id
        self.owner = owner  # also written into the lock file, for a conflicting opener
        self._fd: int | None = fd
        self._lock = threading.Lock()

    @classmethod
    def acquire(cls, directory: str, identity: tuple[int, int], session_id: str) -> Lease:
        if fcntl is None:  # pragma: no cover - Windows
            raise SessionStorageError("the SQLite store needs fcntl.flock (a POSIX system)")
        key = f"{identity[0]}:{identity[1]}\0{session_id}".encode(errors="surrogatepass")
        name = hashlib.sha256(key).hexdigest()[:40] + ".lock"
        path = os.path.join(directory, name)
        while True:
            try:
                fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
            except OSError as exc:
                raise SessionStorageError(f"cannot open the lease file {path}: {exc}") from None
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = os.read(fd, 200).decode(errors="replace").strip() or "unknown owner"
                os.close(fd)
                raise SessionConflictError(
                    f"session {session_id!r} already has a writer ({holder}); it is live in "
                    "another runtime or process"
                ) from None
            # The holder before us may have unlinked the file after we opened it: retry
            # on the current file, or two owners would lock different inodes.
            try:
                current = os.stat(path).st_ino
            except FileNotFoundError:
                current = -1
            if current != os.fstat(fd).st_ino:
                os.close(fd)
                continue
            owner = f"pid {os.getpid()}"
            os.ftruncate(fd, 0)
            os.write(fd, owner.encode())
            return cls(path, fd, session_id, owner)

    def release(self) -> None:
        with self._lock:
            if self._fd is None:
                return
            # Unlink while holding the lock (acquire re-checks the inode), then unlock.
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.path)
            os.close(self._fd)
            self._fd = None
