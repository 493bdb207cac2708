"""The PostgreSQL store (``postgresql://``; extra ``steerloop[postgres]``)."""

from ._schema import LOG_VERSION, SCHEMA_VERSION, LeaseInfo
from ._store import PostgresStore

__all__ = ["LOG_VERSION", "SCHEMA_VERSION", "LeaseInfo", "PostgresStore"]
