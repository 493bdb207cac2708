"""The worker's control connection (design/SERVICE.md §3.3) against the local PostgreSQL:
the advisory lock is the worker's liveness, its loss is reported once, NOTIFYs arrive."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import asyncpg
import pytest

from steerloop.service._pg._control import ControlConnection, namespace
from steerloop.service._pg._schema import ServiceTables as Tables

from .livesupport import POSTGRES_URL, fresh_schema, now, poll, sql


@pytest.fixture
async def schema() -> AsyncIterator[str]:
    async for name in fresh_schema():
        yield name


class Probe:
    """Records ``on_lost`` and ``on_notify`` calls of one control connection."""

    def __init__(self) -> None:
        self.lost = 0
        self.notes: list[tuple[str, str]] = []

    def on_lost(self) -> None:
        self.lost += 1

    def on_notify(self, channel: str, payload: str) -> None:
        self.notes.append((channel, payload))


Factory = Callable[..., tuple[ControlConnection, Probe]]


@pytest.fixture
async def controls(schema: str) -> AsyncIterator[Factory]:
    made: list[ControlConnection] = []

    def make(worker_id: str = "w1", **options: Any) -> tuple[ControlConnection, Probe]:
        probe = Probe()
        control = ControlConnection(
            POSTGRES_URL,
            schema,
            worker_id=worker_id,
            profiles={"default": 1},
            capacity=8,
            on_lost=probe.on_lost,
            on_notify=probe.on_notify,
            **options,
        )
        made.append(control)
        return control, probe

    yield make
    for control in made:
        await control.close()


async def held_locks(schema: str) -> list[tuple[int, int]]:
    """``(key, pid)`` of every granted worker lock of the schema's namespace."""
    rows = await sql(
        "SELECT objid::bigint AS key, pid FROM pg_locks WHERE locktype = 'advisory' "
        "AND granted AND objsubid = 2 AND classid = $1::bigint::oid",
        namespace(schema),
    )
    return [(row["key"], row["pid"]) for row in rows]


async def worker_rows(schema: str) -> list[Any]:
    return await sql(f"SELECT key, worker_id, profiles, capacity FROM {Tables(schema).workers}")


async def test_start_registers_a_row_and_holds_the_lock(schema: str, controls: Factory) -> None:
    """The worker row carries a fresh key whose advisory lock the control backend holds,
    under ``application_name='steerloop-ctl:<id>'``; a second worker gets another key."""
    control, _ = controls("w1")
    await control.start()
    assert 0 < control.key < 2**31
    assert control.channel == Tables(schema).worker_channel(control.key)
    assert await held_locks(schema) == [(control.key, control.backend_pid)]
    rows = await worker_rows(schema)
    assert [(r["key"], r["worker_id"], r["profiles"], r["capacity"]) for r in rows] == [
        (control.key, "w1", '{"default": 1}', 8)
    ]
    names = await sql(
        "SELECT pid FROM pg_stat_activity WHERE application_name = 'steerloop-ctl:w1'"
    )
    assert [r["pid"] for r in names] == [control.backend_pid]
    other, _ = controls("w2")
    await other.start()
    assert other.key != control.key
    assert sorted(await held_locks(schema)) == sorted(
        [(control.key, control.backend_pid), (other.key, other.backend_pid)]
    )


async def test_namespaces_of_two_schemas_differ() -> None:
    """Two deployments in one database never read each other's worker locks."""
    assert namespace("a") != namespace("b")
    assert 0 <= namespace("a") < 2**31
    assert namespace("a") == namespace("a")


async def test_terminated_backend_reports_the_loss_once(schema: str, controls: Factory) -> None:
    """``pg_terminate_backend`` on the backend named ``steerloop-ctl:<id>`` → ``on_lost``
    once, the lock is gone, the connection refuses queries; ``close`` does not call it
    again and leaves the row for the sweeper."""
    control, probe = controls("victim")
    await control.start()
    killed = await sql(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
        "WHERE application_name = 'steerloop-ctl:victim'"
    )
    assert [r[0] for r in killed] == [True]
    await poll(lambda: now(probe.lost), until=lambda n: n >= 1, timeout=5)
    assert control.lost
    await poll(lambda: held_locks(schema), until=lambda locks: locks == [], timeout=5)
    with pytest.raises(ConnectionError):
        await control.fetchval("SELECT 1")
    await control.close()
    assert probe.lost == 1
    assert [r["worker_id"] for r in await worker_rows(schema)] == ["victim"]


