"""The PostgreSQL store's connection side: its options, its pool and error translation."""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import uuid
from collections.abc import Iterator
from typing import Any

from ....errors import SessionPersistenceError, SessionStorageError
from ._schema import Migrations, Tables, Url, asyncpg_module, migrate, migrate_component

__all__ = ["Connected"]


class Connected:
    """What every part of the store shares: the URL and options, the owner identity its
    leases record, the pool (opened and migrated on first use) and ``_errors``."""

    def __init__(
        self,
        url: str,
        *,
        schema: str | None,
        lease_ttl: float | None,
        connect_timeout: float,
        lock_timeout: float,
        pool_size: int,
        owner_key: int | None,
        notify: bool | None,
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
        self._owner_key = owner_key
        self.application_name = f"steerloop {self.owner}"[-63:]  # the server keeps 63 bytes
        self._pool: Any = None
        self._pool_lock: asyncio.Lock | None = None
        self._closed = False

    @property
    def owner_key(self) -> int | None:
        """Recorded with every lease this store takes (``stamp_leases`` sets it)."""
        return self._owner_key

    def stamp_leases(self, key: int | None) -> None:
        """Record ``key`` with every lease taken from now on (``steerloop_leases.owner_key``):
        a service worker's liveness key, so routing and revocation find the owner's
        process. Leases already taken keep theirs."""
        self._owner_key = key

    async def migrate(self, migrations: Migrations) -> None:
        """Create or upgrade a component's own tables in this store's schema, after the
        store's (the component brings its migrations; the store keeps their versions)."""
        pool = await self.pool()
        with self._errors(f"migrating {migrations.component}"):
            async with pool.acquire() as conn:
                await migrate_component(conn, self._tables, migrations)

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
        """The schema-qualified table names of the store (a component extends them)."""
        return self._tables

    async def pool(self) -> Any:
        """The store's asyncpg pool (opened and migrated on first use)."""
        return await self._acquire_pool()

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
