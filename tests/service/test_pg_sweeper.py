"""The sweeper (design/SERVICE.md §3.3, §3.4) against the local PostgreSQL: one leader among
many, dead workers' leases revoked after the grace (not before), takeover wakeups, the TTL
path, reconciliation of lost NOTIFYs, claims of dead workers cleared.

The grace is judged on the sweeper's injectable clock (a fake one here), so "not before the
grace" is asserted exactly; database ages (command ``created_at``, lease ``expires_at``) are
set in the rows themselves.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import asyncpg
import pytest

from steerloop import SessionConflictError
from steerloop.service._pg._control import ControlConnection
from steerloop.service._pg._schema import ServiceTables as Tables
from steerloop.service._pg._sweeper import Sweeper, SweepReport
from steerloop.session._events import SessionEvent, TurnStart
from steerloop.session._postgres import PostgresStore

from .livesupport import POSTGRES_URL, fresh_schema, now, poll, sql


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
async def schema() -> AsyncIterator[str]:
    async for name in fresh_schema():
        yield name


class World:
    """Controls, sweepers, a pool and LISTEN connections on one schema; closed at the end."""

    def __init__(self, schema: str) -> None:
        self.schema = schema
        self.t = Tables(schema)
        self.clock = FakeClock()
        self.pool: Any = None
        self.controls: list[ControlConnection] = []
        self.sweepers: list[Sweeper] = []
        self.listeners: list[Any] = []
        self.stores: list[PostgresStore] = []
        self.lost: list[str] = []

    async def control(self, worker_id: str) -> ControlConnection:
        control = ControlConnection(
            POSTGRES_URL,
            self.schema,
            worker_id=worker_id,
            profiles={"default": 1},
            capacity=4,
            on_lost=lambda: self.lost.append(worker_id),
            on_notify=lambda c, p: None,
        )
        self.controls.append(control)
        await control.start()
        return control

    async def sweeper(self, control: ControlConnection, **options: Any) -> Sweeper:
        if self.pool is None:
            self.pool = await asyncpg.create_pool(POSTGRES_URL, min_size=1, max_size=4)
        options.setdefault("clock", self.clock)
        options.setdefault("grace", 1.0)
        sweeper = Sweeper(self.pool, self.t, control, **options)
        self.sweepers.append(sweeper)
        return sweeper

    async def listen(self, channel: str) -> asyncio.Queue[str]:
        """A test connection LISTENing on ``channel``; payloads land in the queue."""
        conn = await asyncpg.connect(POSTGRES_URL, timeout=5)
        self.listeners.append(conn)
        queue: asyncio.Queue[str] = asyncio.Queue()
        await conn.add_listener(channel, lambda _c, _p, _ch, payload: queue.put_nowait(payload))
        return queue

    def store(self) -> PostgresStore:
        store = PostgresStore(POSTGRES_URL, schema=self.schema)
        self.stores.append(store)
        return store

    async def close(self) -> None:
        for sweeper in self.sweepers:
            await sweeper.close()
        for control in self.controls:
            await control.close()
        for conn in self.listeners:
            await conn.close()
        for store in self.stores:
            with contextlib.suppress(SessionConflictError, ExceptionGroup):
                await store.close()
        if self.pool is not None:
            await self.pool.close()

    # --- rows -------------------------------------------------------------------------------

    async def spec(self, sid: str, status: str = "idle") -> None:
        await sql(
            f"INSERT INTO {self.t.specs} (session_id, profile, profile_version, status) "
            "VALUES ($1, 'default', 1, $2)",
            sid,
            status,
        )

    async def lease(self, sid: str, owner_key: int, *, ttl: float = 30.0) -> None:
        """A live lease of ``sid`` owned by the worker ``owner_key`` (token 1)."""
        await sql(
            f"INSERT INTO {self.t.leases} (session_id, owner, lease_id, token, expires_at, "
            "owner_key) VALUES ($1, 'test', gen_random_uuid(), 1, "
            "now() + make_interval(secs => $2), $3)",
            sid,
            ttl,
            owner_key,
        )

    async def command(self, sid: str, cmd_seq: int, *, age: float, consumed: bool = False) -> None:
        await sql(
            f"INSERT INTO {self.t.commands} (session_id, cmd_seq, kind, message_id, body, "
            "created_at, consumed_at) VALUES ($1, $2, 'steer', $3, '{}'::json, "
            "now() - make_interval(secs => $4), CASE WHEN $5 THEN now() END)",
            sid,
            cmd_seq,
            f"m{cmd_seq}",
            age,
            consumed,
        )

    async def leases(self) -> dict[str, tuple[int, bool]]:
        """session → (token, lease_id is set)."""
        rows = await sql(
            f"SELECT session_id, token, lease_id IS NOT NULL AS held FROM {self.t.leases}"
        )
        return {r["session_id"]: (r["token"], r["held"]) for r in rows}

    async def wakeups(self) -> dict[str, tuple[str, int | None]]:
        """session → (reason, claimed_by)."""
        rows = await sql(f"SELECT session_id, reason, claimed_by FROM {self.t.wakeups}")
        return {r["session_id"]: (r["reason"], r["claimed_by"]) for r in rows}

    async def workers(self) -> list[str]:
        rows = await sql(f"SELECT worker_id FROM {self.t.workers} ORDER BY worker_id")
        return [r["worker_id"] for r in rows]


@pytest.fixture
async def world(schema: str) -> AsyncIterator[World]:
    w = World(schema)
    try:
        yield w
    finally:
        await w.close()


async def kill_backend(control: ControlConnection) -> None:
    """End a control connection from the server side (``pg_terminate_backend``)."""
    rows = await sql(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1",
        control.application_name,
    )
    assert [r[0] for r in rows] == [True]
    await poll(lambda: now(control.lost), until=bool, timeout=5)


async def sweep_until(
    sweeper: Sweeper, until: Callable[[SweepReport], bool], timeout: float = 5.0
) -> SweepReport:
    """Sweep (bounded) until the report satisfies ``until`` (a lock's disappearance is seen
    by pg_locks a moment after the backend is told to end)."""
    return await poll(sweeper.sweep_once, until=until, timeout=timeout)


async def drain(queue: asyncio.Queue[str], n: int, timeout: float = 5.0) -> list[str]:
    async with asyncio.timeout(timeout):
        return [await queue.get() for _ in range(n)]


def turn(seq: int, n: int) -> SessionEvent:
    return SessionEvent(seq=seq, time=1, type="turn/start", data=TurnStart(turn=n))


@contextlib.contextmanager
def child_process(code: str, schema: str) -> Iterator[subprocess.Popen[bytes]]:
    """``python -c CODE POSTGRES_URL SCHEMA`` with its stdout piped; SIGKILLed (a stopped
    process too) and reaped on the way out."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    child = subprocess.Popen(
        [sys.executable, "-c", code, POSTGRES_URL, schema], stdout=subprocess.PIPE, env=env
    )
    try:
        yield child
    finally:
        child.kill()
        child.wait()
        if child.stdout is not None:
            child.stdout.close()


