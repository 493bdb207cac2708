"""Graceful shutdown of a PostgreSQL worker (SIGTERM, a rolling deploy): it drains instead of
aborting. Real worker processes (``steerloop serve --role worker``) and an API node in this
process, on the harness of ``test_pg_failover.py``.

* a turn that outlives ``--drain-timeout`` is handed over like a takeover (fenced, lease
  revoked, ``takeover`` wakeup) and another worker repairs and continues it;
* a turn that ends within the drain completes on its owner, which then unloads it;
* idle sessions are unloaded (leases released, no wakeup) and reload elsewhere on their
  next message with no repair.
"""

from __future__ import annotations

import signal
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from .livesupport import fresh_schema, now, poll, sql
from .test_pg_failover import (
    WAIT,
    Cluster,
    WorkerProc,
    check_log,
    check_one_writer,
    check_taken_over,
    cluster,
    committed_batches,
    replies,
    result_codes,
    takeover_requests,
    turn_ends,
)

pytestmark = pytest.mark.timeout(180)


@pytest.fixture
async def schema() -> AsyncIterator[str]:
    async for name in fresh_schema():
        yield name


async def exited(worker: WorkerProc) -> None:
    """Wait (bounded) for ``worker`` to exit after its SIGTERM. uvicorn re-raises a caught
    SIGTERM once its shutdown (our drain) is over, so the code is -SIGTERM (or 0)."""
    code = await poll(lambda: now(worker.proc.poll()), until=lambda r: r is not None, timeout=WAIT)
    assert code in (0, -signal.SIGTERM), worker.log.read_text()
    assert "Traceback" not in worker.log.read_text()


async def terminate(worker: WorkerProc) -> None:
    """SIGTERM ``worker`` and wait for it to have left."""
    worker.proc.send_signal(signal.SIGTERM)
    await exited(worker)


async def draining(c: Cluster, worker: WorkerProc) -> bool:
    rows = await sql(f"SELECT draining FROM {c.t.workers} WHERE worker_id = $1", worker.worker_id)
    return bool(rows and rows[0]["draining"])


async def live_leases(c: Cluster) -> int:
    rows = await sql(
        f"SELECT count(*) FROM {c.t.leases} WHERE lease_id IS NOT NULL AND expires_at > now()"
    )
    return int(rows[0][0])


async def test_sigterm_mid_tool_hands_the_turn_over_after_the_drain_timeout(
    tmp_path: Path, schema: str
) -> None:
    """G-2, C7.2-9: SIGTERM of the owner while its tool call runs past ``--drain-timeout 1``:
    the process exits having handed the session over itself (its log says so; nothing of
    its abort is stored: no cancelled result), another worker resumes it, repair answers
    the call TOOL_OUTCOME_UNKNOWN and ends the turn ``interrupted``, the takeover message
    names the call and the turn carries on to ``completed`` under a greater token."""
    async with cluster(tmp_path, schema) as c:
        workers = [c.start_worker("--drain-timeout", "1") for _ in range(2)]
        owner = await c.held(*workers)
        other = next(w for w in workers if w is not owner)
        token, _, _ = await c.lease("s1")

        await terminate(owner)
        assert "handed s1 over (still busy)" in owner.log.read_text()
        events = await c.wait_log("s1", lambda ev: turn_ends(ev) == ["interrupted", "completed"])
        assert result_codes(events) == {"call-g1": "TOOL_OUTCOME_UNKNOWN"}
        assert replies(events)[-1] == "continued after takeover"
        await check_taken_over(c, token, other)
        check_log("s1", events)
        batches = await committed_batches(c)
        assert check_one_writer("s1", events, batches) == 2
        assert {b["pid"] for b in batches if b["token"] == token} == {owner.pid}
        assert {b["pid"] for b in batches if b["token"] > token} == {other.pid}


async def test_a_turn_that_ends_within_the_drain_completes_on_its_owner(
    tmp_path: Path, schema: str
) -> None:
    """SIGTERM mid-tool with a long drain: the worker's row says ``draining`` while the call
    is held; once the gate opens the turn completes there (no repair, no takeover), the
    worker unloads the session (lease released, status unloaded, no wakeup) and exits; the
    next message loads it on the other worker, which resumes the log as it was."""
    async with cluster(tmp_path, schema) as c:
        workers = [c.start_worker("--drain-timeout", "30") for _ in range(2)]
        owner = await c.held(*workers)
        other = next(w for w in workers if w is not owner)
        owner.proc.send_signal(signal.SIGTERM)
        await poll(lambda: draining(c, owner), until=bool, timeout=WAIT)
        assert owner.proc.poll() is None  # still draining: the call is held
        (tmp_path / "open-g1").touch()
        await exited(owner)
        events = await c.events("s1")
        assert turn_ends(events) == ["completed"]
        assert result_codes(events) == {"call-g1": None}
        assert replies(events) == ["", "after tools"]
        assert await live_leases(c) == 0
        assert [r[0] for r in await sql(f"SELECT status FROM {c.t.specs}")] == ["unloaded"]
        assert (await sql(f"SELECT count(*) FROM {c.t.wakeups}"))[0][0] == 0
        assert "handed" not in owner.log.read_text()

        await c.send("s1", "next")
        final = await c.wait_log("s1", lambda ev: turn_ends(ev) == ["completed", "completed"])
        assert final[: len(events)] == events
        assert replies(final)[-1] == "echo next"
        assert await c.owner_pid("s1") == other.pid
        assert takeover_requests(c, "s1", [other.pid]) == []
        check_log("s1", final)


async def test_sigterm_of_an_owner_of_idle_sessions_unloads_them(
    tmp_path: Path, schema: str
) -> None:
    """SIGTERM of a worker holding only idle sessions: it releases their leases at once (no
    wakeup: nothing waits) and exits; each session reloads on the other worker with its
    next message, with no repair (no interrupted turn, no takeover message)."""
    async with cluster(tmp_path, schema) as c:
        first = c.start_worker("--drain-timeout", "30")
        await c.registered(first)
        sessions = ["i1", "i2"]
        for sid in sessions:
            await c.create(sid, "hi")
        for sid in sessions:
            await c.wait_log(sid, lambda ev: turn_ends(ev) == ["completed"])
        for sid in sessions:
            assert await c.owner_pid(sid) == first.pid
        second = c.start_worker()
        await c.registered(second)
        before = {sid: await c.events(sid) for sid in sessions}

        await terminate(first)
        assert await live_leases(c) == 0
        assert (await sql(f"SELECT count(*) FROM {c.t.wakeups}"))[0][0] == 0
        statuses = await sql(f"SELECT status FROM {c.t.specs} ORDER BY session_id")
        assert [r[0] for r in statuses] == ["unloaded", "unloaded"]
        for sid in sessions:
            await c.send(sid, "again")
        for sid in sessions:
            events = await c.wait_log(sid, lambda ev: turn_ends(ev) == ["completed", "completed"])
            assert events[: len(before[sid])] == before[sid]
            added = [e.type for e in events[len(before[sid]) :]]
            assert added[0] == "session/end-seed"  # a plain resume: no repair before it
            assert "tool/result" not in added
            assert replies(events) == ["echo hi", "echo again"]
            assert await c.owner_pid(sid) == second.pid
            check_log(sid, events)
        assert takeover_requests(c, "i1", [second.pid]) == []
        assert takeover_requests(c, "i2", [second.pid]) == []
        assert "handed" not in first.log.read_text()
