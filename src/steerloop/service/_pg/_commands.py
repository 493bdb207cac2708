"""The API node's side of the command path (design/SERVICE.md §3.4): sessions and commands
as rows, NOTIFY only as a hint.

Every accepted command is one transaction: lock the session's spec row (so senders of one
session queue up: ``cmd_seq`` is gap-free per session whichever node accepted it), answer an
idempotency key already seen with the stored answer, refuse past ``max_unconsumed`` (429),
insert the command with its answer, then point the owner at it: ``steerloop_w_<owner_key>``
when a live lease names one, else a wakeup row and ``steerloop_wake``. Nothing here holds an
agent; the workers apply the commands (``_worker.py``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Literal

from ...ids import new_id
from ...session.store.postgres._schema import Tables
from .._host import ApiError
from ._control import namespace

__all__ = ["CommandKind", "Commands", "unserved_note"]

CommandKind = Literal[
    "followup",
    "steer",
    "inject",
    "cancel",
    "approval",
    "client_tools",
    "client_result",
    "state",
    "input",
]


def unserved_note(profile: str, version: int) -> str:
    return (
        f"no running worker serves profile {profile!r} version {version}; the command is "
        "stored and applied when one starts"
    )


class Commands:
    """API-side SQL over the v2 tables of one schema (a pool shared with the store)."""

    def __init__(self, pool: Any, tables: Tables, *, max_unconsumed: int = 100) -> None:
        self.pool = pool
        self.t = tables
        self.ns = namespace(tables.schema)
        self.max_unconsumed = max_unconsumed

    # --- sessions -------------------------------------------------------------------------

    async def create(
        self,
        session_id: str,
        profile: str,
        version: int,
        meta: Mapping[str, Any] | None,
        first: str | list[Any] | None,
    ) -> dict[str, Any]:
        """The spec row, the optional first followup, a wakeup and its NOTIFY: one
        transaction. Returns the answer's extra fields (``queued`` and ``note`` when no live
        worker serves the profile).

        Raises:
            ApiError: 409 when the session exists (as a spec or as a stored log).
        """
        t = self.t
        async with self.pool.acquire() as conn, conn.transaction():
            inserted = await conn.fetchval(
                f"INSERT INTO {t.specs} (session_id, profile, profile_version, meta) "
                "SELECT $1, $2, $3, $4::jsonb WHERE NOT EXISTS "
                f"(SELECT 1 FROM {t.sessions} WHERE session_id = $1) "
                "ON CONFLICT DO NOTHING RETURNING 1",
                session_id,
                profile,
                version,
                None if meta is None else json.dumps(meta),
            )
            if inserted is None:
                raise ApiError(409, "session_exists", f"session {session_id!r} already exists")
            if first is not None:
                await self._insert(conn, session_id, 1, "followup", new_id("msg"), first, None)
                await conn.execute(
                    f"UPDATE {t.specs} SET cmd_seq = 1 WHERE session_id = $1", session_id
                )
            await self._wake(conn, session_id, "create")
            served = await self._served(conn, profile, version)
        return {} if served else {"queued": True, "note": unserved_note(profile, version)}

    async def spec(self, session_id: str) -> Any:
        """The spec row of a served session (``None`` when there is none)."""
        return await self.pool.fetchrow(
            f"SELECT session_id, profile, profile_version, meta, cmd_seq, status, updated_at "
            f"FROM {self.t.specs} WHERE session_id = $1",
            session_id,
        )

    async def owner(self, session_id: str) -> dict[str, Any] | None:
        """``{"worker_id", "host", "pid"}`` of the worker holding a live lease, if any."""
        row = await self.pool.fetchrow(
            f"SELECT w.worker_id, w.host, w.pid FROM {self.t.leases} l "
            f"JOIN {self.t.workers} w ON w.key = l.owner_key "
            "WHERE l.session_id = $1 AND l.lease_id IS NOT NULL AND l.expires_at > now()",
            session_id,
        )
        return None if row is None else dict(row)

    async def last_seq(self, session_id: str) -> int:
        return int(
            await self.pool.fetchval(
                f"SELECT coalesce(max(seq), 0) FROM {self.t.events} WHERE session_id = $1",
                session_id,
            )
        )

    async def unconsumed(self, session_id: str) -> int:
        return int(
            await self.pool.fetchval(
                f"SELECT count(*) FROM {self.t.commands} "
                "WHERE session_id = $1 AND consumed_at IS NULL",
                session_id,
            )
        )

    async def listing(self) -> list[dict[str, Any]]:
        t = self.t
        rows = await self.pool.fetch(
            f"SELECT s.session_id, s.status, s.updated_at, "
            f"coalesce((SELECT max(seq) FROM {t.events} e WHERE e.session_id = s.session_id), 0)"
            f" AS last_seq FROM {t.specs} s ORDER BY s.session_id"
        )
        return [
            {
                "session_id": row["session_id"],
                "status": row["status"],
                "last_seq": row["last_seq"],
                "updated_at": int(row["updated_at"].timestamp() * 1000),
            }
            for row in rows
        ]

    # --- commands -------------------------------------------------------------------------

    async def submit(
        self,
        session_id: str,
        kind: CommandKind,
        body: dict[str, Any],
        message_id: str | None,
        key: str | None,
    ) -> dict[str, Any]:
        """Accept one command (see the module docstring); returns its answer.

        Raises:
            ApiError: 404 for a session with no spec, 429 (``Retry-After``) past the limit,
                409 ``IDEMPOTENCY_KEY_REUSED`` for a key stored with another request (its
                ``body["request"]``), ``MESSAGE_ID_REUSED`` for a message id a command of
                the session has, ``ALREADY_DECIDED`` for a second decision on one call (or
                a second answer to one input). Each is checked under the session's row
                lock: concurrent requests meet in turn.
        """
        t = self.t
        # Three statements: the lock, then (with a snapshot taken after it, so a command
        # committed by the sender this one queued behind is seen) every read, then every
        # write with the NOTIFY. The hot path of send→owner.
        async with self.pool.acquire() as conn, conn.transaction():
            spec = await conn.fetchrow(
                f"SELECT cmd_seq, profile, profile_version, status FROM {t.specs} "
                "WHERE session_id = $1 FOR UPDATE",
                session_id,
            )
            if spec is None:
                raise ApiError(404, "session_not_found", f"no session {session_id!r}")
            seen = await conn.fetchrow(
                self._reads,
                session_id,
                key,
                spec["profile"],
                spec["profile_version"],
                self.ns,
                message_id,
                body.get("call_id") if kind == "approval" else None,
                body.get("id") if kind == "input" else None,
            )
            if seen["stored"] is not None:
                if seen["request"] != body.get("request"):
                    raise ApiError(
                        409,
                        "IDEMPOTENCY_KEY_REUSED",
                        f"idempotency key {key!r} was used for another request",
                    )
                answer: dict[str, Any] = json.loads(seen["stored"])
                return answer
            if seen["id_taken"]:
                raise ApiError(
                    409,
                    "MESSAGE_ID_REUSED",
                    f"session {session_id!r} already holds message {message_id!r}",
                )
            if seen["decided"]:
                what = f"input {body.get('id')!r} was already answered"
                if kind == "approval":
                    what = f"call {body.get('call_id')!r} was already decided"
                raise ApiError(409, "ALREADY_DECIDED", what)
            waiting = seen["waiting"]
            if waiting >= self.max_unconsumed:
                raise ApiError(
                    429,
                    "too_many_commands",
                    f"session {session_id!r} has {waiting} commands not yet applied",
                    {"Retry-After": "1"},
                )
            cmd_seq = spec["cmd_seq"] + 1
            answer = {"cmd_seq": cmd_seq}
            if kind in ("followup", "steer", "inject"):
                message_id = message_id or new_id("msg")
                answer["message_id"] = message_id
            owner_key = seen["owner_key"]
            # A cancel with nothing to cancel (no owner, nothing queued, no turn) is applied
            # here as a no-op rather than loading the session to abort nothing.
            noop = (
                kind == "cancel"
                and owner_key is None
                and waiting == 0
                and spec["status"] in ("new", "idle", "unloaded")
            )
            if owner_key is None and not noop and not seen["served"]:
                answer["queued"] = True
                answer["note"] = unserved_note(spec["profile"], spec["profile_version"])
            owned = owner_key is not None
            await conn.execute(
                self._writes,
                session_id,
                cmd_seq,
                kind,
                message_id,
                json.dumps(body),
                key,
                json.dumps(answer),
                noop,
                not owned and not noop,
                self.t.worker_channel(owner_key) if owned else self.t.wake_channel,
                f"{session_id}:{cmd_seq}" if owned else session_id,
            )
        return answer

    @property
    def _reads(self) -> str:
        t = self.t
        return (
            f"WITH o AS (SELECT owner_key FROM {t.leases} WHERE session_id = $1 "
            "AND lease_id IS NOT NULL AND expires_at > now()), "
            f"k AS (SELECT answer, body FROM {t.commands} WHERE session_id = $1 "
            "AND idem_key = $2) "
            "SELECT (SELECT answer FROM k) AS stored, "
            "(SELECT body->>'request' FROM k) AS request, "
            f"EXISTS (SELECT 1 FROM {t.commands} WHERE session_id = $1 AND message_id = $6) "
            f"AS id_taken, EXISTS (SELECT 1 FROM {t.commands} WHERE session_id = $1 "
            "AND ((kind = 'approval' AND body->>'call_id' = $7) "
            "OR (kind = 'input' AND body->>'id' = $8))) AS decided, "
            f"(SELECT count(*) FROM {t.commands} WHERE session_id = $1 "
            "AND consumed_at IS NULL) AS waiting, (SELECT owner_key FROM o) AS owner_key, "
            "CASE WHEN NOT EXISTS (SELECT 1 FROM o) THEN EXISTS ("
            f"SELECT 1 FROM {t.workers} w WHERE NOT w.draining "
            "AND w.profiles ->> $3::text = $4::int::text AND EXISTS (SELECT 1 FROM pg_locks "
            "WHERE locktype = 'advisory' AND granted AND objsubid = 2 "
            "AND classid = $5::bigint::oid AND objid::bigint = w.key)) END AS served"
        )

    @property
    def _writes(self) -> str:
        t = self.t
        return (
            f"WITH bump AS (UPDATE {t.specs} SET cmd_seq = $2 WHERE session_id = $1), "
            f"ins AS (INSERT INTO {t.commands} (session_id, cmd_seq, kind, message_id, body, "
            "idem_key, answer, consumed_at) VALUES ($1, $2, $3, $4, $5::json, $6, $7::json, "
            "CASE WHEN $8::bool THEN now() END)), "
            f"wake AS (INSERT INTO {t.wakeups} (session_id, reason) SELECT $1, 'command' "
            "WHERE $9::bool ON CONFLICT (session_id) DO NOTHING) "
            "SELECT pg_notify($10, $11) WHERE NOT $8::bool"
        )

    async def _insert(
        self,
        conn: Any,
        session_id: str,
        cmd_seq: int,
        kind: str,
        message_id: str | None,
        body: Any,
        key: str | None,
        answer: dict[str, Any] | None = None,
        *,
        consumed: bool = False,
    ) -> None:
        if isinstance(body, str | list):  # a message's content: text or stored blocks
            body = {"content": body}
        await conn.execute(
            f"INSERT INTO {self.t.commands} (session_id, cmd_seq, kind, message_id, body, "
            "idem_key, answer, consumed_at) VALUES ($1, $2, $3, $4, $5::json, $6, $7::json, "
            "CASE WHEN $8 THEN now() END)",
            session_id,
            cmd_seq,
            kind,
            message_id,
            json.dumps(body),
            key,
            json.dumps(answer if answer is not None else {"cmd_seq": cmd_seq}),
            consumed,
        )

    async def _wake(self, conn: Any, session_id: str, reason: str) -> None:
        """A wakeup row (kept if one is queued) and the hint every worker listens to."""
        await conn.execute(
            f"INSERT INTO {self.t.wakeups} (session_id, reason) VALUES ($1, $2) "
            "ON CONFLICT (session_id) DO NOTHING",
            session_id,
            reason,
        )
        await conn.execute("SELECT pg_notify($1, $2)", self.t.wake_channel, session_id)

    async def _served(self, conn: Any, profile: str, version: int) -> bool:
        """Whether a live worker (its liveness lock held) serves ``profile`` at ``version``."""
        return bool(
            await conn.fetchval(
                f"SELECT EXISTS (SELECT 1 FROM {self.t.workers} w WHERE NOT w.draining "
                "AND w.profiles ->> $1 = $2::int::text AND EXISTS (SELECT 1 FROM pg_locks "
                "WHERE locktype = 'advisory' AND granted AND objsubid = 2 "
                "AND classid = $3::bigint::oid AND objid::bigint = w.key))",
                profile,
                version,
                self.ns,
            )
        )