async def read_line(child: subprocess.Popen[bytes]) -> bytes:
    """The child's next line of output (bounded)."""
    assert child.stdout is not None
    return await asyncio.wait_for(asyncio.to_thread(child.stdout.readline), 20)


# --- leadership -------------------------------------------------------------------------------


async def test_one_leader_among_three_and_leadership_passes_on(world: World) -> None:
    """Of three sweepers on three control connections exactly one leads and sweeps; when the
    leader's connection dies another takes over, and that new leader waits one full grace
    (on its own clock) before revoking the dead worker's leases."""
    controls = [await world.control(f"w{i}") for i in range(3)]
    sweepers = [await world.sweeper(c) for c in controls]
    reports = [await s.sweep_once() for s in sweepers]
    assert [r.leader for r in reports] == [True, False, False]
    for _ in range(3):  # stays put while the leader lives
        assert [(await s.sweep_once()).leader for s in sweepers] == [True, False, False]
    assert [s.sweeps for s in sweepers] == [4, 0, 0]

    await world.spec("s", "running")
    await world.lease("s", controls[0].key)
    await kill_backend(controls[0])
    assert not (await sweepers[0].sweep_once()).leader  # a lost control connection never leads
    new = await poll(lambda: _first_leader(sweepers[1:]), until=lambda s: s is not None, timeout=5)
    assert new is not None
    others = [s for s in sweepers[1:] if s is not new]
    assert not (await others[0].sweep_once()).leader
    first = await sweep_until(new, lambda r: controls[0].key in r.absent)
    assert first.dead == [] and await world.leases() == {"s": (1, True)}
    world.clock.now += 0.99
    assert (await new.sweep_once()).dead == []
    world.clock.now += 0.01
    report = await new.sweep_once()
    assert report.dead == [controls[0].key] and report.revoked == ["s"]
    assert await world.leases() == {"s": (2, False)}


