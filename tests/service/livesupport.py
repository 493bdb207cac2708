"""Helpers of the PostgreSQL liveness tests: a migrated schema per test, bounded polling."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

import asyncpg

from steerloop.service._pg._schema import ServiceTables, service_migrations
from steerloop.session.store.postgres._schema import migrate, migrate_component

from ..session.backends import POSTGRES_URL, drop_schema, require_postgres

T = TypeVar("T")

__all__ = ["POSTGRES_URL", "T", "fresh_schema", "now", "poll", "sql"]


async def fresh_schema() -> AsyncIterator[str]:
    """A migrated schema of its own (the store's tables and the service's), dropped
    afterwards; use as a fixture body."""
    require_postgres()
    name = f"t_live_{uuid.uuid4().hex[:12]}"
    conn = await asyncpg.connect(POSTGRES_URL, timeout=5)
    try:
        tables = ServiceTables(name)
        await migrate(conn, tables)
        await migrate_component(conn, tables, service_migrations(tables))
    finally:
        await conn.close()
    try:
        yield name
    finally:
        await drop_schema(name)


async def sql(query: str, *args: Any) -> list[Any]:
    """Run one statement on a connection of its own."""
    conn = await asyncpg.connect(POSTGRES_URL, timeout=5)
    try:
        return list(await conn.fetch(query, *args))
    finally:
        await conn.close()


async def poll(
    probe: Callable[[], Awaitable[T]], *, until: Callable[[T], bool], timeout: float = 10.0
) -> T:
    """Call ``probe`` until ``until(result)`` holds; fail after ``timeout`` seconds."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        value = await probe()
        if until(value):
            return value
        if loop.time() > deadline:
            raise AssertionError(f"condition not reached within {timeout} s (last: {value!r})")
        await asyncio.sleep(0.02)


async def now(value: T) -> T:
    """``value`` as an awaitable, for ``poll`` of a plain expression:
    ``poll(lambda: now(x.done), until=bool)``."""
    await asyncio.sleep(0)
    return value
