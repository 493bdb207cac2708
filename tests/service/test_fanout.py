"""Shared feeds (issue 25): one read of a session's feed per process, fanned out to all its
readers (``service/_fanout.py``).

* Against an in-memory source: N readers cost one read per change, not N; a reader that
  stops pulling holds nothing beyond the window and catches up from the source itself.
* On PostgreSQL (an API app's feed, a writer in another process): many readers of one
  session make a number of database reads bounded by the notifications, not the readers.
* Through uvicorn (``--role all`` on SQLite, the in-process host): a reader whose socket is
  full is dropped after ``send_timeout`` while the others receive everything; on
  PostgreSQL many SSE readers of one session each see the whole log exactly.
"""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path
from typing import Any

import httpx
import pytest
from httpx_sse import aconnect_sse
from sse_starlette.event import ServerSentEvent

from steerloop.service import create_app
from steerloop.service._fanout import SharedFeeds, event_json, event_sse
from steerloop.service._limits import Limits
from steerloop.service._pg._feed import open_pg_feed
from steerloop.service._source import Wakeup
from steerloop.service._sse import feed as _feed
from steerloop.session.store.postgres import PostgresStore

from .profiles import profiles
from .served import WAIT, served
from .test_pg_feed import pg, writer  # noqa: F401  (the fixture)

pytestmark = pytest.mark.timeout(180)

ROOMY = Limits(max_streams_per_session=64)
"""Room for more readers of one session than the edge's default 16."""


class MemorySource:
    """A ``FeedSource`` over a list: ``append`` adds events and wakes; reads are counted."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        self.flag = Wakeup()
        self.reads = 0
        self.subscriptions = 0
        self.closed = False

    def append(self, count: int) -> None:
        for _ in range(count):
            seq = len(self.events) + 1
            self.events.append({"seq": seq, "time": 1, "type": "turn/start", "data": {}})
        self.flag.bump()

    def subscribe(self, session_id: str) -> Any:
        self.subscriptions += 1
        return _MemoryReader(self)


class _MemoryReader:
    def __init__(self, source: MemorySource) -> None:
        self.source = source
        self.open = True

    @property
    def version(self) -> int:
        return self.source.flag.version

    async def wait(self, seen: int, timeout: float) -> None:
        await self.source.flag.wait(seen, timeout)

    async def events_after(self, after: int, limit: int) -> list[dict[str, Any]]:
        self.source.reads += 1
        await asyncio.sleep(0)  # a read suspends, as a database's does
        return [dict(e) for e in self.source.events[after : after + limit]]

    async def frames_after(self, seq: int, n: int) -> list[tuple[int, dict[str, Any]]]:
        return []

    def close(self) -> None:
        self.source.subscriptions -= 1
        self.open = False


async def take(gen: Any, until: int, got: list[int]) -> None:
    """Pull SSE items off ``gen`` until the event ``until`` (ids into ``got``)."""
    async for item in gen:
        data = item if isinstance(item, bytes) else ServerSentEvent(**item, sep="\n").encode()
        seq = int(data.split(b"\n", 1)[0].removeprefix(b"id: "))
        got.append(seq)
        if seq >= until:
            return


async def test_many_readers_cost_one_read_per_change() -> None:
    """Forty readers following one session: each gets every event once, in order, and the
    source is read about once per change (not forty times); the readers share the events'
    encodings; when they leave, the source subscription goes too."""
    source = MemorySource()
    shared = SharedFeeds(source)
    source.append(3)
    gens = [_feed(shared, "s", 0, 0) for _ in range(40)]
    got: list[list[int]] = [[] for _ in gens]
    tasks = [asyncio.create_task(take(g, 23, got[i])) for i, g in enumerate(gens)]
    for _ in range(10):
        await asyncio.sleep(0.01)
        source.append(2)
    async with asyncio.timeout(WAIT):
        await asyncio.gather(*tasks)
    assert all(g == list(range(1, 24)) for g in got)
    assert source.subscriptions == 1 and shared.readers("s") == 40
    assert source.reads <= 2 * 11 + 2  # one read per change (and a last one), not per reader
    for gen in gens:
        await gen.aclose()
    assert source.subscriptions == 0 and shared.readers("s") == 0


async def test_a_reader_that_stops_pulling_holds_nothing_and_catches_up_alone() -> None:
    """A reader that stops pulling (its socket full) slows nobody: the others get every
    event; the window stays within its bound; when it pulls again it reads its own pages
    from the source, exact and in order."""
    source = MemorySource()
    shared = SharedFeeds(source, window=50)
    source.append(1)
    slow = _feed(shared, "s", 0, 0)
    first = await anext(slow)  # its first event (with the reconnect hint): a dict
    assert isinstance(first, dict) and first["id"] == "1"
    fast = [_feed(shared, "s", 0, 0) for _ in range(5)]
    got: list[list[int]] = [[] for _ in fast]
    tasks = [asyncio.create_task(take(g, 601, got[i])) for i, g in enumerate(fast)]
    for _ in range(60):
        source.append(10)
        await asyncio.sleep(0.005)
    async with asyncio.timeout(WAIT):
        await asyncio.gather(*tasks)
    assert all(g == list(range(1, 602)) for g in got)
    feed = shared._feeds["s"]
    assert len(feed.events) <= 50  # the stalled reader pins at most the window
    before = source.reads
    rest: list[int] = []
    await take(slow, 601, rest)
    assert rest == list(range(2, 602))
    assert source.reads > before  # it read the source itself: it was behind the window
    for gen in (slow, *fast):
        await gen.aclose()


def test_a_shared_events_sse_is_what_sse_starlette_writes() -> None:
    """The encoding made once per shared event is byte for byte sse-starlette's own."""
    source = MemorySource()
    feed = SharedFeeds(source).subscribe("s")
    feed._feed._take([{"seq": 7, "type": "agent/inbox/spliced", "data": {"x": "a\nb"}}])
    (held,) = feed._feed.events
    expected = ServerSentEvent(event=held["type"], id="7", data=event_json(held), sep="\n")
    assert event_sse(held) == expected.encode()
    assert event_sse({"seq": 7, "type": "x"}) is None  # not held: its reader encodes it