async def _first_leader(sweepers: list[Sweeper]) -> Sweeper | None:
    for sweeper in sweepers:
        if (await sweeper.sweep_once()).leader:
            return sweeper
    return None


async def test_running_sweepers_elect_one_leader(world: World) -> None:
    """Started as tasks, three sweepers settle on one that sweeps; closing it hands the
    leadership to another, cooperatively (no task is cancelled)."""
    controls = [await world.control(f"w{i}") for i in range(3)]
    sweepers = [await world.sweeper(c, period=0.02) for c in controls]
    for s in sweepers:
        s.start()
    await poll(lambda: now(sum(s.sweeps for s in sweepers)), until=lambda n: n >= 5)
    leaders = [s for s in sweepers if s.leader]
    assert len(leaders) == 1
    assert [s for s in sweepers if s.sweeps] == leaders
    await leaders[0].close()
    rest = [s for s in sweepers if s is not leaders[0]]
    await poll(lambda: now([s for s in rest if s.leader]), until=lambda led: len(led) == 1)
    assert leaders[0].leader is False


# --- dead workers -----------------------------------------------------------------------------


async def test_dead_worker_leases_revoked_after_the_grace_not_before(world: World) -> None:
    """A worker whose lock vanished (its connection terminated) has its leases revoked once
    the leader has seen it absent for the grace: token + 1, lease id NULL. Its running
    session and its session with an unconsumed command get a ``takeover`` wakeup, announced
    on ``steerloop_wake``; its idle session gets none; a live worker's lease is untouched;
    the dead worker's row is deleted. A real writer holding a revoked lease is fenced (G-2)."""
    leader = await world.control("leader")
    victim = await world.control("victim")
    alive = await world.control("alive")
    sweeper = await world.sweeper(leader)
    store = world.store()
    writer = await store.open_writer("run")
    writer.write(turn(1, 1))
    writer.publish()
    await writer.flush()
    await sql(f"UPDATE {world.t.leases} SET owner_key = $1", victim.key)
    await world.spec("run", "running")
    await world.spec("idle", "idle")
    await world.lease("idle", victim.key)
    await world.spec("queued", "idle")
    await world.lease("queued", victim.key)
    await world.command("queued", 1, age=0.0)
    await world.spec("other", "running")
    await world.lease("other", alive.key)
    wake = await world.listen(world.t.wake_channel)

    assert (await sweeper.sweep_once()).absent == []
    await kill_backend(victim)
    report = await sweep_until(sweeper, lambda r: r.absent == [victim.key])
    assert report.dead == [] and report.revoked == []
    world.clock.now += 0.5
    assert (await sweeper.sweep_once()).dead == []
    before = await world.leases()
    assert before["idle"] == (1, True) and before["queued"] == (1, True)
    assert await world.wakeups() == {}

    world.clock.now += 0.5
    report = await sweeper.sweep_once()
    assert report.dead == [victim.key]
    assert report.revoked == ["idle", "queued", "run"]
    assert sorted(report.woken) == ["queued", "run"]
    assert await world.leases() == {
        "run": (2, False),
        "idle": (2, False),
        "queued": (2, False),
        "other": (1, True),
    }
    assert await world.wakeups() == {"run": ("takeover", None), "queued": ("takeover", None)}
    assert sorted(await drain(wake, 2)) == ["queued", "run"]
    assert await world.workers() == ["alive", "leader"]
    writer.write(turn(2, 2))
    with pytest.raises(SessionConflictError):
        await writer.flush()
    again = await sweeper.sweep_once()  # nothing left to do: idempotent
    assert (again.dead, again.revoked, again.woken) == ([], [], [])


