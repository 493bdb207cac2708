"""The SSE feed served from the PostgreSQL log across processes (design/SERVICE.md "SSE
subscribe, reconnect and resume", "Back-pressure"): an ``--role api`` app (uvicorn on 127.0.0.1:0)
sees what a writer in another process commits, resumes by ``Last-Event-ID`` including live
frames of an open step, survives the loss of its LISTEN connection, and never buffers for a
slow reader. The writer is ``tests/service/_pg_writer.py`` (a Runtime on a notifying
PostgresStore with a LivePublisher), killed with SIGKILL in a finally."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import sys
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest
from httpx_sse import aconnect_sse

from steerloop.service import create_app
from steerloop.service._pg._feed import open_pg_feed
from steerloop.service._sse import PAGE as _PAGE
from steerloop.service._sse import feed as _feed
from steerloop.session.store.postgres import PostgresStore
from tests.session.backends import POSTGRES_URL, require_postgres

from .profiles import profiles
from .served import WAIT, served

pytestmark = pytest.mark.timeout(120)

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
async def pg() -> AsyncIterator[tuple[str, str]]:
    """``(url, schema)`` of a schema of its own, dropped afterwards."""
    require_postgres()
    schema = f"steerloop_feed_{uuid.uuid4().hex[:12]}"
    yield f"{POSTGRES_URL}?schema={schema}", schema
    conn = await asyncpg.connect(POSTGRES_URL, timeout=5)
    try:
        await conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
    finally:
        await conn.close()


class Writer:
    """The writer process (``_pg_writer``), one command at a time."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc

    async def do(self, command: str) -> list[int]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(f"{command}\n".encode())
        await self.proc.stdin.drain()
        line = (await asyncio.wait_for(self.proc.stdout.readline(), WAIT)).decode().strip()
        assert line.startswith("ok"), f"writer answered {line!r} to {command!r}"
        return [int(part) for part in line.split()[1:]]


@contextlib.asynccontextmanager
async def writer(url: str, session_id: str) -> AsyncIterator[Writer]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT / "src"), str(ROOT)]))
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "tests.service._pg_writer",
        url,
        session_id,
        cwd=ROOT,
        env=env,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
    )
    try:
        yield Writer(proc)
    finally:
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signal.SIGKILL)
        await proc.wait()


class Collector:
    """An SSE reader running in a task: every event in arrival order."""

    def __init__(self, client: httpx.AsyncClient, path: str, last_id: str | None = None):
        self.events: list[Any] = []
        self.changed = asyncio.Event()
        headers = {} if last_id is None else {"Last-Event-ID": last_id}
        self.task = asyncio.create_task(self._run(client, path, headers))

    async def _run(self, client: httpx.AsyncClient, path: str, headers: dict[str, str]) -> None:
        async with aconnect_sse(client, "GET", path, headers=headers) as source:
            async for event in source.aiter_sse():
                self.events.append(event)
                self.changed.set()

    async def until(self, done: Callable[[list[Any]], bool], timeout: float = WAIT) -> list[Any]:
        async with asyncio.timeout(timeout):
            while not done(self.events):
                if self.task.done():
                    self.task.result()
                    raise AssertionError(f"the feed ended early: {self.events}")
                self.changed.clear()
                await self.changed.wait()
        return list(self.events)

    async def stop(self) -> None:
        self.task.cancel()  # the test's own reader task
        with contextlib.suppress(asyncio.CancelledError, httpx.HTTPError):
            await self.task


def ids(events: list[Any]) -> list[str]:
    return [e.id for e in events]


def has_id(wanted: str) -> Callable[[list[Any]], bool]:
    return lambda events: any(e.id == wanted for e in events)


async def stored(url: str, session_id: str) -> list[dict[str, Any]]:
    store = PostgresStore(url)
    try:
        return list(await store.load_after(session_id, 0, 10_000))
    finally:
        await store.close()


