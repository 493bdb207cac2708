"""PostgreSQL store internals: versions, table names, schema migration, URL parsing."""

from __future__ import annotations

import importlib
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from urllib.parse import parse_qsl, unquote, urlencode, urlsplit, urlunsplit

from ....errors import SessionStorageError
from .._interface import LOG_VERSION

__all__ = [
    "LOG_VERSION",
    "SCHEMA_VERSION",
    "LeaseInfo",
    "Migrations",
    "Tables",
    "Url",
    "asyncpg_module",
    "ident",
    "migrate",
    "migrate_component",
]

SCHEMA_VERSION = 5
"""Version of the table layout (``steerloop_schema_version``)."""


def asyncpg_module() -> Any:
    try:
        return importlib.import_module("asyncpg")
    except ImportError:
        raise ImportError(
            "the PostgreSQL store needs asyncpg: install steerloop with the extra "
            "'steerloop[postgres]'"
        ) from None


@dataclass(frozen=True, kw_only=True, slots=True)
class LeaseInfo:
    """The write lease of one session as stored (``PostgresStore.lease``)."""

    session_id: str
    owner: str
    token: int
    expires_at: datetime
    live: bool


def ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


_MIGRATIONS: dict[int, str] = {
    1: """
    CREATE TABLE {sessions} (
        session_id text PRIMARY KEY,
        header json NOT NULL,
        created_at timestamptz NOT NULL DEFAULT now()
    );
    CREATE TABLE {events} (
        session_id text NOT NULL REFERENCES {sessions} (session_id) ON DELETE CASCADE,
        seq bigint NOT NULL CHECK (seq >= 1),
        payload json NOT NULL,
        PRIMARY KEY (session_id, seq)
    );
    CREATE TABLE {leases} (
        session_id text PRIMARY KEY,
        owner text NOT NULL,
        lease_id uuid,
        token bigint NOT NULL,
        expires_at timestamptz NOT NULL,
        acquired_at timestamptz NOT NULL DEFAULT now()
    );
    """,
    # v2: ``owner_key`` names the advisory lock whose holder is the lease owner's live
    # process (a component's worker sets it: ``PostgresStore.stamp_leases``). Up to this
    # version the service's tables were created here too; they are the service's own
    # migrations now (``Migrations``), written so a database that has them already keeps
    # them as they are.
    2: """
    ALTER TABLE {leases} ADD COLUMN owner_key bigint;
    CREATE INDEX ON {leases} (owner_key) WHERE lease_id IS NOT NULL;
    """,
    # v3: image and file bytes once per schema by content hash (``sha256:<hex>``), out of
    # the event rows; a reference per (session, hash) keeps a blob while a session needs it
    # (it goes with its session; a deletion collects the blobs nobody references). The
    # foreign key to the blob makes a reference wait for, or fail against, a collection.
    3: """
    CREATE TABLE {blobs} (
        hash text PRIMARY KEY,
        media_type text NOT NULL,
        size bigint NOT NULL,
        data bytea NOT NULL
    );
    CREATE TABLE {blob_refs} (
        session_id text NOT NULL REFERENCES {sessions} (session_id) ON DELETE CASCADE,
        hash text NOT NULL REFERENCES {blobs} (hash),
        PRIMARY KEY (session_id, hash)
    );
    CREATE INDEX ON {blob_refs} (hash);
    """,
    # v4 and v5 changed a table of the service (now its own migrations): nothing here.
    4: "",
    5: "",
}