async def test_a_lock_back_within_the_grace_revokes_nothing(world: World) -> None:
    """An absence the leader stops seeing before the grace (the key's lock is held again)
    is forgotten: the grace starts over at the next absence."""
    leader = await world.control("leader")
    sweeper = await world.sweeper(leader)
    holder = await asyncpg.connect(POSTGRES_URL, timeout=5)
    world.listeners.append(holder)
    key = 4242
    await world.spec("s", "running")
    await world.lease("s", key)
    assert (await sweeper.sweep_once()).absent == [key]
    world.clock.now += 0.9
    await holder.execute("SELECT pg_advisory_lock($1, $2)", leader.ns, key)
    assert (await sweeper.sweep_once()).absent == []
    await holder.execute("SELECT pg_advisory_unlock($1, $2)", leader.ns, key)
    world.clock.now += 0.2
    assert (await sweeper.sweep_once()).dead == []  # a new absence: a new grace
    world.clock.now += 1.0
    assert (await sweeper.sweep_once()).revoked == ["s"]


_CHILD = textwrap.dedent(
    """
    import asyncio, sys
    from steerloop.service._pg._control import ControlConnection

    async def main():
        control = ControlConnection(sys.argv[1], sys.argv[2], worker_id="child",
            profiles={}, capacity=1, on_lost=lambda: None, on_notify=lambda c, p: None)
        await control.start()
        print(control.key, flush=True)
        await asyncio.Event().wait()

    asyncio.run(main())
    """
)


async def test_sigkilled_worker_process_is_swept(world: World) -> None:
    """A worker process killed with SIGKILL loses its lock with its socket; after the grace
    its running session's lease is revoked and a takeover wakeup queued."""
    leader = await world.control("leader")
    sweeper = await world.sweeper(leader)
    with child_process(_CHILD, world.schema) as child:
        key = int(await read_line(child))
        await world.spec("s", "running")
        await world.lease("s", key)
        assert (await sweeper.sweep_once()).absent == []
        os.kill(child.pid, signal.SIGKILL)
        await asyncio.wait_for(asyncio.to_thread(child.wait), 10)
        await sweep_until(sweeper, lambda r: r.absent == [key])
        assert await world.leases() == {"s": (1, True)}
        world.clock.now += 1.0
        report = await sweeper.sweep_once()
        assert (report.dead, report.revoked, report.woken) == ([key], ["s"], ["s"])
        assert await world.leases() == {"s": (2, False)}
        assert await world.wakeups() == {"s": ("takeover", None)}
        assert await world.workers() == ["leader"]


