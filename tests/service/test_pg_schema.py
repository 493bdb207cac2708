"""The service's own tables (``service/_pg/_schema.py``), migrated by the store as a
component's: a fresh schema, and a database from before the split, when the store's v2 and
v4 created and changed them, upgrade to the same layout and keep their rows."""

from __future__ import annotations

from collections.abc import AsyncIterator

import asyncpg
import pytest

from steerloop.errors import SessionStorageError
from steerloop.service._pg._schema import (
    _STEPS,
    SERVICE_VERSION,
    ServiceTables,
    service_migrations,
)
from steerloop.session.store.postgres._schema import _MIGRATIONS, SCHEMA_VERSION
from steerloop.session.store.postgres._store import PostgresStore

from ..session.backends import POSTGRES_URL, drop_schema, require_postgres


@pytest.fixture
async def schema() -> AsyncIterator[str]:
    require_postgres()
    import uuid

    name = f"t_svc_{uuid.uuid4().hex[:12]}"
    try:
        yield name
    finally:
        await drop_schema(name)


async def _old_layout(schema: str, version: int) -> ServiceTables:
    """``schema`` as a steerloop from before the split left it at store ``version`` (2, 4
    or 5): the store's steps with the service's tables inside them."""
    t = ServiceTables(schema)
    names = {"sessions": t.sessions, "events": t.events, "leases": t.leases}
    names |= {"blobs": t.blobs, "blob_refs": t.blob_refs}
    service = {n: getattr(t, n) for n in ("workers", "specs", "commands", "wakeups", "live")}
    conn = await asyncpg.connect(POSTGRES_URL, timeout=5)
    try:
        await conn.execute(f'CREATE SCHEMA "{schema}"')
        await conn.execute(
            f"CREATE TABLE {t.version} (version integer PRIMARY KEY, "
            "applied_at timestamptz NOT NULL DEFAULT now())"
        )
        for step in range(1, version + 1):
            if _MIGRATIONS[step].strip():
                await conn.execute(_MIGRATIONS[step].format(**names))
            if step == 2:  # the old v2 created the service's tables (today's step 1)
                await conn.execute(_STEPS[1].replace(" IF NOT EXISTS", "").format(**service))
            if step == 4:  # the old v4 widened the kinds (today's step 2)
                await conn.execute(_STEPS[2].replace(" IF EXISTS", "").format(**service))
            if step == 5:  # the old v5 took answers to input requests (today's step 4)
                await conn.execute(_STEPS[4].replace(" IF EXISTS", "").format(**service))
            await conn.execute(f"INSERT INTO {t.version} (version) VALUES ($1)", step)
        await conn.execute(
            f"INSERT INTO {t.specs} (session_id, profile, profile_version) "
            "VALUES ('s1', 'default', 1)"
        )
        await conn.execute(
            f"INSERT INTO {t.commands} (session_id, cmd_seq, kind, body) "
            "VALUES ('s1', 1, 'followup', '{\"content\": \"kept\"}')"
        )
    finally:
        await conn.close()
    return t


async def _migrated(schema: str, t: ServiceTables) -> asyncpg.Connection:
    store = PostgresStore(POSTGRES_URL, schema=schema)
    try:
        await store.migrate(service_migrations(t))
        await store.migrate(service_migrations(t))  # a second run changes nothing
    finally:
        await store.close()
    conn: asyncpg.Connection = await asyncpg.connect(POSTGRES_URL, timeout=5)
    return conn


