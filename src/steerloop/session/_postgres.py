"""Compatibility path: the PostgreSQL store lives in ``steerloop.session.store.postgres``."""

from .store.postgres._schema import LOG_VERSION, SCHEMA_VERSION, LeaseInfo
from .store.postgres._store import PostgresStore

__all__ = ["LOG_VERSION", "SCHEMA_VERSION", "LeaseInfo", "PostgresStore"]
