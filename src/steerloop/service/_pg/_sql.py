"""Every SQL statement of the service, by name (the tables are ``_schema.py``'s).

Callers run ``Sql(tables).<name>`` (or a module constant for the statements that name no
table) and never write SQL themselves: ``tests/service/test_floor_plan.py`` pins it. The
statements are grouped by the module that runs them; a comment says what a statement's
parameters are where the name does not.
"""

from __future__ import annotations

from ._schema import ServiceTables

__all__ = [
    "LOCK",
    "NOTIFY",
    "NOTIFY_EACH",
    "NOTIFY_OWNERS",
    "PING",
    "TERMINATE",
    "TRY_LOCK",
    "UNLOCK",
    "UNLOCK_ALL",
    "Sql",
]

NOTIFY = "SELECT pg_notify($1, $2)"
NOTIFY_EACH = "SELECT pg_notify($1, s) FROM unnest($2::text[]) AS s"
"""``$1`` the channel, ``$2`` the payloads (session ids)."""
NOTIFY_OWNERS = (
    "SELECT pg_notify($4 || k, s || ':' || q) "
    "FROM unnest($1::text[], $2::bigint[], $3::bigint[]) AS u (s, k, q)"
)
"""Each owner ``k`` of session ``s`` on its own channel (``$4`` the prefix): ``s:q``."""
TRY_LOCK = "SELECT pg_try_advisory_lock($1, $2)"
LOCK = "SELECT pg_advisory_lock($1, $2)"
UNLOCK = "SELECT pg_advisory_unlock($1, $2)"
UNLOCK_ALL = "SELECT pg_advisory_unlock_all()"
TERMINATE = "SELECT pg_terminate_backend($1)"
PING = "SELECT 1"

_LIVE_WORKER = (
    "EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND granted "
    "AND objsubid = 2 AND classid = {ns}::bigint::oid AND objid::bigint = w.key)"
)
"""A worker row ``w`` whose liveness lock (namespace ``{ns}``) is held."""
_LEADER_WORKER = """
    SELECT {what} FROM pg_locks lead
      JOIN pg_locks mine ON mine.pid = lead.pid AND mine.locktype = 'advisory'
           AND mine.granted AND mine.objsubid = 2 AND mine.classid = lead.classid
           AND mine.objid <> lead.objid
      JOIN {workers} w ON w.key = mine.objid::bigint
     WHERE lead.locktype = 'advisory' AND lead.granted AND lead.objsubid = 2
       AND lead.classid = $1::bigint::oid AND lead.objid = $2::bigint::oid"""
"""The worker whose backend holds the leadership lock (``$1`` namespace, ``$2`` its key)."""


