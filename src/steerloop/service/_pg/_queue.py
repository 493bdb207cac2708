"""``queued``: why a session with work waiting has no worker yet (``GET /v1/sessions/{id}``).

A session no worker holds but with unconsumed commands or a wakeup is *queued*. The reason
is read from the rows every node shares, at the time of the request:

* no live worker (its liveness lock held, not draining) serves its profile at its version;
* every live worker serving it is at capacity and all its sessions are running (none can
  be unloaded to admit it: ``_capacity.py``);
* a worker claimed it and is loading it;
* otherwise it waits for a worker to claim it (one with a free slot, or one that unloads
  an idle session for it).
"""

from __future__ import annotations

from typing import Any

from ._schema import ServiceTables

__all__ = ["queued_reason"]


async def queued_reason(
    pool: Any, tables: ServiceTables, ns: int, session_id: str, profile: str, version: int
) -> str | None:
    """Why ``session_id`` (no live lease) waits for a worker, or ``None`` when nothing of it
    waits (no unconsumed command, no wakeup): it is simply unloaded."""
    t = tables
    row = await pool.fetchrow(
        f"""
        SELECT EXISTS (SELECT 1 FROM {t.commands}
                        WHERE session_id = $1 AND consumed_at IS NULL) AS commands,
               (SELECT claimed_by FROM {t.wakeups} WHERE session_id = $1) AS claimed_by,
               EXISTS (SELECT 1 FROM {t.wakeups} WHERE session_id = $1) AS woken
        """,
        session_id,
    )
    if not row["commands"] and not row["woken"]:
        return None
    if row["claimed_by"] is not None:
        return "a worker is loading it"
    workers = await pool.fetch(
        f"""
        SELECT w.capacity,
               (SELECT count(*) FROM {t.leases} l WHERE l.owner_key = w.key
                   AND l.lease_id IS NOT NULL AND l.expires_at > now()) AS resident,
               (SELECT count(*) FROM {t.leases} l JOIN {t.specs} s USING (session_id)
                 WHERE l.owner_key = w.key AND l.lease_id IS NOT NULL
                   AND l.expires_at > now() AND s.status = 'running') AS busy
          FROM {t.workers} w
         WHERE NOT w.draining AND w.profiles ->> $1 = $2::int::text
           AND EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND granted
                       AND objsubid = 2 AND classid = $3::bigint::oid
                       AND objid::bigint = w.key)
        """,
        profile,
        version,
        ns,
    )
    if not workers:
        return f"no running worker serves profile {profile!r} version {version}"
    if all(w["resident"] >= w["capacity"] and w["busy"] >= w["capacity"] for w in workers):
        return (
            f"every worker serving profile {profile!r} version {version} is at capacity "
            f"and all its sessions are busy ({len(workers)} worker"
            f"{'s' if len(workers) != 1 else ''})"
        )
    return "waiting for a worker to claim it"