async def test_unresponsive_connection_is_lost_by_the_periodic_check(
    schema: str, controls: Factory
) -> None:
    """A connection whose liveness check does not answer within ``check_timeout`` counts as
    lost (the half-dead socket case): here the check's row is locked by another
    transaction, so the check cannot finish in time."""
    control, probe = controls("slow", check_interval=0.05, check_timeout=0.3)
    await control.start()
    blocker = await asyncpg.connect(POSTGRES_URL, timeout=5)
    try:
        async with blocker.transaction():
            await blocker.execute(
                f"SELECT 1 FROM {Tables(schema).workers} WHERE key = $1 FOR UPDATE", control.key
            )
            await poll(lambda: now(probe.lost), until=lambda n: n == 1, timeout=5)
        assert control.lost
        await poll(lambda: held_locks(schema), until=lambda locks: locks == [], timeout=5)
    finally:
        await blocker.close()
    assert probe.lost == 1


async def test_deleted_worker_row_is_a_loss(schema: str, controls: Factory) -> None:
    """The check also notices that the worker row was deleted (an operator removed the
    worker): the registration is void, so the worker must self-fence."""
    control, probe = controls("w1", check_interval=0.05)
    await control.start()
    await sql(f"DELETE FROM {Tables(schema).workers} WHERE key = $1", control.key)
    await poll(lambda: now(probe.lost), until=lambda n: n == 1, timeout=5)
    assert control.lost
    await poll(lambda: held_locks(schema), until=lambda locks: locks == [], timeout=5)


def test_channel_names_are_per_schema() -> None:
    """NOTIFY channels belong to the database, so each schema (a tenant) has its own; the
    default schema keeps the plain names; every name fits PostgreSQL's 63-byte limit."""
    default = Tables("steerloop")
    assert (default.feed_channel, default.wake_channel, default.worker_channel(7)) == (
        "steerloop_feed",
        "steerloop_wake",
        "steerloop_w_7",
    )
    a, b = Tables("tenant_a"), Tables("x" * 63)
    names = {t.feed_channel for t in (default, a, b)} | {t.wake_channel for t in (default, a, b)}
    assert len(names) == 6
    assert all(len(t.worker_channel(2**31 - 1)) <= 63 for t in (default, a, b))
    assert all(len(n) <= 63 for n in names)


async def test_notify_on_worker_and_wake_channels_reaches_on_notify(
    schema: str, controls: Factory
) -> None:
    """A NOTIFY on ``steerloop_w_<key>`` and on ``steerloop_wake`` reaches ``on_notify`` with
    its channel and payload; another worker's channel does not."""
    control, probe = controls("w1")
    await control.start()
    t = Tables(schema)
    other = Tables(schema + "_other")
    await sql("SELECT pg_notify($1, 's1:7')", t.worker_channel(control.key))
    await sql("SELECT pg_notify($1, 'other')", t.worker_channel(control.key + 1))
    # Another schema (another tenant) on the same database: its channels are its own.
    await sql("SELECT pg_notify($1, 'x1')", other.worker_channel(control.key))
    await sql("SELECT pg_notify($1, 'x2')", other.wake_channel)
    await sql("SELECT pg_notify($1, 's2')", t.wake_channel)
    await poll(lambda: now(list(probe.notes)), until=lambda n: len(n) >= 2, timeout=5)
    assert probe.notes == [(control.channel, "s1:7"), (t.wake_channel, "s2")]
    assert probe.lost == 0


async def test_a_failing_on_notify_keeps_the_connection(schema: str, controls: Factory) -> None:
    """An exception from ``on_notify`` is logged and dropped: later notifications still
    arrive and the worker is not lost."""
    seen: list[str] = []

    def explode(channel: str, payload: str) -> None:
        seen.append(payload)
        if payload == "bad":
            raise RuntimeError("boom")

    control, probe = controls("w1")
    control._on_notify = explode
    await control.start()
    await sql("SELECT pg_notify($1, 'bad')", control.channel)
    await sql("SELECT pg_notify($1, 'good')", control.channel)
    await poll(lambda: now(list(seen)), until=lambda n: len(n) == 2, timeout=5)
    assert seen == ["bad", "good"]
    assert await control.fetchval("SELECT 1") == 1
    assert probe.lost == 0


async def test_close_removes_the_row_and_the_lock(schema: str, controls: Factory) -> None:
    """``close`` deletes the worker row and unlocks, without calling ``on_lost``; it is
    idempotent."""
    control, probe = controls("w1")
    await control.start()
    await control.close()
    assert await worker_rows(schema) == []
    assert await held_locks(schema) == []
    await control.close()
    assert probe.lost == 0 and not control.lost


async def test_worker_id_of_a_live_registration_is_refused(schema: str, controls: Factory) -> None:
    """A second live registration under one worker id is refused with a clear error and
    leaves nothing behind; after the first is lost, the id registers again (a new key)."""
    first, _ = controls("same")
    await first.start()
    second, _ = controls("same")
    with pytest.raises(ValueError, match="registered by a live control connection"):
        await second.start()
    assert await held_locks(schema) == [(first.key, first.backend_pid)]
    await sql("SELECT pg_terminate_backend($1)", first.backend_pid)
    await poll(lambda: held_locks(schema), until=lambda locks: locks == [], timeout=5)
    again, _ = controls("same")
    await again.start()
    assert again.key != first.key
    assert [(r["key"], r["worker_id"]) for r in await worker_rows(schema)] == [(again.key, "same")]