_LEADER_CHILD = textwrap.dedent(
    """
    import asyncio, sys
    import asyncpg
    from steerloop.service._pg._control import ControlConnection
    from steerloop.service._pg._sweeper import Sweeper
    from steerloop.service._pg._schema import ServiceTables as Tables

    async def main():
        lost = asyncio.Event()
        control = ControlConnection(sys.argv[1], sys.argv[2], worker_id="paused",
            profiles={}, capacity=1, on_lost=lost.set, on_notify=lambda c, p: None,
            check_interval=0.05)
        await control.start()
        pool = await asyncpg.create_pool(sys.argv[1], min_size=1, max_size=2)
        sweeper = Sweeper(pool, Tables(sys.argv[2]), control)
        assert (await sweeper.sweep_once()).leader
        print("leading", control.key, flush=True)
        await lost.wait()
        print("lost", flush=True)
        await sweeper.close()
        await control.close()
        await pool.close()

    asyncio.run(main())
    """
)


async def test_a_paused_leader_is_deposed(world: World) -> None:
    """A leader paused with SIGSTOP keeps its lock but stops sweeping; once its heartbeat is
    older than ``leader_stale_after``, another sweeper ends its control connection and
    leads. Resumed with SIGCONT, the old leader learns it lost its connection."""
    with child_process(_LEADER_CHILD, world.schema) as child:
        word, key = (await read_line(child)).split()
        assert word == b"leading"
        mine = await world.control("standby")
        sweeper = await world.sweeper(mine, leader_stale_after=0.5)
        report = await sweeper.sweep_once()
        assert (report.leader, report.deposed) == (False, None)  # a healthy leader stays
        os.kill(child.pid, signal.SIGSTOP)
        report = await sweep_until(sweeper, lambda r: r.deposed is not None, timeout=10)
        assert report.deposed == int(key)
        report = await sweep_until(sweeper, lambda r: r.leader, timeout=5)
        os.kill(child.pid, signal.SIGCONT)
        assert await read_line(child) == b"lost\n"
        assert await asyncio.wait_for(asyncio.to_thread(child.wait), 20) == 0


async def test_claims_of_dead_keys_are_cleared(world: World) -> None:
    """A wakeup claimed by a worker that died before finishing it is released (claim
    cleared, announced again) after the grace; a live worker's claim stays."""
    leader = await world.control("leader")
    alive = await world.control("alive")
    sweeper = await world.sweeper(leader)
    await world.spec("a", "new")
    await world.spec("b", "new")
    dead_key = 777
    await sql(
        f"INSERT INTO {world.t.wakeups} (session_id, reason, claimed_by, claimed_at) VALUES "
        "('a', 'create', $1, now()), ('b', 'create', $2, now())",
        dead_key,
        alive.key,
    )
    wake = await world.listen(world.t.wake_channel)
    assert (await sweeper.sweep_once()).absent == [dead_key]
    assert await world.wakeups() == {"a": ("create", dead_key), "b": ("create", alive.key)}
    world.clock.now += 1.0
    report = await sweeper.sweep_once()
    assert report.unclaimed == ["a"]
    assert await world.wakeups() == {"a": ("create", None), "b": ("create", alive.key)}
    assert await drain(wake, 1) == ["a"]


# --- TTL ----------------------------------------------------------------------------------------


async def test_expired_lease_of_a_running_session_gets_a_wakeup(world: World) -> None:
    """A paused owner keeps its lock, so only the TTL shows it: an expired lease of a running
    session gets a ``takeover`` wakeup (announced); an expired idle session and an unexpired
    running one get none; with ``ttl_takeover=False`` nothing happens."""
    leader = await world.control("leader")
    paused = await world.control("paused")
    off = await world.sweeper(leader, ttl_takeover=False)
    await world.spec("stuck", "running")
    await world.lease("stuck", paused.key, ttl=-1)
    await world.spec("rest", "idle")
    await world.lease("rest", paused.key, ttl=-1)
    await world.spec("fine", "running")
    await world.lease("fine", paused.key, ttl=30)
    assert (await off.sweep_once()).woken == []
    assert await world.wakeups() == {}
    await off.close()
    sweeper = await world.sweeper(leader)
    wake = await world.listen(world.t.wake_channel)
    report = await sweeper.sweep_once()
    assert report.leader and report.woken == ["stuck"] and report.revoked == []
    assert await world.wakeups() == {"stuck": ("takeover", None)}
    assert await drain(wake, 1) == ["stuck"]
    assert (await sweeper.sweep_once()).woken == []  # the wakeup is there: not twice