async def test_a_reader_sees_another_processes_commits_in_order(pg: tuple[str, str]) -> None:
    """A reader of an app that runs no agent of the session sees every event a writer in
    another process commits (one notify per batch): in seq order, contiguous from 1, no
    duplicate, each exactly as stored."""
    url, _ = pg
    app = create_app(url, profiles, role="api", worker_id="r1")
    async with writer(url, "w") as w, served(app) as client:
        await w.do("create")
        (first,) = await w.do("turn zero")
        reader = Collector(client, "/v1/sessions/w/events")
        try:
            await reader.until(has_id(str(first)))
            last = 0
            for text in ("one", "two", "three"):
                (last,) = await w.do(f"turn {text}")
            seen = await reader.until(has_id(str(last)))
        finally:
            await reader.stop()
        assert ids(seen) == [str(seq) for seq in range(1, last + 1)]
        assert [e.retry for e in seen[:2]] == [2000, None]  # reconnect after 2 s
        log = await stored(url, "w")
        assert [e.event for e in seen] == [e["type"] for e in log]
        assert [httpx.Response(200, content=e.data).json() for e in seen] == log
        assert [e["type"] for e in log].count("turn/end") == 4


async def test_last_event_id_resumes_durable_and_mid_step_live_frames(
    pg: tuple[str, str],
) -> None:
    """``id`` is the seq of a durable event and ``seq:n`` of a live frame of the open step;
    ``Last-Event-ID: A:2`` resumes with frame A:3, ``2`` with seq 3; once the step ends
    the committed events follow the frames and the step's live rows are deleted."""
    url, schema = pg
    app = create_app(url, profiles, role="api", worker_id="r2")
    async with writer(url, "w") as w, served(app) as client:
        await w.do("create")
        await w.do("turn one")
        after, n = await w.do("stream")
        assert n == 5
        frames = [f"{after}:{k}" for k in range(1, 6)]
        whole = Collector(client, "/v1/sessions/w/events")
        mid = Collector(client, "/v1/sessions/w/events", last_id=f"{after}:2")
        early = Collector(client, "/v1/sessions/w/events", last_id="2")
        try:
            seen = await whole.until(has_id(frames[-1]))
            assert ids(seen) == [str(s) for s in range(1, after + 1)] + frames
            bodies = [httpx.Response(200, content=e.data).json() for e in seen[after:]]
            assert [e.event for e in seen[after:]] == ["stream"] * 5
            assert [b["kind"] for b in bodies] == ["start"] + ["chunk"] * 4
            assert [b["chunk"]["kind"] for b in bodies[1:]] == [
                "block-start",
                "text-delta",
                "text-delta",
                "text-delta",
            ]
            assert [b["chunk"]["text"] for b in bodies[2:]] == ["a", "b", "c"]
            assert ids(await mid.until(has_id(frames[-1]))) == frames[2:]
            assert (
                ids(await early.until(has_id(frames[-1])))
                == [str(s) for s in range(3, after + 1)] + frames
            )
            (end,) = await w.do("cancel")
            tail = Collector(client, "/v1/sessions/w/events", last_id=frames[-1])
            try:
                assert ids(await tail.until(has_id(str(end)))) == [
                    str(s) for s in range(after + 1, end + 1)
                ]
            finally:
                await tail.stop()
            assert ids(await whole.until(has_id(str(end))))[after + 5 :] == [
                str(s) for s in range(after + 1, end + 1)
            ]
        finally:
            for reader in (whole, mid, early):
                await reader.stop()
        conn = await asyncpg.connect(POSTGRES_URL, timeout=5)
        try:
            async with asyncio.timeout(WAIT):
                while await conn.fetchval(f'SELECT count(*) FROM "{schema}".steerloop_live'):
                    await asyncio.sleep(0.05)
        finally:
            await conn.close()


async def listener_pid(conn: Any, name: str) -> int | None:
    pid = await conn.fetchval(
        "SELECT pid FROM pg_stat_activity WHERE application_name = $1", f"steerloop-feed:{name}"
    )
    return None if pid is None else int(pid)


