"""Leaving (``Worker.close``, a SIGTERM): the drain of a rolling deploy.

The worker claims nothing more (its row says ``draining``, so the API counts it out), idle
sessions are unloaded at once, running turns get ``drain_timeout`` seconds to end (their
commands, a steer or a cancel, still apply), and the still-busy ones are handed over like a
takeover, without waiting for the sweeper's grace: the writer fenced, the lease revoked, a
``takeover`` wakeup queued, so another worker resumes, repairs and continues them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Any

from ._residents import Residents
from ._sql import NOTIFY
from ._sweeper import TAKEOVER

__all__ = ["hand_over", "mark_draining", "wait_turns"]

log = logging.getLogger("steerloop.service")


async def mark_draining(residents: Residents, key: int) -> None:
    """The worker row says ``draining``: the API counts this worker out."""
    try:
        await residents.pool.execute(residents.q.mark_draining, key)
    except Exception:  # the row only informs the API; leaving goes on
        log.exception("worker %s: marking itself draining failed", residents.worker_id)


async def wait_turns(
    residents: Residents, timeout: float, kick: asyncio.Event, lost: Callable[[], bool]
) -> None:
    """Until no resident session is busy, for at most ``timeout`` seconds (woken by every
    status change through ``kick``; the short period is a safety net)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not lost() and residents.any_busy():
        left = deadline - loop.time()
        if left <= 0:
            return
        kick.clear()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(min(left, 0.25)):
                await kick.wait()


async def hand_over(residents: Residents, session_id: str) -> None:
    """Give a busy session to another worker as a crash would, without the wait: the
    writer is fenced first (nothing more of ours is appended, the lease is not released),
    the agent aborted, then in one transaction the lease is revoked (token + 1) and a
    ``takeover`` wakeup queued. A batch already committing either lands before the
    revocation (it holds the lease row) or is refused by its fence."""
    resident = residents.pop(session_id)
    if resident is None:
        return
    writer = residents.store.writer(session_id)
    lease_id = None
    if writer is not None and writer.error is None:
        lease_id = writer.lease_id
        writer.lose()
    try:
        await resident.handle.dispose(timeout=1.0)
    except Exception as exc:
        log.info("worker %s: disposing %s: %s", residents.worker_id, session_id, exc)
    if lease_id is None:  # fenced out already: its new owner has it
        return
    try:
        async with residents.pool.acquire() as conn, conn.transaction():
            if await _revoke(conn, residents, session_id, lease_id):
                log.warning(
                    "worker %s: handed %s over (still busy)", residents.worker_id, session_id
                )
    except Exception:  # the lease then expires and the sweeper hands the session on
        log.exception("worker %s: handing %s over failed", residents.worker_id, session_id)


async def _revoke(conn: Any, residents: Residents, session_id: str, lease_id: Any) -> bool:
    q = residents.q
    if await conn.fetchval(q.revoke_lease, session_id, lease_id) is None:
        return False
    await conn.execute(q.wake_takeover, session_id, TAKEOVER)
    await conn.execute(q.mark_unloaded, session_id)
    await conn.execute(NOTIFY, residents.t.wake_channel, session_id)
    return True
