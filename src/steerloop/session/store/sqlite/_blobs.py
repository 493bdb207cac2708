"""The SQLite store's blob statements: every image and file stored once, by content hash.

``blobs`` holds the bytes under their hash; ``blob_refs`` says which session references
which hash. A writer's transaction stores an event's blobs and references before the event
row; a delete drops the session's references and every blob nobody references any more.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable

from ....errors import SessionPersistenceNotFoundError
from ..._blobs import BlobPut, StoredBlob, checked_blob

__all__ = ["collect_blobs", "put_blob", "read_blob", "store_blobs"]

_INSERT_BLOB = "INSERT OR IGNORE INTO blobs (hash, media_type, size, data) VALUES (?, ?, ?, ?)"
_INSERT_REF = "INSERT OR IGNORE INTO blob_refs (session_id, hash) VALUES (?, ?)"


def store_blobs(conn: sqlite3.Connection, session_id: str, blobs: Iterable[BlobPut]) -> None:
    """Store each blob (unless its hash is stored) and the session's reference to it.

    Raises:
        sqlite3.IntegrityError: a reference without bytes to a blob this file does not hold
            (the event that carries it must not be stored).
    """
    for put in blobs:
        if put.data is not None:
            conn.execute(_INSERT_BLOB, (put.hash, put.media_type, len(put.data), put.data))
        elif conn.execute("SELECT 1 FROM blobs WHERE hash = ?", (put.hash,)).fetchone() is None:
            raise sqlite3.IntegrityError(f"blob {put.hash} is referenced but not stored")
        conn.execute(_INSERT_REF, (session_id, put.hash))


def collect_blobs(conn: sqlite3.Connection, session_id: str) -> None:
    """Drop ``session_id``'s references and the blobs no other session references."""
    conn.execute(
        """DELETE FROM blobs WHERE hash IN (
                SELECT hash FROM blob_refs WHERE session_id = ?
            ) AND NOT EXISTS (
                SELECT 1 FROM blob_refs AS r WHERE r.hash = blobs.hash AND r.session_id <> ?
            )""",
        (session_id, session_id),
    )
    conn.execute("DELETE FROM blob_refs WHERE session_id = ?", (session_id,))


def read_blob(
    conn: sqlite3.Connection, hash: str, session_id: str | None, where: str
) -> StoredBlob:
    """The blob stored under ``hash`` (referenced by ``session_id``, when given), checked.

    Raises:
        SessionPersistenceNotFoundError: no such blob (for that session).
        SessionCorruptError: its bytes do not hash to ``hash``.
    """
    if session_id is None:
        row = conn.execute("SELECT media_type, data FROM blobs WHERE hash = ?", (hash,)).fetchone()
    else:
        row = conn.execute(
            """SELECT b.media_type, b.data FROM blob_refs AS r JOIN blobs AS b ON b.hash = r.hash
                WHERE r.session_id = ? AND r.hash = ?""",
            (session_id, hash),
        ).fetchone()
    if row is None:
        owner = f" for session {session_id!r}" if session_id is not None else ""
        raise SessionPersistenceNotFoundError(f"no blob {hash}{owner} in {where}")
    return checked_blob(hash, row[0], row[1], where)


def put_blob(conn: sqlite3.Connection, hash: str, media_type: str, data: bytes) -> None:
    """Store one blob in its own transaction (``conn`` is in autocommit mode)."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        conn.execute(_INSERT_BLOB, (hash, media_type, len(data), data))
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
