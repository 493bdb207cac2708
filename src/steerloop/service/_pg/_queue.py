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

from ._sql import Sql

__all__ = ["queued_reason"]


async def queued_reason(
    pool: Any, q: Sql, ns: int, session_id: str, profile: str, version: int
) -> str | None:
    """Why ``session_id`` (no live lease) waits for a worker, or ``None`` when nothing of it
    waits (no unconsumed command, no wakeup): it is simply unloaded."""
    row = await pool.fetchrow(q.queued_work, session_id)
    if not row["commands"] and not row["woken"]:
        return None
    if row["claimed_by"] is not None:
        return "a worker is loading it"
    workers = await pool.fetch(q.queued_workers, profile, version, ns)
    if not workers:
        return f"no running worker serves profile {profile!r} version {version}"
    if all(w["resident"] >= w["capacity"] and w["busy"] >= w["capacity"] for w in workers):
        return (
            f"every worker serving profile {profile!r} version {version} is at capacity "
            f"and all its sessions are busy ({len(workers)} worker"
            f"{'s' if len(workers) != 1 else ''})"
        )
    return "waiting for a worker to claim it"
