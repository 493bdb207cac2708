"""The embedded durable store (``sqlite:///path``)."""

from ._schema import LOG_VERSION, MIGRATIONS, SCHEMA_VERSION, migrate
from ._store import SqliteStore, _sqlite_path

__all__ = ["LOG_VERSION", "MIGRATIONS", "SCHEMA_VERSION", "SqliteStore", "_sqlite_path", "migrate"]
