"""The store backends the contract suite runs against (``STORE_BACKENDS``).

A backend factory takes a fresh ``tmp_path`` and returns a ``Backend``: ``open()`` returns
a *new handle on the same storage* each time (a second handle stands for another runtime or
process), ``close()`` closes every handle it opened. To run the contract suite against one
more backend, add a factory here, e.g. ``STORE_BACKENDS["postgresql"] = PostgresBackend``
(skip-free: make the factory fail loudly when its server is not configured).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from steerloop.session import MemoryStore, SessionStore
from steerloop.session._sqlite import SqliteStore


class Backend:
    """Handles on one storage location of one backend."""

    name = ""

    def __init__(self) -> None:
        self.handles: list[SessionStore] = []

    def _new(self) -> SessionStore:
        raise NotImplementedError

    def open(self) -> SessionStore:
        """A new handle on the same storage (another runtime/process in spirit)."""
        store = self._new()
        self.handles.append(store)
        return store

    async def close(self) -> None:
        for store in reversed(self.handles):
            await store.close()


class MemoryBackend(Backend):
    """``memory://``: every handle is the one ``MemoryStore`` (one process)."""

    name = "memory"

    def __init__(self, tmp_path: Path) -> None:
        super().__init__()
        self._store = MemoryStore()

    def _new(self) -> SessionStore:
        return self._store


class SqliteBackend(Backend):
    """``sqlite:///<tmp_path>/sessions.db``: each handle is its own ``SqliteStore``."""

    name = "sqlite"

    def __init__(self, tmp_path: Path) -> None:
        super().__init__()
        self.path = tmp_path / "sessions.db"

    def _new(self) -> SessionStore:
        return SqliteStore(self.path)


POSTGRES_URL = os.environ.get(
    "STEERLOOP_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test"
)
_postgres_probe: list[str] = []  # memoised: "" when reachable, else the reason


def require_postgres() -> None:
    """Fail when the test server cannot be reached.

    A developer without PostgreSQL may opt out with ``STEERLOOP_SKIP_POSTGRES=1``; the
    opt-out is refused under ``CI=true`` (``.ci/run`` sets it), so CI never skips them.
    """
    if not _postgres_probe:
        import asyncpg

        async def probe() -> None:
            conn = await asyncpg.connect(POSTGRES_URL, timeout=3)
            await conn.close()

        with concurrent.futures.ThreadPoolExecutor(1) as pool:  # callable inside a loop
            try:
                pool.submit(asyncio.run, probe()).result()
                _postgres_probe.append("")
            except (OSError, TimeoutError, asyncpg.PostgresError) as exc:
                _postgres_probe.append(f"{type(exc).__name__}: {exc}")
    if _postgres_probe[0]:
        message = f"PostgreSQL at {POSTGRES_URL} is unreachable: {_postgres_probe[0]}"
        if os.environ.get("CI") == "true":
            pytest.fail(f"{message} (CI=true: the PostgreSQL tests must run)", pytrace=False)
        if os.environ.get("STEERLOOP_SKIP_POSTGRES") != "1":
            pytest.fail(
                f"{message}; point STEERLOOP_TEST_POSTGRES_URL at a server, or set "
                "STEERLOOP_SKIP_POSTGRES=1 to leave these tests out on purpose",
                pytrace=False,
            )
        pytest.skip(f"{message} (STEERLOOP_SKIP_POSTGRES=1)")


async def drop_schema(name: str) -> None:
    """``DROP SCHEMA IF EXISTS "name" CASCADE`` on a connection of its own."""
    import asyncpg

    conn = await asyncpg.connect(POSTGRES_URL, timeout=5)
    try:
        await conn.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')
    finally:
        await conn.close()


async def scratch_schema() -> AsyncIterator[str]:
    """The name of a schema of its own (``steerloop_test_…``, created by the store that uses
    it), dropped afterwards; use as a fixture body."""
    require_postgres()
    name = f"steerloop_test_{uuid.uuid4().hex[:12]}"
    yield name
    await drop_schema(name)


class PostgresBackend(Backend):
    """``postgresql://``: each handle is its own ``PostgresStore`` (own pool, own lease
    owner) on a schema of its own, dropped at close."""

    name = "postgresql"

    def __init__(self, tmp_path: Path) -> None:
        super().__init__()
        require_postgres()
        self.schema = f"steerloop_contract_{uuid.uuid4().hex[:12]}"

    def _new(self) -> SessionStore:
        from steerloop.session._postgres import PostgresStore

        return PostgresStore(POSTGRES_URL, schema=self.schema)

    async def close(self) -> None:
        try:
            await super().close()
        finally:
            await drop_schema(self.schema)


STORE_BACKENDS: dict[str, Callable[[Path], Backend]] = {
    "memory": MemoryBackend,
    "sqlite": SqliteBackend,
    "postgresql": PostgresBackend,
}
