"""Compatibility path: the SQLite store lives in ``steerloop.session.store.sqlite``."""

from .store.sqlite._schema import LOG_VERSION, MIGRATIONS, SCHEMA_VERSION, migrate
from .store.sqlite._store import SqliteStore, _Inserter, _sqlite_path

__all__ = [
    "LOG_VERSION",
    "MIGRATIONS",
    "SCHEMA_VERSION",
    "SqliteStore",
    "_Inserter",
    "_sqlite_path",
    "migrate",
]