async def test_readers_miss_nothing_when_the_listen_connection_dies(pg: tuple[str, str]) -> None:
    """The hub's LISTEN connection is terminated by the server (``pg_terminate_backend``)
    while the writer commits: the hub reconnects (a new backend) and wakes every reader,
    which re-reads by cursor and gets every event, well before the 15 s re-read a ping
    would cause."""
    url, _ = pg
    conn = await asyncpg.connect(POSTGRES_URL, timeout=5)
    try:
        async with (
            writer(url, "w") as w,
            served(create_app(url, profiles, role="api", worker_id="r3")) as client,
        ):
            await w.do("create")
            (first,) = await w.do("turn zero")
            readers = [Collector(client, "/v1/sessions/w/events") for _ in range(3)]
            try:
                for reader in readers:
                    await reader.until(has_id(str(first)))
                old = await listener_pid(conn, "r3")
                assert old is not None
                assert await conn.fetchval("SELECT pg_terminate_backend($1)", old)
                last = 0
                for text in ("one", "two"):
                    (last,) = await w.do(f"turn {text}")
                for reader in readers:
                    seen = await reader.until(has_id(str(last)), timeout=10)
                    assert ids(seen) == [str(seq) for seq in range(1, last + 1)]
                new = await listener_pid(conn, "r3")
                assert new is not None and new != old
                (more,) = await w.do("turn three")  # the new connection delivers too
                for reader in readers:
                    await reader.until(has_id(str(more)), timeout=10)
            finally:
                for reader in readers:
                    await reader.stop()
    finally:
        await conn.close()


async def plant(url: str, session_id: str, count: int, pad: int) -> None:
    """A stored log of ``count`` events of ``pad`` bytes each (stored as is)."""
    store = PostgresStore(url)
    try:
        lines = [
            {"seq": s, "time": 1, "type": "turn/start", "data": {"turn": s, "pad": "x" * pad}}
            for s in range(1, count + 1)
        ]
        await store.put_raw(session_id, lines)
    finally:
        await store.close()


async def test_the_feed_holds_at_most_one_page_for_a_slow_reader(pg: tuple[str, str]) -> None:
    """Back-pressure at the generator: a reader that takes events slowly is paced by its own
    cursor; the feed has read at most one page (500 events) beyond what it handed out,
    whatever the log's length; closing the feed releases its subscription."""
    url, _ = pg
    await plant(url, "big", 3000, 10)
    store = PostgresStore(url)
    feed = await open_pg_feed(store, None, name="gen")
    try:
        read: list[int] = []
        source = feed.source
        original = source.events_after

        async def counting(session_id: str, after: int, limit: int) -> list[dict[str, Any]]:
            page = await original(session_id, after, limit)
            read.append(len(page))
            return page

        source.events_after = counting  # type: ignore[method-assign]
        gen = _feed(source, "big", 0, 0)
        taken = [await anext(gen) for _ in range(10)]
        assert [t["id"] for t in taken if isinstance(t, dict)] == [str(s) for s in range(1, 11)]
        assert sum(read) == _PAGE
        assert feed.hub.readers() == 1
        for _ in range(_PAGE):
            await anext(gen)
        assert sum(read) == 2 * _PAGE  # exactly one page ahead of the reader
        await gen.aclose()
        assert feed.hub.readers() == 0
    finally:
        await feed.close()
        await store.close()


async def test_a_stalled_client_is_dropped_after_send_timeout(pg: tuple[str, str]) -> None:
    """A client that stops reading (its socket buffers fill) is dropped once a send waits
    ``send_timeout``: the server closes the connection instead of buffering the log for
    it; the client would resume by ``Last-Event-ID``."""
    url, _ = pg
    await plant(url, "big", 3000, 4000)  # ~12 MB: more than every socket buffer holds
    app = create_app(url, profiles, role="api", worker_id="r5", send_timeout=0.5)
    async with served(app) as client:
        port = client.base_url.port
        assert port is not None
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.setblocking(False)
        loop = asyncio.get_running_loop()
        try:
            await loop.sock_connect(sock, ("127.0.0.1", port))
            await loop.sock_sendall(
                sock, b"GET /v1/sessions/big/events HTTP/1.1\r\nHost: x\r\n\r\n"
            )
            await asyncio.sleep(2.0)  # the stall: longer than send_timeout
            received = 0
            async with asyncio.timeout(WAIT):
                while chunk := await loop.sock_recv(sock, 1 << 16):
                    received += len(chunk)
            assert 0 < received < 3000 * 4000  # cut off: the log was not all sent
        finally:
            sock.close()
        # The server still serves others.
        assert (await client.get("/healthz")).json()["ok"] is True