async def test_postgres_many_readers_make_reads_bounded_by_notifications(
    pg: tuple[str, str],  # noqa: F811
) -> None:
    """Fifty readers of one session on an API node's feed while a writer in another process
    runs turns: every reader sees the whole log in order, and the database was read (event
    pages and live-frame queries) at most about once per notification, not fifty times."""
    url, _ = pg
    store = PostgresStore(url)
    feed = await open_pg_feed(store, None, name="fan")
    counts = {"pages": 0, "frames": 0}
    source = feed.source
    pages, frames = source.events_after, source.frames_after

    async def counted_pages(session_id: str, after: int, limit: int) -> list[dict[str, Any]]:
        counts["pages"] += 1
        return await pages(session_id, after, limit)

    async def counted_frames(session_id: str, seq: int, n: int) -> list[tuple[int, dict[str, Any]]]:
        counts["frames"] += 1
        return await frames(session_id, seq, n)

    source.events_after = counted_pages  # type: ignore[method-assign]
    source.frames_after = counted_frames  # type: ignore[method-assign]
    shared = SharedFeeds(source)
    try:
        async with writer(url, "w") as w:
            (first,) = await w.do("create")
            gens = [_feed(shared, "w", 0, 0) for _ in range(50)]
            last = first
            for text in ("one", "two", "three", "four", "five"):
                (last,) = await w.do(f"turn {text}")
            got: list[list[int]] = [[] for _ in gens]
            async with asyncio.timeout(WAIT):
                await asyncio.gather(*(take(g, last, got[i]) for i, g in enumerate(gens)))
            assert all(g == list(range(1, last + 1)) for g in got)
            wakes = feed.hub.notifications + feed.hub.connects
            assert counts["pages"] <= wakes + 2, (counts, wakes)
            assert counts["frames"] <= wakes + 2, (counts, wakes)
            for gen in gens:
                await gen.aclose()
            assert feed.hub.readers() == 0
    finally:
        await feed.close()
        await store.close()


