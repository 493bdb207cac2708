"""Ending the control connection of a worker that is alive to PostgreSQL but not to us.

A paused or hung worker (SIGSTOP, a stalled VM, a partition behind a live socket) keeps its
socket and so its advisory lock: it looks alive while it does nothing. Its heartbeat (the
control connection's check) is what shows it. Ending its backend (``pg_terminate_backend``)
drops its lock: as a leader it stops blocking every sweep, as an owner its sessions are
taken over; once it runs again it finds its connection gone and self-fences.
"""

from __future__ import annotations

import logging
from typing import Any

from ._control import LEADER_KEY, ControlConnection
from ._sql import TERMINATE, Sql

__all__ = ["depose_hung", "depose_stale_leader"]

log = logging.getLogger("steerloop.service")


async def depose_stale_leader(
    conn: Any, q: Sql, control: ControlConnection, stale_after: float, timeout: float
) -> int | None:
    """End the control connection of a leader whose heartbeat is older than
    ``stale_after``; its worker key, or ``None`` when the leader is well."""
    row = await conn.fetchrow(q.stale_leader, control.ns, LEADER_KEY, stale_after, timeout=timeout)
    if row is None:
        return None
    log.warning(
        "sweeper of %s: the leader (worker key %s, backend %s) has no heartbeat for "
        "%.1f s: ending its control connection",
        control.worker_id,
        row["key"],
        row["pid"],
        stale_after,
    )
    await conn.fetchval(TERMINATE, row["pid"], timeout=timeout)
    return int(row["key"])


async def depose_hung(
    conn: Any, q: Sql, control: ControlConnection, stale_after: float, timeout: float
) -> list[int]:
    """End the control connections of the other workers whose heartbeat is older than
    ``stale_after``; their keys."""
    rows = await conn.fetch(q.hung_workers, control.ns, control.key, stale_after, timeout=timeout)
    for row in rows:
        log.warning(
            "sweeper of %s: worker key %s has no heartbeat for %.1f s: ending its "
            "control connection (backend %s)",
            control.worker_id,
            row["key"],
            stale_after,
            row["pid"],
        )
        await conn.fetchval(TERMINATE, row["pid"], timeout=timeout)
    return [int(row["key"]) for row in rows]