async def _assert_current(conn: asyncpg.Connection, t: ServiceTables) -> None:
    """The store's versions, the service's, the kinds taken and refused, ``error``."""
    versions = await conn.fetch(f"SELECT version FROM {t.version} ORDER BY version")
    assert [r["version"] for r in versions] == list(range(1, SCHEMA_VERSION + 1))
    component = await conn.fetch(
        f"SELECT component, version FROM {t.component_versions} ORDER BY version"
    )
    assert [tuple(r) for r in component] == [("service", v) for v in range(1, SERVICE_VERSION + 1)]
    insert = (
        f"INSERT INTO {t.commands} (session_id, cmd_seq, kind, body, error) "
        "VALUES ('s1', $1, $2, '{}', $3)"
    )
    for cmd_seq, kind in enumerate(("client_tools", "client_result", "state", "input"), start=2):
        await conn.execute(insert, cmd_seq, kind, None)
    with pytest.raises(asyncpg.CheckViolationError):
        await conn.execute(insert, 9, "bogus", None)
    await conn.execute(insert, 6, "dispose", "unknown command kind 'dispose'")
    rows = await conn.fetch(f"SELECT cmd_seq, kind, body::text, error FROM {t.commands}")
    assert sorted(tuple(r) for r in rows) == [
        (1, "followup", '{"content": "kept"}', None),
        (2, "client_tools", "{}", None),
        (3, "client_result", "{}", None),
        (4, "state", "{}", None),
        (5, "input", "{}", None),
        (6, "dispose", "{}", "unknown command kind 'dispose'"),
    ]
    checks = await conn.fetchval(
        "SELECT count(*) FROM pg_constraint WHERE conrelid = $1::regclass AND contype = 'c' "
        "AND conname = 'steerloop_commands_kind_check'",
        t.commands,
    )
    indexes = await conn.fetchval(
        "SELECT count(*) FROM pg_indexes WHERE schemaname = $1 "
        "AND tablename = 'steerloop_commands'",
        t.schema,
    )
    assert (checks, indexes) == (1, 3)  # primary key, (session, key), unconsumed


@pytest.mark.parametrize("version", [2, 4, 5])
async def test_a_database_from_before_the_split_upgrades_and_keeps_its_rows(
    schema: str, version: int
) -> None:
    """A schema at the old store v2 (the service's tables, the first kinds), v4 (the AG-UI
    kinds) or v5 (input answers) takes the service's steps without re-creating anything:
    its rows stay, the AG-UI and input kinds are taken, ``error`` exists, the store stays
    at its version."""
    t = await _old_layout(schema, version)
    if version == 2:
        conn = await asyncpg.connect(POSTGRES_URL, timeout=5)
        try:
            with pytest.raises(asyncpg.CheckViolationError):
                await conn.execute(
                    f"INSERT INTO {t.commands} (session_id, cmd_seq, kind, body) "
                    "VALUES ('s1', 2, 'state', '{}')"
                )
        finally:
            await conn.close()
    conn = await _migrated(schema, t)
    try:
        await _assert_current(conn, t)
    finally:
        await conn.close()


async def test_a_fresh_schema_gets_the_store_tables_then_the_service_ones(schema: str) -> None:
    """The store creates only its own tables; the service's migrations add theirs."""
    t = ServiceTables(schema)
    store = PostgresStore(POSTGRES_URL, schema=schema)
    try:
        await store.pool()
        assert await _regclass(t.specs) is None
    finally:
        await store.close()
    conn = await _migrated(schema, t)
    try:
        await conn.execute(
            f"INSERT INTO {t.specs} (session_id, profile, profile_version) "
            "VALUES ('s1', 'default', 1)"
        )
        await conn.execute(
            f"INSERT INTO {t.commands} (session_id, cmd_seq, kind, body) "
            "VALUES ('s1', 1, 'followup', '{\"content\": \"kept\"}')"
        )
        await _assert_current(conn, t)
    finally:
        await conn.close()


async def test_a_newer_service_layout_is_refused(schema: str) -> None:
    """A schema whose service version is past what this steerloop knows is not touched."""
    t = ServiceTables(schema)
    conn = await _migrated(schema, t)
    try:
        await conn.execute(
            f"INSERT INTO {t.component_versions} (component, version) VALUES ('service', $1)",
            SERVICE_VERSION + 1,
        )
    finally:
        await conn.close()
    store = PostgresStore(POSTGRES_URL, schema=schema)
    try:
        with pytest.raises(SessionStorageError, match=rf"service version {SERVICE_VERSION + 1}"):
            await store.migrate(service_migrations(t))
    finally:
        await store.close()


async def _regclass(name: str) -> str | None:
    conn = await asyncpg.connect(POSTGRES_URL, timeout=5)
    try:
        found: str | None = await conn.fetchval("SELECT to_regclass($1)::text", name)
        return found
    finally:
        await conn.close()