class Sql:
    """The statements over one schema's tables."""

    def __init__(self, t: ServiceTables) -> None:
        self._api(t)
        self._submit(t)
        self._queue(t)
        self._control(t)
        self._sweeper(t)
        self._sweeper_wakeups(t)
        self._feed(t)
        self._worker(t)
        self._worker_claims(t)
        self._worker_commands(t)

    def _api(self, t: ServiceTables) -> None:
        """The API node (``_commands.py``, ``_host.py``, ``_queue.py``)."""
        self.create_spec = (
            f"INSERT INTO {t.specs} (session_id, profile, profile_version, meta) "
            "SELECT $1, $2, $3, $4::jsonb WHERE NOT EXISTS "
            f"(SELECT 1 FROM {t.sessions} WHERE session_id = $1) "
            "ON CONFLICT DO NOTHING RETURNING 1"
        )
        self.first_cmd_seq = f"UPDATE {t.specs} SET cmd_seq = 1 WHERE session_id = $1"
        self.spec = (
            "SELECT session_id, profile, profile_version, meta, cmd_seq, status, updated_at "
            f"FROM {t.specs} WHERE session_id = $1"
        )
        self.owner = (
            f"SELECT w.worker_id, w.host, w.pid FROM {t.leases} l "
            f"JOIN {t.workers} w ON w.key = l.owner_key "
            "WHERE l.session_id = $1 AND l.lease_id IS NOT NULL AND l.expires_at > now()"
        )
        self.last_seq = f"SELECT coalesce(max(seq), 0) FROM {t.events} WHERE session_id = $1"
        self.event_payloads = (
            f"SELECT payload FROM {t.events} WHERE session_id = $1 AND seq > $2 "
            "ORDER BY seq LIMIT $3"
        )
        self.unconsumed = (
            f"SELECT count(*) FROM {t.commands} WHERE session_id = $1 AND consumed_at IS NULL"
        )
        self.listing = (
            "SELECT s.session_id, s.status, s.updated_at, "
            f"coalesce((SELECT max(seq) FROM {t.events} e WHERE e.session_id = s.session_id), 0)"
            f" AS last_seq FROM {t.specs} s ORDER BY s.session_id"
        )

    def _submit(self, t: ServiceTables) -> None:
        """Accepting a command (``_commands.py``, ``Commands.submit``)."""
        self.lock_spec = (
            f"SELECT cmd_seq, profile, profile_version, status FROM {t.specs} "
            "WHERE session_id = $1 FOR UPDATE"
        )
        # $1 session, $2 key, $3 profile, $4 version, $5 namespace, $6 message id, $7 call id,
        # $8 input id (a decision or an answer already accepted)
        self.submit_reads = (
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
            "AND w.profiles ->> $3::text = $4::int::text AND "
            + _LIVE_WORKER.format(ns="$5")
            + ") END AS served"
        )
        # $1 session, $2 cmd_seq, $3 kind, $4 message id, $5 body, $6 key, $7 answer,
        # $8 consumed now (a no-op), $9 wake (no owner), $10 channel, $11 payload
        self.submit_writes = (
            f"WITH bump AS (UPDATE {t.specs} SET cmd_seq = $2 WHERE session_id = $1), "
            f"ins AS (INSERT INTO {t.commands} (session_id, cmd_seq, kind, message_id, body, "
            "idem_key, answer, consumed_at) VALUES ($1, $2, $3, $4, $5::json, $6, $7::json, "
            "CASE WHEN $8::bool THEN now() END)), "
            f"wake AS (INSERT INTO {t.wakeups} (session_id, reason) SELECT $1, 'command' "
            "WHERE $9::bool ON CONFLICT (session_id) DO NOTHING) "
            "SELECT pg_notify($10, $11) WHERE NOT $8::bool"
        )
        self.insert_command = (
            f"INSERT INTO {t.commands} (session_id, cmd_seq, kind, message_id, body, "
            "idem_key, answer, consumed_at) VALUES ($1, $2, $3, $4, $5::json, $6, $7::json, "
            "CASE WHEN $8 THEN now() END)"
        )
        self.insert_wakeup = (
            f"INSERT INTO {t.wakeups} (session_id, reason) VALUES ($1, $2) "
            "ON CONFLICT (session_id) DO NOTHING"
        )
        self.served = (
            f"SELECT EXISTS (SELECT 1 FROM {t.workers} w WHERE NOT w.draining "
            "AND w.profiles ->> $1 = $2::int::text AND " + _LIVE_WORKER.format(ns="$3") + ")"
        )

    def _queue(self, t: ServiceTables) -> None:
        """Why a session is queued (``_queue.py``)."""
        self.queued_work = f"""
            SELECT EXISTS (SELECT 1 FROM {t.commands}
                            WHERE session_id = $1 AND consumed_at IS NULL) AS commands,
                   (SELECT claimed_by FROM {t.wakeups} WHERE session_id = $1) AS claimed_by,
                   EXISTS (SELECT 1 FROM {t.wakeups} WHERE session_id = $1) AS woken"""
        self.queued_workers = f"""
            SELECT w.capacity,
                   (SELECT count(*) FROM {t.leases} l WHERE l.owner_key = w.key
                       AND l.lease_id IS NOT NULL AND l.expires_at > now()) AS resident,
                   (SELECT count(*) FROM {t.leases} l JOIN {t.specs} s USING (session_id)
                     WHERE l.owner_key = w.key AND l.lease_id IS NOT NULL
                       AND l.expires_at > now() AND s.status = 'running') AS busy
              FROM {t.workers} w
             WHERE NOT w.draining AND w.profiles ->> $1 = $2::int::text
               AND {_LIVE_WORKER.format(ns="$3")}"""

    def _control(self, t: ServiceTables) -> None:
        """Liveness (``_control.py``, ``_watch.py``)."""
        self.drop_own_dead_row = (
            f"DELETE FROM {t.workers} w WHERE worker_id = $1 AND NOT "
            + _LIVE_WORKER.format(ns="$2")
        )
        self.insert_worker = (
            f"INSERT INTO {t.workers} (key, worker_id, host, pid, profiles, capacity, "
            "heartbeat_at) VALUES ($1, $2, $3, $4, $5::jsonb, $6, now()) "
            "ON CONFLICT DO NOTHING RETURNING key"
        )
        self.worker_id_taken = f"SELECT EXISTS (SELECT 1 FROM {t.workers} WHERE worker_id = $1)"
        self.heartbeat = f"UPDATE {t.workers} SET heartbeat_at = now() WHERE key = $1 RETURNING 1"
        self.delete_worker = f"DELETE FROM {t.workers} WHERE key = $1"
        self.watched_workers = (
            f"SELECT key FROM {t.workers} WHERE key <> $1 ORDER BY started_at, key LIMIT $2"
        )
        self.leader_key = _LEADER_WORKER.format(what="w.key", workers=t.workers)

    def _sweeper(self, t: ServiceTables) -> None:
        """Revocation, takeover and reconciliation (``_sweeper.py``)."""
        self.stale_leader = (
            _LEADER_WORKER.format(what="lead.pid, w.key", workers=t.workers)
            + "\n       AND w.heartbeat_at < now() - make_interval(secs => $3)"
        )
        self.hung_workers = f"""
            SELECT l.pid, w.key FROM {t.workers} w
              JOIN pg_locks l ON l.locktype = 'advisory' AND l.granted AND l.objsubid = 2
                   AND l.classid = $1::bigint::oid AND l.objid::bigint = w.key
             WHERE w.key <> $2 AND w.heartbeat_at < now() - make_interval(secs => $3)"""
        self.absent_keys = f"""
            WITH keys AS (
                SELECT key FROM {t.workers}
                UNION SELECT owner_key FROM {t.leases}
                       WHERE lease_id IS NOT NULL AND owner_key IS NOT NULL
                UNION SELECT claimed_by FROM {t.wakeups} WHERE claimed_by IS NOT NULL
            )
            SELECT key FROM keys  -- compared as bigint: a hostile key never breaks a cast
             WHERE key <> $2 AND NOT EXISTS (
                SELECT 1 FROM pg_locks
                 WHERE locktype = 'advisory' AND granted AND objsubid = 2
                   AND classid = $1::bigint::oid AND objid::bigint = keys.key)"""
        self.mark_lock_missing = (
            f"UPDATE {t.workers} SET lock_missing_since = now() "
            "WHERE key = ANY($1::bigint[]) AND lock_missing_since IS NULL"
        )
        self.revoke_owned = (
            f"UPDATE {t.leases} SET lease_id = NULL, token = token + 1, expires_at = now() "
            "WHERE lease_id IS NOT NULL AND owner_key = ANY($1::bigint[]) "
            "RETURNING session_id"
        )
        self.wake_revoked = f"""
            INSERT INTO {t.wakeups} (session_id, reason)
            SELECT s.session_id, $2 FROM {t.specs} s
             WHERE s.session_id = ANY($1::text[])
               AND (s.status = 'running' OR EXISTS (
                    SELECT 1 FROM {t.commands} c
                     WHERE c.session_id = s.session_id AND c.consumed_at IS NULL))
            ON CONFLICT (session_id) DO UPDATE
               SET reason = EXCLUDED.reason, claimed_by = NULL, claimed_at = NULL,
                   due_at = now()
            RETURNING session_id"""
        self.unclaim_dead = (
            f"UPDATE {t.wakeups} SET claimed_by = NULL, claimed_at = NULL, due_at = now() "
            "WHERE claimed_by = ANY($1::bigint[]) RETURNING session_id"
        )
        self.delete_workers = f"DELETE FROM {t.workers} WHERE key = ANY($1::bigint[])"

    def _sweeper_wakeups(self, t: ServiceTables) -> None:
        """The sweeper's takeover and reconciliation rules (``_sweeper.py``)."""
        wake = f"INSERT INTO {t.wakeups} (session_id, reason) "
        kept = " ON CONFLICT (session_id) DO NOTHING RETURNING session_id"
        # $1 the reason: running sessions whose lease expired
        self.wake_expired = (
            wake
            + f"""SELECT l.session_id, $1 FROM {t.leases} l
              JOIN {t.specs} s ON s.session_id = l.session_id
             WHERE l.lease_id IS NOT NULL AND l.expires_at <= now()
               AND s.status = 'running'"""
            + kept
        )
        # $1 the reason, $2 seconds: running sessions with no lease for that long
        self.wake_orphans = (
            wake
            + f"""SELECT s.session_id, $1 FROM {t.specs} s
             WHERE s.status = 'running'
               AND NOT EXISTS (
                    SELECT 1 FROM {t.leases} l WHERE l.session_id = s.session_id
                       AND (l.lease_id IS NOT NULL
                            OR l.expires_at > now() - make_interval(secs => $2)))"""
            + kept
        )
        # $1 seconds, $2 the reason: commands waiting that long with no live lease
        self.wake_unapplied = (
            wake
            + f"""SELECT DISTINCT c.session_id, $2 FROM {t.commands} c
             WHERE c.consumed_at IS NULL
               AND c.created_at <= now() - make_interval(secs => $1)
               AND NOT EXISTS (
                    SELECT 1 FROM {t.leases} l WHERE l.session_id = c.session_id
                       AND l.lease_id IS NOT NULL AND l.expires_at > now())"""
            + kept
        )
        self.stale_commands = f"""
            SELECT c.session_id, l.owner_key, max(c.cmd_seq) AS cmd_seq
              FROM {t.commands} c
              JOIN {t.leases} l ON l.session_id = c.session_id
             WHERE c.consumed_at IS NULL
               AND c.created_at <= now() - make_interval(secs => $1)
               AND l.lease_id IS NOT NULL AND l.expires_at > now()
               AND l.owner_key IS NOT NULL
             GROUP BY c.session_id, l.owner_key"""

    def _feed(self, t: ServiceTables) -> None:
        """Live frames (``_feed.py``)."""
        self.live_frames = f"""
            SELECT v.n, v.frame FROM {t.live} v
              JOIN {t.leases} l ON l.session_id = v.session_id AND l.token = v.token
             WHERE v.session_id = $1 AND v.after_seq = $2 AND v.n > $3
             ORDER BY v.n LIMIT $4"""
        self.insert_live = f"""
            INSERT INTO {t.live} AS v (session_id, after_seq, n, token, frame)
            SELECT * FROM unnest($1::text[], $2::bigint[], $3::int[], $4::bigint[], $5::json[])
            ON CONFLICT (session_id, after_seq, n) DO UPDATE
               SET token = EXCLUDED.token, frame = EXCLUDED.frame
             WHERE v.token < EXCLUDED.token"""
        self.retire_live = f"""
            DELETE FROM {t.live} v USING unnest($1::text[], $2::bigint[]) AS d (sid, below)
             WHERE v.session_id = d.sid AND v.after_seq < d.below"""
        self.stale_live = f"""
            DELETE FROM {t.live} v WHERE NOT EXISTS (
                SELECT 1 FROM {t.leases} l WHERE l.session_id = v.session_id
                   AND l.token = v.token AND l.lease_id IS NOT NULL)"""

    def _worker(self, t: ServiceTables) -> None:
        """The worker (``_worker.py``, ``_residents.py``, ``_apply.py``, ``_drain.py``)."""
        self.mark_draining = f"UPDATE {t.workers} SET draining = true WHERE key = $1"
        self.revoke_lease = (
            f"UPDATE {t.leases} SET lease_id = NULL, token = token + 1, "
            "expires_at = now() WHERE session_id = $1 AND lease_id = $2 RETURNING 1"
        )
        self.wake_takeover = (
            f"INSERT INTO {t.wakeups} (session_id, reason) VALUES ($1, $2) "
            "ON CONFLICT (session_id) DO UPDATE SET reason = EXCLUDED.reason, "
            "claimed_by = NULL, claimed_at = NULL, due_at = now()"
        )
        self.mark_unloaded = (
            f"UPDATE {t.specs} SET status = 'unloaded', updated_at = now() WHERE session_id = $1"
        )
        # $1 session ids, $2 cmd_seq applied of each
        self.unapplied = (
            f"SELECT DISTINCT c.session_id FROM {t.commands} c "
            "JOIN unnest($1::text[], $2::bigint[]) AS r (sid, upto) ON c.session_id = r.sid "
            "WHERE c.consumed_at IS NULL AND c.cmd_seq > r.upto"
        )
        # $1 key, $2 profile names, $3 their versions, $4 limit, $5 seconds due at least
        self.claim_wakeups = (
            f"UPDATE {t.wakeups} w SET claimed_by = $1, claimed_at = now(), "
            "attempts = w.attempts + 1 WHERE w.session_id IN ("
            f"SELECT k.session_id FROM {t.wakeups} k JOIN {t.specs} s USING (session_id) "
            "JOIN unnest($2::text[], $3::int[]) AS p (name, version) "
            "ON s.profile = p.name AND s.profile_version = p.version "
            "WHERE k.claimed_by IS NULL "
            "AND k.due_at <= now() - make_interval(secs => $5) "
            "ORDER BY k.due_at LIMIT $4 FOR UPDATE OF k SKIP LOCKED) "
            "RETURNING w.session_id, w.reason"
        )

    def _worker_claims(self, t: ServiceTables) -> None:
        """Loading claimed sessions (``_residents.py``)."""
        self.done_wakeup = f"DELETE FROM {t.wakeups} WHERE session_id = $1 AND claimed_by = $2"
        self.retry_wakeup = (
            f"UPDATE {t.wakeups} SET claimed_by = NULL, claimed_at = NULL, "
            "due_at = now() + make_interval(secs => least(attempts, 30)) "
            "WHERE session_id = $1 AND claimed_by = $2"
        )
        self.release_claim = (
            f"UPDATE {t.wakeups} SET claimed_by = NULL, claimed_at = NULL "
            "WHERE session_id = $1 AND claimed_by = $2"
        )
        self.load_spec = (
            f"SELECT profile, profile_version, meta FROM {t.specs} WHERE session_id = $1"
        )

    def _worker_commands(self, t: ServiceTables) -> None:
        """Applying command rows (``_apply.py``) and unloading (``_residents.py``)."""
        self.unconsumed_page = (
            f"SELECT cmd_seq, kind, message_id, body FROM {t.commands} "
            "WHERE session_id = $1 AND consumed_at IS NULL AND cmd_seq > $2 "
            "ORDER BY cmd_seq LIMIT $3"
        )
        # A rider of the splice's batch: $1 session, $2 cmd_seq, $3 the event's seq
        self.consume = (
            f"UPDATE {t.commands} SET consumed_at = now(), consumed_seq = $3 "
            "WHERE session_id = $1 AND cmd_seq = $2 AND consumed_at IS NULL"
        )
        # $3 lease id, $4 token (the fence), $5 the error met, if any
        self.consume_fenced = (
            f"UPDATE {t.commands} c SET consumed_at = now(), error = $5 "
            f"FROM {t.leases} l "
            "WHERE c.session_id = $1 AND c.cmd_seq = $2 AND c.consumed_at IS NULL "
            "AND l.session_id = $1 AND l.lease_id = $3 AND l.token = $4 "
            "AND l.expires_at > now() RETURNING 1"
        )
        self.record_error = (
            f"UPDATE {t.commands} SET error = $3 WHERE session_id = $1 AND cmd_seq = $2"
        )
        self.write_status = (
            f"UPDATE {t.specs} SET status = $2, updated_at = now() "
            f"WHERE session_id = $1 AND EXISTS (SELECT 1 FROM {t.leases} "
            "WHERE session_id = $1 AND lease_id = $3)"
        )
        self.unloaded_if_unleased = (
            f"UPDATE {t.specs} SET status = 'unloaded', updated_at = now() "
            f"WHERE session_id = $1 AND NOT EXISTS (SELECT 1 FROM {t.leases} "
            "WHERE session_id = $1 AND lease_id IS NOT NULL AND expires_at > now())"
        )
        self.wake_if_unconsumed = (
            f"INSERT INTO {t.wakeups} (session_id, reason) SELECT $1, 'unload' "
            f"WHERE EXISTS (SELECT 1 FROM {t.commands} WHERE session_id = $1 "
            "AND consumed_at IS NULL) ON CONFLICT (session_id) DO NOTHING RETURNING 1"
        )