async def test_sqlite_a_stalled_reader_is_dropped_while_the_others_receive(
    tmp_path: Path,
) -> None:
    """``--role all`` on SQLite: a client that stops reading (tiny receive buffer, never
    reads) is dropped once a send waits ``send_timeout``, while eight readers of the same
    session receive every one of 300 large events; the server closes the stalled
    connection (the client resumes by ``Last-Event-ID``)."""
    app = create_app(f"sqlite:///{tmp_path / 'db.sqlite'}", profiles, send_timeout=0.5)
    async with served(app) as client:
        assert (await client.post("/v1/sessions", json={"session_id": "s"})).status_code == 201
        port = client.base_url.port
        assert port is not None
        stalled = socket.socket()
        stalled.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        stalled.setblocking(False)
        loop = asyncio.get_running_loop()
        await loop.sock_connect(stalled, ("127.0.0.1", port))
        await loop.sock_sendall(stalled, b"GET /v1/sessions/s/events HTTP/1.1\r\nHost: x\r\n\r\n")
        readers = [asyncio.create_task(splices(client, 300)) for _ in range(8)]
        try:
            await asyncio.sleep(0.2)
            for i in range(300):  # ~12 MB: more than every socket buffer holds
                sent = await client.post(
                    "/v1/sessions/s/messages",
                    json={"mode": "inject", "content": f"{i} " + "x" * 40_000},
                )
                assert sent.status_code == 202, sent.text
            async with asyncio.timeout(WAIT * 4):
                counts = await asyncio.gather(*readers)
            assert counts == [300] * 8
            received = 0
            async with asyncio.timeout(WAIT):
                while chunk := await loop.sock_recv(stalled, 1 << 16):
                    received += len(chunk)
            assert 0 < received < 300 * 40_000  # cut off, not sent the whole log
        finally:
            stalled.close()
            for task in readers:
                task.cancel()  # the test's own readers
            await asyncio.gather(*readers, return_exceptions=True)
        assert (await client.get("/healthz")).json()["ok"] is True


async def splices(client: httpx.AsyncClient, count: int) -> int:
    """Read ``/v1/sessions/s/events`` until ``count`` splices came; returns how many."""
    seen = 0
    async with aconnect_sse(client, "GET", "/v1/sessions/s/events") as source:
        async for event in source.aiter_sse():
            if event.event == "agent/inbox/spliced":
                seen += 1
                if seen == count:
                    return seen
    return seen


async def test_postgres_many_sse_readers_see_the_log_exactly(
    pg: tuple[str, str],  # noqa: F811
) -> None:
    """Thirty SSE readers of one session through an API app on PostgreSQL (one shared feed
    in the process) while a writer in another process runs three turns: each sees every seq
    once, in order, exactly as stored, its first event carrying the reconnect hint."""
    url, _ = pg
    app = create_app(url, profiles, role="api", worker_id="fan", limits=ROOMY)
    async with writer(url, "w") as w, served(app) as client:
        await w.do("create")
        client.timeout = httpx.Timeout(WAIT)
        readers = [asyncio.create_task(until_turns(client, "w", 3)) for _ in range(30)]
        for text in ("a", "b", "c"):
            await w.do(f"turn {text}")
        async with asyncio.timeout(WAIT):
            results = await asyncio.gather(*readers)
        store = PostgresStore(url)
        try:
            stored = [e["seq"] for e in await store.load_after("w", 0, 10_000)]
        finally:
            await store.close()
        for ids, retry in results:
            assert ids == stored
            assert retry == 2000


async def until_turns(client: httpx.AsyncClient, sid: str, turns: int) -> tuple[list[int], Any]:
    """The durable ids one SSE reader sees until ``turns`` turns ended, and its first
    event's ``retry``."""
    ids: list[int] = []
    retry = None
    ended = 0
    async with aconnect_sse(client, "GET", f"/v1/sessions/{sid}/events") as source:
        async for event in source.aiter_sse():
            if not ids:
                retry = event.retry
            if event.event == "stream":
                continue
            ids.append(int(event.id))
            ended += event.event == "turn/end"
            if ended == turns:
                break
    return ids, retry
