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

from ._schema import ServiceTables

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
    tables: ServiceTables,
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
    t = tables
    names = list(profiles)
    return list(
        await pool.fetch(
            f"UPDATE {t.wakeups} w SET claimed_by = $1, claimed_at = now(), "
            "attempts = w.attempts + 1 WHERE w.session_id IN ("
            f"SELECT k.session_id FROM {t.wakeups} k JOIN {t.specs} s USING (session_id) "
            "JOIN unnest($2::text[], $3::int[]) AS p (name, version) "
            "ON s.profile = p.name AND s.profile_version = p.version "
            "WHERE k.claimed_by IS NULL "
            "AND k.due_at <= now() - make_interval(secs => $5) "
            "ORDER BY k.due_at LIMIT $4 FOR UPDATE OF k SKIP LOCKED) "
            "RETURNING w.session_id, w.reason",
            key,
            names,
            [profiles[name] for name in names],
            limit,
            min_age,
        )
    )
