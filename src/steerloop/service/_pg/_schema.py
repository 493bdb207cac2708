"""The service's own tables (design/SERVICE.md §3.2) in the store's schema, their names and
their migrations (``PostgresStore.migrate`` runs them after the store's).

Workers meet only through these rows: ``workers`` (one per live worker, its advisory lock
the proof of life), ``specs`` (a session's profile, status and ``cmd_seq``: bumping it under
the row lock numbers every session's commands without gaps whichever API node accepted
them), ``commands``, ``wakeups`` (work for any worker to claim) and ``live`` (the frames of
open steps, unlogged).

Until the split, the store's migrations v2, v4 and v5 created and changed these tables. So every
step here leaves a database that has them already as it is (``IF NOT EXISTS``, the names
PostgreSQL gave them then): an old database takes these steps and keeps its rows.
"""

from __future__ import annotations

from ...session.store.postgres._schema import Migrations, Tables

__all__ = ["SERVICE_VERSION", "ServiceTables", "service_migrations"]

SERVICE_VERSION = 4
"""Version of the service's table layout (``steerloop_component_versions``)."""


class ServiceTables(Tables):
    """The store's names and the service's: tables and NOTIFY channels of one schema."""

    def __init__(self, schema: str) -> None:
        super().__init__(schema)
        s = self.version.rpartition(".")[0]
        self.workers = f"{s}.steerloop_workers"
        self.specs = f"{s}.steerloop_specs"
        self.commands = f"{s}.steerloop_commands"
        self.wakeups = f"{s}.steerloop_wakeups"
        self.live = f"{s}.steerloop_live"
        self.wake_channel = f"steerloop_wake{self.channel_tag}"
        """Every worker listens here: a wakeup row was inserted (payload: session id)."""
        self.worker_channel_prefix = f"steerloop_w{self.channel_tag}_"
        """A worker's own channel is this prefix and its advisory key."""

    def worker_channel(self, key: int) -> str:
        """The NOTIFY channel of the worker registered under ``key``."""
        return f"{self.worker_channel_prefix}{key}"


_STEPS: dict[int, str] = {
    1: """
    CREATE TABLE IF NOT EXISTS {workers} (
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
    CREATE TABLE IF NOT EXISTS {specs} (
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
    CREATE TABLE IF NOT EXISTS {commands} (
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
    CREATE INDEX IF NOT EXISTS steerloop_commands_session_id_cmd_seq_idx
        ON {commands} (session_id, cmd_seq) WHERE consumed_at IS NULL;
    CREATE TABLE IF NOT EXISTS {wakeups} (
        session_id text PRIMARY KEY,
        reason text NOT NULL,
        due_at timestamptz NOT NULL DEFAULT now(),
        claimed_by bigint,
        claimed_at timestamptz,
        attempts integer NOT NULL DEFAULT 0
    );
    CREATE UNLOGGED TABLE IF NOT EXISTS {live} (
        session_id text NOT NULL,
        after_seq bigint NOT NULL,
        n integer NOT NULL,
        token bigint NOT NULL,
        frame json NOT NULL,
        PRIMARY KEY (session_id, after_seq, n)
    );
    """,
    # 2: the AG-UI command kinds (a run's client tools, a client tool's result, the state
    # document), which the first check refused: a frontend tool could not be used through a
    # worker. (The store's v4, before the split.)
    2: """
    ALTER TABLE {commands} DROP CONSTRAINT IF EXISTS steerloop_commands_kind_check;
    ALTER TABLE {commands} ADD CONSTRAINT steerloop_commands_kind_check CHECK (kind IN (
        'followup', 'steer', 'inject', 'cancel', 'approval', 'dispose',
        'client_tools', 'client_result', 'state'
    ));
    """,
    # 3: why a command was consumed without applying (an unknown kind, a body no API writes,
    # a refusal by the agent): recorded, never dropped silently.
    3: """
    ALTER TABLE {commands} ADD COLUMN IF NOT EXISTS error text;
    """,
    # 4: the answer to an input request (``POST /v1/sessions/{id}/inputs/{input_id}``, an
    # AG-UI resume), which the AG-UI check refused: a server's question could not be
    # answered through a worker. (The store's v5, before the split.)
    4: """
    ALTER TABLE {commands} DROP CONSTRAINT IF EXISTS steerloop_commands_kind_check;
    ALTER TABLE {commands} ADD CONSTRAINT steerloop_commands_kind_check CHECK (kind IN (
        'followup', 'steer', 'inject', 'cancel', 'approval', 'dispose',
        'client_tools', 'client_result', 'state', 'input'
    ));
    """,
}


def service_migrations(tables: ServiceTables) -> Migrations:
    """The service's migrations with ``tables``' names filled in."""
    names = {
        "workers": tables.workers,
        "specs": tables.specs,
        "commands": tables.commands,
        "wakeups": tables.wakeups,
        "live": tables.live,
    }
    return Migrations(
        component="service",
        steps={version: sql.format(**names) for version, sql in _STEPS.items()},
    )