async def test_unreachable_server_leaves_nothing(schema: str) -> None:
    """A start that cannot connect raises and holds nothing."""
    control = ControlConnection(
        "postgresql://postgres@127.0.0.1:1/test",
        schema,
        worker_id="w1",
        profiles={},
        capacity=1,
        on_lost=lambda: None,
        on_notify=lambda c, p: None,
        connect_timeout=2,
    )
    with pytest.raises(OSError):
        await control.start()
    with pytest.raises(ConnectionError):
        await control.fetchval("SELECT 1")
    await control.close()


async def test_keepalive_and_user_timeout_bound_a_half_open_connection(
    schema: str, controls: Factory
) -> None:
    """Both ends of the control connection bound a half-open socket: client-side
    SO_KEEPALIVE, TCP_KEEPIDLE/INTVL/CNT and TCP_USER_TIMEOUT (Linux), server-side
    ``tcp_keepalives_*`` and ``tcp_user_timeout`` for the session."""
    import socket

    control, _ = controls("w1", check_timeout=2.0)
    await control.start()
    sock = control._conn._transport.get_extra_info("socket")
    assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) == 1
    assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE) == 5
    assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL) == 2
    assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT) == 3
    assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT) == 4000
    assert await control.fetchval("SHOW tcp_keepalives_idle") == "5"
    assert await control.fetchval("SHOW tcp_keepalives_interval") == "2"
    assert await control.fetchval("SHOW tcp_keepalives_count") == "3"
    assert await control.fetchval("SHOW tcp_user_timeout") == "11000"  # ms


class FreezableProxy:
    """A TCP proxy to the test server that can stop forwarding while keeping both sockets
    open: from the client's side, a half-dead connection (a partition, a stalled peer)."""

    def __init__(self) -> None:
        self.frozen = asyncio.Event()
        self.server: asyncio.Server | None = None
        self.writers: list[asyncio.StreamWriter] = []
        self.port = 0

    async def start(self) -> str:
        """Listen on a free loopback port; returns the test server's URL through it."""
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self.server.sockets[0].getsockname()[1]
        parts = urlsplit(POSTGRES_URL)
        user = parts.netloc.rpartition("@")[0]
        netloc = f"{user}@127.0.0.1:{self.port}" if user else f"127.0.0.1:{self.port}"
        return urlunsplit(parts._replace(netloc=netloc))

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        parts = urlsplit(POSTGRES_URL)
        up_reader, up_writer = await asyncio.open_connection(
            parts.hostname or "127.0.0.1", parts.port or 5432
        )
        self.writers += [writer, up_writer]
        await asyncio.gather(
            self._pump(reader, up_writer), self._pump(up_reader, writer), return_exceptions=True
        )

    async def _pump(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while not self.frozen.is_set():
            data = await reader.read(65536)
            if not data or self.frozen.is_set():
                break
            writer.write(data)
            await writer.drain()
        if not self.frozen.is_set():
            writer.close()

    async def close(self) -> None:
        for writer in self.writers:
            writer.close()
        if self.server is not None:
            self.server.close()
            await self.server.wait_closed()


async def test_a_half_dead_socket_is_noticed_by_the_periodic_check(schema: str) -> None:
    """Nothing closes the socket (the proxy stops forwarding and keeps it open, as a
    partition does), so no termination event comes; the periodic check does not answer
    within ``check_timeout`` and ``on_lost`` is called once."""
    proxy = FreezableProxy()
    dsn = await proxy.start()
    probe = Probe()
    control = ControlConnection(
        dsn,
        schema,
        worker_id="behind-proxy",
        profiles={},
        capacity=1,
        on_lost=probe.on_lost,
        on_notify=probe.on_notify,
        check_interval=0.05,
        check_timeout=0.5,
    )
    try:
        await control.start()
        assert await control.fetchval("SELECT 1") == 1
        proxy.frozen.set()
        await poll(lambda: now(probe.lost), until=lambda n: n == 1, timeout=10)
        assert control.lost
        # The server never learnt: its backend (and the lock) live on until the server's own
        # keepalive or tcp_user_timeout gives up on a real partition, or the lease TTL runs out.
        assert [key for key, _ in await held_locks(schema)] == [control.key]
    finally:
        await control.close()
        await proxy.close()
    await poll(lambda: held_locks(schema), until=lambda locks: locks == [], timeout=10)
    assert probe.lost == 1