class Tables:
    """Schema-qualified table names and the statements that use them."""

    def __init__(self, schema: str) -> None:
        self.schema = schema
        s = ident(schema)
        self.version = f"{s}.steerloop_schema_version"
        self.component_versions = f"{s}.steerloop_component_versions"
        self.sessions = f"{s}.steerloop_sessions"
        self.events = f"{s}.steerloop_events"
        self.leases = f"{s}.steerloop_leases"
        self.blobs = f"{s}.steerloop_blobs"
        self.blob_refs = f"{s}.steerloop_blob_refs"
        # NOTIFY channels belong to the database, not to a schema: a schema (a tenant) gets
        # names of its own so its listeners never wake for another schema's rows. The
        # default schema keeps the plain names.
        tag = "" if schema == "steerloop" else f"_{zlib.crc32(schema.encode()):08x}"
        self.feed_channel = f"steerloop_feed{tag}"
        """Committed batches and live frames are announced here (``notify=True``)."""
        self.channel_tag = tag
        """What this schema's channel names end with (a component's channels too)."""
        self.acquire = f"""
            INSERT INTO {self.leases} AS l
                   (session_id, owner, lease_id, token, expires_at, owner_key)
            VALUES ($1, $2, $3, 1, now() + make_interval(secs => $4), $5)
            ON CONFLICT (session_id) DO UPDATE
               SET owner = EXCLUDED.owner, lease_id = EXCLUDED.lease_id, token = l.token + 1,
                   expires_at = EXCLUDED.expires_at, acquired_at = now(),
                   owner_key = EXCLUDED.owner_key
             WHERE l.lease_id IS NULL OR l.expires_at <= now()
            RETURNING token"""
        # The fence: renews exactly the leases whose (lease id, token) are still current and
        # unexpired. An expired lease is lost even before anyone takes it over: its owner was
        # paused past the TTL and must not quietly come back.
        self.fence = f"""
            UPDATE {self.leases} AS l SET expires_at = now() + make_interval(secs => $4)
              FROM unnest($1::text[], $2::uuid[], $3::bigint[]) AS f (sid, lid, tok)
             WHERE l.session_id = f.sid AND l.lease_id = f.lid AND l.token = f.tok
               AND l.expires_at > now()
            RETURNING l.session_id"""
        self.release = f"""
            UPDATE {self.leases} SET lease_id = NULL, expires_at = now()
             WHERE session_id = $1 AND lease_id = $2 AND token = $3"""
        self.page = f"""
            SELECT seq, payload FROM {self.events}
             WHERE session_id = $1 AND seq > $2 ORDER BY seq LIMIT $3"""
        self.insert_events = f"""
            INSERT INTO {self.events} (session_id, seq, payload)
            SELECT * FROM unnest($1::text[], $2::bigint[], $3::json[])"""
        self.insert_blobs = f"""
            INSERT INTO {self.blobs} (hash, media_type, size, data)
            SELECT h, m, octet_length(d), d FROM unnest($1::text[], $2::text[], $3::bytea[])
                AS b (h, m, d)
            ON CONFLICT DO NOTHING"""
        # Locks the rows it finds, so a collection cannot remove a blob a reference in
        # this transaction is about to name.
        self.held_blobs = f"""
            SELECT hash FROM {self.blobs} WHERE hash = ANY($1::text[]) FOR KEY SHARE"""
        self.insert_blob_refs = f"""
            INSERT INTO {self.blob_refs} (session_id, hash)
            SELECT * FROM unnest($1::text[], $2::text[]) ON CONFLICT DO NOTHING"""
        # One statement: the foreign-key checks run at its end, after both deletions (the
        # outer query still sees the session's references, hence ``<> $1``).
        self.collect_blobs = f"""
            WITH gone AS (
                DELETE FROM {self.blob_refs} WHERE session_id = $1 RETURNING hash
            )
            DELETE FROM {self.blobs} AS b
             WHERE b.hash IN (SELECT hash FROM gone)
               AND NOT EXISTS (SELECT 1 FROM {self.blob_refs} AS r
                                WHERE r.hash = b.hash AND r.session_id <> $1)"""
        self.read_blob = f"SELECT media_type, data FROM {self.blobs} WHERE hash = $1"
        self.read_session_blob = f"""
            SELECT b.media_type, b.data FROM {self.blob_refs} AS r
              JOIN {self.blobs} AS b ON b.hash = r.hash
             WHERE r.session_id = $1 AND r.hash = $2"""


@dataclass(frozen=True, kw_only=True, slots=True)
class Migrations:
    """A component's own tables in the store's schema: ``steps[n]`` upgrades it from version
    ``n - 1`` to ``n`` (SQL with the schema's names filled in). Its versions are kept per
    component (``steerloop_component_versions``) beside the store's own."""

    component: str
    steps: Mapping[int, str]


