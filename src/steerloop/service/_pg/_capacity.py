"""Fair capacity: which sessions a worker claims, and which idle one makes room.

A worker hosts at most ``capacity`` sessions. Idle sessions stay resident (their next
message is served without a reload) until ``idle_unload``; without more, a worker full of
idle sessions would leave a new session's message waiting for that unload (minutes). So:

* **Claims** take unclaimed, due wakeups of the profiles and versions this worker serves,
  ``FOR UPDATE SKIP LOCKED`` (``claim_wakeups``), up to the free slots.
* **Admission in place of an idle session.** A worker whose free slots are all taken also
  claims wakeups older than ``ADMIT_AFTER`` (a worker with free slots had its chance
  first), up to the number of its idle sessions, and unloads that many of them, least
  recently active first (``least_recent_idle``): their lease released, they reload on
  their next message, on any worker.
* **All busy.** A worker whose sessions are all running claims nothing: the session is left
  for another worker, and ``GET /v1/sessions/{id}`` says ``queued`` with the reason
  (``_queue.py``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ._sql import Sql

__all__ = ["ADMIT_AFTER", "claim_wakeups", "least_recent_idle"]

ADMIT_AFTER = 0.25
"""Seconds a wakeup waits before a full worker unloads an idle session to admit it."""


def least_recent_idle(residents: Iterable[tuple[str, bool, float]]) -> list[str]:
    """The idle sessions among ``(session_id, idle, last_active)``, least recently active
    first (the order to unload them in)."""
    idle = [(last, sid) for sid, is_idle, last in residents if is_idle]
    return [sid for _, sid in sorted(idle)]


async def claim_wakeups(
    pool: Any,
    sql: Sql,
    key: int,
    profiles: Mapping[str, int],
    limit: int,
    *,
    min_age: float = 0.0,
) -> list[Any]:
    """Claim up to ``limit`` due, unclaimed wakeups (oldest first) of sessions whose profile
    and version are in ``profiles``, due at least ``min_age`` seconds ago; returns their
    ``session_id, reason`` rows (claimed by ``key``, attempts counted)."""
    if limit <= 0 or not profiles:
        return []
    names = list(profiles)
    return list(
        await pool.fetch(
            sql.claim_wakeups,
            key,
            names,
            [profiles[name] for name in names],
            limit,
            min_age,
        )
    )