# --- reconciliation -------------------------------------------------------------------------------


async def test_unconsumed_command_without_owner_or_wakeup_is_woken(world: World) -> None:
    """Reconciliation: an unconsumed command older than ``reconcile_after`` whose session has
    no live lease and no wakeup gets a wakeup (``reconcile``) and a NOTIFY that a LISTENing
    connection receives. Younger, consumed, already-woken and owned ones are left alone."""
    leader = await world.control("leader")
    owner = await world.control("owner")
    sweeper = await world.sweeper(leader, renotify_after=60)
    for sid in ("lost", "young", "done", "woken", "owned", "expired"):
        await world.spec(sid, "unloaded")
    await world.command("lost", 1, age=1.5)
    await world.command("lost", 2, age=1.2)
    await world.command("young", 1, age=0.0)
    await world.command("done", 1, age=5.0, consumed=True)
    await world.command("woken", 1, age=5.0)
    await sql(f"INSERT INTO {world.t.wakeups} (session_id, reason) VALUES ('woken', 'create')")
    await world.command("owned", 1, age=1.5)
    await world.lease("owned", owner.key)
    await world.command("expired", 1, age=1.5)
    await world.lease("expired", owner.key, ttl=-1)
    wake = await world.listen(world.t.wake_channel)
    report = await sweeper.sweep_once()
    assert report.woken == ["expired", "lost"]
    assert await world.wakeups() == {
        "lost": ("reconcile", None),
        "expired": ("reconcile", None),
        "woken": ("create", None),
    }
    assert sorted(await drain(wake, 2)) == ["expired", "lost"]
    assert (await sweeper.sweep_once()).woken == []


async def test_live_owner_with_stale_commands_is_notified_again(world: World) -> None:
    """Reconciliation: a live lease whose session has unconsumed commands older than
    ``renotify_after`` gets its owner's channel notified again (``<sid>:<max cmd_seq>``),
    at most once per ``renotify_after``; fresh commands are not re-notified."""
    leader = await world.control("leader")
    owner = await world.control("owner")
    sweeper = await world.sweeper(leader, renotify_after=2.0)
    await world.spec("s", "running")
    await world.lease("s", owner.key)
    await world.command("s", 1, age=3.0)
    await world.command("s", 2, age=2.5)
    await world.command("s", 3, age=0.0)
    await world.spec("fresh", "running")
    await world.lease("fresh", owner.key)
    await world.command("fresh", 1, age=0.5)
    inbox = await world.listen(world.t.worker_channel(owner.key))
    report = await sweeper.sweep_once()
    assert report.renotified == ["s"] and report.woken == []
    assert await drain(inbox, 1) == ["s:2"]
    assert (await sweeper.sweep_once()).renotified == []
    world.clock.now += 2.0
    assert (await sweeper.sweep_once()).renotified == ["s"]
    assert await drain(inbox, 1) == ["s:2"]
    assert inbox.empty()
    assert await world.wakeups() == {}


async def test_non_leader_changes_nothing(world: World) -> None:
    """A sweeper that does not hold the leadership lock writes nothing, even with work due."""
    leader = await world.control("leader")
    follower = await world.control("follower")
    first = await world.sweeper(leader)
    assert (await first.sweep_once()).leader
    second = await world.sweeper(follower)
    await world.spec("s", "unloaded")
    await world.command("s", 1, age=5)
    report = await second.sweep_once()
    assert report == SweepReport(leader=False)
    assert await world.wakeups() == {}


