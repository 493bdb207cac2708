"""``open_store``: a store URL to its backend (above every backend; they load lazily)."""

from __future__ import annotations

from ._interface import SessionStore
from ._memory import MemoryStore

__all__ = ["open_store"]


def open_store(url: str | SessionStore) -> SessionStore:
    """The store for ``url`` (``memory://``, ``sqlite:///path``, ``postgresql://...``), or
    ``url`` itself.

    Raises:
        ValueError: a URL this build cannot open.
        ImportError: a ``postgresql://`` URL without asyncpg (extra ``steerloop[postgres]``).
        SessionStorageError: the database cannot be opened or written (SQLite).
        SessionCorruptError: the database file is not a valid store (SQLite).
    """
    if isinstance(url, SessionStore):
        return url
    if not isinstance(url, str):
        raise ValueError(f"store must be a URL string or a SessionStore, not {type(url).__name__}")
    if url == "memory://" or url.startswith("memory://"):
        return MemoryStore(url)
    if url.startswith("sqlite:"):
        from .sqlite import SqliteStore, _sqlite_path

        return SqliteStore(_sqlite_path(url))
    if url.startswith(("postgresql://", "postgres://")):
        from .postgres import PostgresStore  # asyncpg is imported lazily (steerloop[postgres])

        return PostgresStore(url)
    raise ValueError(
        f"cannot open store {url!r}: this build supports 'memory://', 'sqlite:///path', "
        "'postgresql://user@host/db' (and store=None for no persistence)"
    )