async def test_the_hub_wakes_only_named_sessions_and_everyone_on_garbage(
    pg: tuple[str, str],
) -> None:
    """Hostile NOTIFY payloads: a payload naming another session wakes nobody here; one
    naming this session (durable or live item) wakes its readers; one that names nothing
    parseable wakes every reader (a re-read by cursor is harmless); the hub keeps going."""
    url, _ = pg
    store = PostgresStore(url)
    feed = await open_pg_feed(store, None, name="hostile")
    conn = await asyncpg.connect(POSTGRES_URL, timeout=5)
    try:
        flag = feed.hub.subscribe("s:1")
        other = feed.hub.subscribe("t")

        async def notify(payload: str) -> None:
            before = feed.hub.notifications
            await conn.execute("SELECT pg_notify($1, $2)", feed.hub.channel, payload)
            async with asyncio.timeout(WAIT):
                while feed.hub.notifications == before:
                    await asyncio.sleep(0.01)

        await notify("u:4")
        assert (flag.version, other.version) == (0, 0)
        await notify("s%3A1:7")
        assert (flag.version, other.version) == (1, 0)
        await notify("s%3A1:7:3,t:2")
        assert (flag.version, other.version) == (2, 1)
        await notify("\x01garbage,,:")
        assert (flag.version, other.version) == (3, 2)
        feed.hub.unsubscribe("s:1", flag)
        feed.hub.unsubscribe("t", other)
        assert feed.hub.readers() == 0
    finally:
        await conn.close()
        await feed.close()
        await store.close()


async def test_live_frames_of_an_old_lease_token_are_never_served(pg: tuple[str, str]) -> None:
    """Live rows carry the lease token of the worker that streamed them: after a takeover
    (token + 1) a reader gets only the new owner's frames; a malformed frame row is
    skipped; the publisher's sweep deletes rows whose token holds no lease."""
    url, schema = pg
    store = PostgresStore(url)
    feed = await open_pg_feed(store, None, name="tokens")
    conn = await asyncpg.connect(POSTGRES_URL, timeout=5)
    q = f'"{schema}"'
    try:
        writer_ = await store.open_writer("s")
        writer_.publish()
        await writer_.flush()
        token = await conn.fetchval(f"SELECT token FROM {q}.steerloop_leases")
        rows = [
            ("s", 0, 1, token - 1, '{"kind": "old"}'),
            ("s", 0, 2, token, '{"kind": "start"}'),
            ("s", 0, 3, token, '"not an object"'),
            ("s", 0, 4, token, '{"kind": "chunk"}'),
            ("t", 0, 1, 7, '{"kind": "orphan"}'),
        ]
        await conn.executemany(f"INSERT INTO {q}.steerloop_live VALUES ($1, $2, $3, $4, $5)", rows)
        reader = feed.source.subscribe("s")
        assert await reader.frames_after(0, 0) == [(2, {"kind": "start"}), (4, {"kind": "chunk"})]
        assert await reader.frames_after(0, 0) == []  # nothing announced since: no query
        reader.close()
        assert await feed.source.frames_after("s", 0, 2) == [(4, {"kind": "chunk"})]
        await writer_.close()  # the lease is released: every row of "s" is now stale
        from steerloop.service._pg._live import LivePublisher
        from steerloop.service._pg._schema import ServiceTables

        tables = ServiceTables(store.schema)
        sweeper = LivePublisher(feed.pool, tables, None, stale_every=0.0)
        await sweeper._flush(sweep=True)
        assert await conn.fetchval(f"SELECT count(*) FROM {q}.steerloop_live") == 0
    finally:
        await conn.close()
        await feed.close()
        await store.close()