def test_bad_options_are_refused() -> None:
    """Negative graces and a zero period are refused with a clear error."""
    with pytest.raises(ValueError, match="period"):
        Sweeper(None, Tables("x"), None, period=0)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="grace"):
        Sweeper(None, Tables("x"), None, grace=-1)  # type: ignore[arg-type]


async def test_a_takeover_releases_a_claimed_wakeup(world: World) -> None:
    """A revoked session whose wakeup a live worker had claimed (it could not take the dead
    worker's live lease) gets the wakeup back unclaimed, reason ``takeover``: that
    worker's clean-up of its own claim cannot drop the takeover."""
    leader = await world.control("leader")
    claimer = await world.control("claimer")
    sweeper = await world.sweeper(leader)
    dead_key = 991
    await world.spec("s", "running")
    await world.lease("s", dead_key)
    await sql(
        f"INSERT INTO {world.t.wakeups} (session_id, reason, claimed_by, claimed_at) "
        "VALUES ('s', 'command', $1, now())",
        claimer.key,
    )
    assert (await sweeper.sweep_once()).absent == [dead_key]
    world.clock.now += 1.0
    report = await sweeper.sweep_once()
    assert (report.revoked, report.woken) == (["s"], ["s"])
    assert await world.wakeups() == {"s": ("takeover", None)}


async def test_a_running_session_without_lease_or_wakeup_is_woken(world: World) -> None:
    """Orphans: a session whose status says running but whose lease was revoked or released
    at least ``reconcile_after`` ago (or that never had one) and that has no wakeup gets a
    ``takeover`` wakeup; a lease released just now (an unload in progress), a live lease
    and an idle session get none."""
    leader = await world.control("leader")
    sweeper = await world.sweeper(leader, reconcile_after=60.0)
    for sid, status in (
        ("lost", "running"),
        ("never", "running"),
        ("unloading", "running"),
        ("owned", "running"),
        ("idle", "idle"),
    ):
        await world.spec(sid, status)
    await sql(
        f"INSERT INTO {world.t.leases} (session_id, owner, lease_id, token, expires_at) "
        "VALUES ('lost', 'x', NULL, 3, now() - interval '2 min'), "
        "('unloading', 'x', NULL, 3, now()), ('idle', 'x', NULL, 3, now() - interval '9 min')"
    )
    await world.lease("owned", leader.key)
    wake = await world.listen(world.t.wake_channel)
    report = await sweeper.sweep_once()
    assert report.woken == ["lost", "never"]
    assert await world.wakeups() == {"lost": ("takeover", None), "never": ("takeover", None)}
    assert sorted(await drain(wake, 2)) == ["lost", "never"]
    assert (await sweeper.sweep_once()).woken == []


async def test_hostile_keys_in_stored_rows_do_not_break_a_sweep(world: World) -> None:
    """Keys no advisory lock can carry (negative, beyond 32 bits) in lease and wakeup rows
    are simply absent: after the grace the lease is revoked and the claim cleared; nothing
    else is touched and the sweep keeps working."""
    leader = await world.control("leader")
    sweeper = await world.sweeper(leader)
    huge, negative = 2**40 + 5, -7
    await world.spec("a", "running")
    await world.lease("a", huge)
    await world.spec("b", "new")
    await sql(
        f"INSERT INTO {world.t.wakeups} (session_id, reason, claimed_by, claimed_at) "
        "VALUES ('b', 'create', $1, now())",
        negative,
    )
    assert (await sweeper.sweep_once()).absent == [negative, huge]
    world.clock.now += 1.0
    report = await sweeper.sweep_once()
    assert (report.dead, report.revoked, report.unclaimed) == ([negative, huge], ["a"], ["b"])
    assert await world.leases() == {"a": (2, False)}
    assert await world.wakeups() == {"a": ("takeover", None), "b": ("create", None)}
    assert (await sweeper.sweep_once()).absent == []


# --- deaths as events (issue 25: takeover within a second) -------------------------------------