async def migrate(conn: Any, tables: Tables) -> None:
    """Create or upgrade the schema; concurrent hosts serialise on an advisory lock."""
    async with conn.transaction():
        await conn.execute(
            "SELECT pg_advisory_xact_lock(hashtext($1))", "steerloop:" + tables.schema
        )
        await conn.execute(f"CREATE SCHEMA IF NOT EXISTS {ident(tables.schema)}")
        await conn.execute(
            f"CREATE TABLE IF NOT EXISTS {tables.version} (version integer PRIMARY KEY, "
            "applied_at timestamptz NOT NULL DEFAULT now())"
        )
        current = await conn.fetchval(f"SELECT coalesce(max(version), 0) FROM {tables.version}")
        if current > SCHEMA_VERSION:
            raise SessionStorageError(
                f"schema {tables.schema!r} has version {current}; this steerloop knows up to "
                f"{SCHEMA_VERSION} (upgrade steerloop)"
            )
        for version in range(current + 1, SCHEMA_VERSION + 1):
            step = _MIGRATIONS[version].format(
                sessions=tables.sessions,
                events=tables.events,
                leases=tables.leases,
                blobs=tables.blobs,
                blob_refs=tables.blob_refs,
            )
            if step.strip():
                await conn.execute(step)
            await conn.execute(f"INSERT INTO {tables.version} (version) VALUES ($1)", version)


async def migrate_component(conn: Any, tables: Tables, migrations: Migrations) -> None:
    """Create or upgrade a component's tables (after the store's own: ``migrate``), under
    the same advisory lock."""
    name = migrations.component
    known = max(migrations.steps, default=0)
    async with conn.transaction():
        await conn.execute(
            "SELECT pg_advisory_xact_lock(hashtext($1))", "steerloop:" + tables.schema
        )
        await conn.execute(
            f"CREATE TABLE IF NOT EXISTS {tables.component_versions} (component text NOT NULL, "
            "version integer NOT NULL, applied_at timestamptz NOT NULL DEFAULT now(), "
            "PRIMARY KEY (component, version))"
        )
        current = await conn.fetchval(
            f"SELECT coalesce(max(version), 0) FROM {tables.component_versions} "
            "WHERE component = $1",
            name,
        )
        if current > known:
            raise SessionStorageError(
                f"schema {tables.schema!r} has {name} version {current}; this steerloop knows "
                f"up to {known} (upgrade steerloop)"
            )
        for version in range(current + 1, known + 1):
            await conn.execute(migrations.steps[version])
            await conn.execute(
                f"INSERT INTO {tables.component_versions} (component, version) VALUES ($1, $2)",
                name,
                version,
            )


class Url:
    """A ``postgresql://`` URL split into what asyncpg gets and what steerloop keeps."""

    def __init__(self, url: str) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("postgresql", "postgres"):
            raise ValueError(f"not a PostgreSQL URL: {parts.scheme}://…")
        query = dict(parse_qsl(parts.query, keep_blank_values=True))
        self.schema = query.pop("schema", "steerloop") or "steerloop"
        try:
            self.lease_ttl: float | None = (
                float(query.pop("lease_ttl")) if "lease_ttl" in query else None
            )
        except ValueError:
            raise ValueError("lease_ttl in the store URL must be a number of seconds") from None
        notify = query.pop("notify", "0")
        if notify not in ("0", "1", "true", "false"):
            raise ValueError(f"notify in the store URL must be 0 or 1, not {notify!r}")
        self.notify = notify in ("1", "true")
        self.password = unquote(parts.password) if parts.password else ""
        self.dsn = urlunsplit(parts._replace(query=urlencode(query)))
        netloc = parts.netloc
        if parts.password is not None:
            userinfo, _, host = netloc.rpartition("@")
            netloc = f"{userinfo.split(':', 1)[0]}:***@{host}"
        self.display = urlunsplit(parts._replace(netloc=netloc))

    def scrub(self, text: str) -> str:
        return text.replace(self.password, "***") if self.password else text