async def test_a_reader_queries_live_frames_only_where_they_were_announced(
    pg: tuple[str, str],
) -> None:
    """A reader's first look at a cursor queries ``steerloop_live``; afterwards a cursor
    past every announced ``after_seq`` is answered without a query (frames are always
    announced in the transaction that inserts them); an announcement ``sid:after:n`` makes
    the reader look again."""
    url, schema = pg
    store = PostgresStore(url)
    feed = await open_pg_feed(store, None, name="announced")
    conn = await asyncpg.connect(POSTGRES_URL, timeout=5)
    q = f'"{schema}"'
    try:
        w = await store.open_writer("s")
        w.publish()
        await w.flush()
        token = await conn.fetchval(f"SELECT token FROM {q}.steerloop_leases")
        insert = f"INSERT INTO {q}.steerloop_live VALUES ('s', $1, $2, $3, $4)"
        await conn.execute(insert, 3, 1, token, '{"k": 1}')
        queries: list[int] = []
        original = feed.source.frames_after

        async def counting(session_id: str, seq: int, n: int) -> list[tuple[int, Any]]:
            queries.append(seq)
            return await original(session_id, seq, n)

        feed.source.frames_after = counting  # type: ignore[method-assign]
        reader = feed.source.subscribe("s")
        assert await reader.frames_after(3, 0) == [(1, {"k": 1})]
        await conn.execute(insert, 4, 1, token, '{"k": 2}')  # not announced (yet)
        assert await reader.frames_after(4, 0) == []
        assert queries == [3]
        before = feed.hub.notifications
        await conn.execute("SELECT pg_notify($1, 's:4:1')", feed.hub.channel)
        async with asyncio.timeout(WAIT):
            while feed.hub.notifications == before:
                await asyncio.sleep(0.01)
        assert await reader.frames_after(4, 0) == [(1, {"k": 2})]
        assert queries == [3, 4]
        reader.close()
        await w.close()
    finally:
        await conn.close()
        await feed.close()
        await store.close()


async def test_end_to_end_through_an_api_process_and_a_worker_process(tmp_path: Path) -> None:
    """``--role api`` in this process and ``steerloop serve --role worker`` in another: a
    session created and sent to through the API node runs on the worker; an SSE reader of
    the API node sees every committed event in order, contiguous, no duplicate, exactly as
    stored; live frames (if the reader caught any) sit after the durable event they follow;
    a reader resuming with ``Last-Event-ID`` gets exactly the rest."""
    from . import pgprofiles
    from .pgworkers import pg_schema, workers

    async with (
        pg_schema() as pg,
        workers(tmp_path, pg.url, 1),
        served(create_app(pg.url, pgprofiles.profiles, role="api", worker_id="e2e")) as client,
    ):
        created = await client.post("/v1/sessions", json={"session_id": "e", "input": "hello"})
        assert created.status_code == 201, created.text
        reader = Collector(client, "/v1/sessions/e/events")
        try:

            def turn_ends(count: int) -> Callable[[list[Any]], bool]:
                return lambda events: [e.event for e in events].count("turn/end") == count

            await reader.until(turn_ends(1), timeout=30)
            sent = await client.post(
                "/v1/sessions/e/messages", json={"mode": "followup", "content": "again"}
            )
            assert sent.status_code == 202, sent.text
            seen = await reader.until(turn_ends(2), timeout=30)
        finally:
            await reader.stop()
        durable = [e for e in seen if e.event != "stream"]
        assert ids(durable) == [str(s) for s in range(1, len(durable) + 1)]
        log = await stored(pg.url, "e")
        assert [httpx.Response(200, content=e.data).json() for e in durable] == log[: len(durable)]
        last = "0"
        for event in seen:
            if event.event == "stream":
                assert event.id.split(":")[0] == last  # a frame of the step after `last`
            else:
                last = event.id
        middle = len(durable) // 2
        rest = Collector(client, "/v1/sessions/e/events", last_id=str(middle))
        try:
            resumed = await rest.until(has_id(durable[-1].id), timeout=30)
        finally:
            await rest.stop()
        assert ids([e for e in resumed if e.event != "stream"]) == ids(durable[middle:])