async def waiting_watches(name: str) -> int:
    """Watch connections of worker ``name`` waiting for a lock right now."""
    rows = await sql(
        "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1 "
        "AND wait_event_type = 'Lock'",
        f"steerloop-watch:{name}",
    )
    return int(rows[0][0])


async def test_a_watched_workers_death_is_swept_at_once_without_the_grace(world: World) -> None:
    """The running leader waits for each other worker's lock on a connection of its own:
    when that worker's connection ends, the watch gets the lock, gives it back, and the
    leader sweeps at once — the lease revoked and the takeover queued with the grace never
    elapsed on the leader's clock (and no periodic pass: the period is an hour)."""
    leader = await world.control("leader")
    victim = await world.control("victim")
    await world.spec("run", "running")
    await world.lease("run", victim.key)
    sweeper = await world.sweeper(leader, dsn=POSTGRES_URL, period=3600)
    sweeper.start()
    await poll(lambda: waiting_watches("leader"), until=lambda n: n == 1, timeout=10)
    assert sweeper.leader and sweeper.watches is not None
    assert sweeper.watches.watching == (victim.key,)
    await kill_backend(victim)
    leases = await poll(world.leases, until=lambda found: found["run"] == (2, False), timeout=10)
    assert leases == {"run": (2, False)}
    assert await world.wakeups() == {"run": ("takeover", None)}
    assert world.clock.now == 1000.0  # the grace (1 s on this clock) never passed
    assert await world.workers() == ["leader"]
    await poll(lambda: waiting_watches("leader"), until=lambda n: n == 0, timeout=10)


async def test_the_others_wait_for_the_leader_and_take_over_at_its_death(world: World) -> None:
    """A non-leading sweeper waits for the leadership lock: when the leader's connection
    ends it leads at once and revokes the dead leader's leases without a grace."""
    first = await world.control("first")
    second = await world.control("second")
    await world.spec("run", "running")
    await world.lease("run", first.key)
    one = await world.sweeper(first, dsn=POSTGRES_URL, period=3600)
    one.start()
    await poll(lambda: now(one.leader), until=bool, timeout=10)
    two = await world.sweeper(second, dsn=POSTGRES_URL, period=3600)
    two.start()
    await poll(lambda: waiting_watches("second"), until=lambda n: n == 1, timeout=10)
    assert not two.leader
    await kill_backend(first)
    await poll(lambda: now(two.leader), until=bool, timeout=10)
    await poll(world.leases, until=lambda found: found["run"] == (2, False), timeout=10)
    assert await world.wakeups() == {"run": ("takeover", None)}
    assert world.clock.now == 1000.0


async def test_a_hung_worker_is_deposed_and_its_leases_revoked(world: World) -> None:
    """A worker whose heartbeat stopped (its loop is stuck, its socket and lock live on) is
    deposed by the leader once the heartbeat is ``stale_after`` old: its control connection
    is ended (it learns it lost it), and its leases are revoked without a grace."""
    leader = await world.control("leader")
    hung = ControlConnection(
        POSTGRES_URL,
        world.schema,
        worker_id="hung",
        profiles={"default": 1},
        capacity=4,
        on_lost=lambda: world.lost.append("hung"),
        on_notify=lambda c, p: None,
        check_interval=3600,  # no heartbeat after its registration
    )
    world.controls.append(hung)
    await hung.start()
    await world.spec("run", "running")
    await world.lease("run", hung.key)
    sweeper = await world.sweeper(leader, stale_after=0.5)
    report = await sweep_until(sweeper, lambda r: r.hung == [hung.key], timeout=10)
    if report.dead != [hung.key]:  # its lock went after this sweep looked: the next one
        report = await sweep_until(sweeper, lambda r: r.dead == [hung.key], timeout=10)
    assert report.revoked == ["run"]
    await poll(lambda: now(hung.lost), until=bool, timeout=10)
    assert world.clock.now == 1000.0
    assert world.lost == ["hung"]
