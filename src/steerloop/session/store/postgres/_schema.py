"""PostgreSQL store internals: versions, table names, schema migration, URL parsing."""

from __future__ import annotations

import importlib
import zlib
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
    "Tables",
    "Url",
    "asyncpg_module",
    "ident",
    "migrate",
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
    # v2: the service's tables (design/SERVICE.md §3.2). Workers meet only through these rows:
    # ``owner_key`` names the advisory lock whose holder is the lease owner's live process;
    # ``cmd_seq`` comes from bumping ``specs.cmd_seq`` (a row lock per session), so every
    # session's commands are numbered without gaps whichever API node accepted them.
    2: """
    ALTER TABLE {leases} ADD COLUMN owner_key bigint;
    CREATE INDEX ON {leases} (owner_key) WHERE lease_id IS NOT NULL;
    CREATE TABLE {workers} (
        key bigint PRIMARY KEY,
        worker_id text NOT NULL UNIQUE,
        host text NOT NULL,
        pid integer NOT NULL,
        profiles jsonb NOT NULL DEFAULT '{{}}',
        capacity integer NOT NULL DEFAULT 0,
        resident integer NOT NULL DEFAULT 0,
        draining boolean NOT NULL DEFAULT false,
        started_at timestamptz NOT NULL DEFAULT now(),
        heartbeat_at timestamptz,
        lock_missing_since timestamptz
    );
    CREATE TABLE {specs} (
        session_id text PRIMARY KEY,
        profile text NOT NULL,
        profile_version integer NOT NULL,
        meta jsonb,
        cmd_seq bigint NOT NULL DEFAULT 0,
        status text NOT NULL DEFAULT 'new'
            CHECK (status IN ('new', 'idle', 'running', 'unloaded')),
        created_at timestamptz NOT NULL DEFAULT now(),
        updated_at timestamptz NOT NULL DEFAULT now()
    );
    CREATE TABLE {commands} (
        session_id text NOT NULL REFERENCES {specs} (session_id) ON DELETE CASCADE,
        cmd_seq bigint NOT NULL CHECK (cmd_seq >= 1),
        kind text NOT NULL
            CHECK (kind IN ('followup', 'steer', 'inject', 'cancel', 'approval', 'dispose')),
        message_id text,
        body json NOT NULL,
        idem_key text,
        answer json,
        created_at timestamptz NOT NULL DEFAULT now(),
        consumed_at timestamptz,
        consumed_seq bigint,
        PRIMARY KEY (session_id, cmd_seq),
        UNIQUE (session_id, idem_key)
    );
    CREATE INDEX ON {commands} (session_id, cmd_seq) WHERE consumed_at IS NULL;
    CREATE TABLE {wakeups} (
        session_id text PRIMARY KEY,
        reason text NOT NULL,
        due_at timestamptz NOT NULL DEFAULT now(),
        claimed_by bigint,
        claimed_at timestamptz,
        attempts integer NOT NULL DEFAULT 0
    );
    CREATE UNLOGGED TABLE {live} (
        session_id text NOT NULL,
        after_seq bigint NOT NULL,
        n integer NOT NULL,
        token bigint NOT NULL,
        frame json NOT NULL,
        PRIMARY KEY (session_id, after_seq, n)
    );
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
    # v4: the AG-UI command kinds (a run's client tools, a client tool's result, the state
    # document), which v2's check refused: a frontend tool could not be used through a worker.
    4: """
    ALTER TABLE {commands} DROP CONSTRAINT steerloop_commands_kind_check;
    ALTER TABLE {commands} ADD CONSTRAINT steerloop_commands_kind_check CHECK (kind IN (
        'followup', 'steer', 'inject', 'cancel', 'approval', 'dispose',
        'client_tools', 'client_result', 'state'
    ));
    """,
    # v5: the answer to an input request (``POST /v1/sessions/{id}/inputs/{input_id}``, an
    # AG-UI resume), which v4's check refused: a server's question could not be answered
    # through a worker.
    5: """
    ALTER TABLE {commands} DROP CONSTRAINT steerloop_commands_kind_check;
    ALTER TABLE {commands} ADD CONSTRAINT steerloop_commands_kind_check CHECK (kind IN (
        'followup', 'steer', 'inject', 'cancel', 'approval', 'dispose',
        'client_tools', 'client_result', 'state', 'input'
    ));
    """,
}


class Tables:
    """Schema-qualified table names and the statements that use them."""

    def __init__(self, schema: str) -> None:
        self.schema = schema
        s = ident(schema)
        self.version = f"{s}.steerloop_schema_version"
        self.sessions = f"{s}.steerloop_sessions"
        self.events = f"{s}.steerloop_events"
        self.leases = f"{s}.steerloop_leases"
        self.workers = f"{s}.steerloop_workers"
        self.specs = f"{s}.steerloop_specs"
        self.commands = f"{s}.steerloop_commands"
        self.wakeups = f"{s}.steerloop_wakeups"
        self.live = f"{s}.steerloop_live"
        self.blobs = f"{s}.steerloop_blobs"
        self.blob_refs = f"{s}.steerloop_blob_refs"
        # NOTIFY channels belong to the database, not to a schema: a schema (a tenant) gets
        # names of its own so its listeners never wake for another schema's rows. The
        # default schema keeps the plain names.
        tag = "" if schema == "steerloop" else f"_{zlib.crc32(schema.encode()):08x}"
        self.feed_channel = f"steerloop_feed{tag}"
        """Committed batches and live frames are announced here (``notify=True``)."""
        self.wake_channel = f"steerloop_wake{tag}"
        """Every worker listens here: a wakeup row was inserted (payload: session id)."""
        self.worker_channel_prefix = f"steerloop_w{tag}_"
        """A worker's own channel is this prefix and its advisory key."""
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

    def worker_channel(self, key: int) -> str:
        """The NOTIFY channel of the worker registered under ``key``."""
        return f"{self.worker_channel_prefix}{key}"


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
            await conn.execute(
                _MIGRATIONS[version].format(
                    sessions=tables.sessions,
                    events=tables.events,
                    leases=tables.leases,
                    workers=tables.workers,
                    specs=tables.specs,
                    commands=tables.commands,
                    wakeups=tables.wakeups,
                    live=tables.live,
                    blobs=tables.blobs,
                    blob_refs=tables.blob_refs,
                )
            )
            await conn.execute(f"INSERT INTO {tables.version} (version) VALUES ($1)", version)


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
