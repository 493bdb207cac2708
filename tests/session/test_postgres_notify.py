"""The PostgreSQL store's feed notify (design/SERVICE.md "SSE subscribe"): with
``notify=True`` every committed batch sends one ``pg_notify('steerloop_feed', …)`` inside its
transaction, naming each session's highest seq; a fenced-out batch announces nothing; off by
default. Every test has its own schema and a LISTENing connection of its own."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import pytest

from steerloop import SessionConflictError
from steerloop.session import SessionEvent
from steerloop.session._events import TurnStart
from steerloop.session.store.postgres._schema import Tables
from steerloop.session.store.postgres._store import (
    PostgresStore,
    feed_payloads,
    parse_feed_payload,
)

from .backends import POSTGRES_URL, drop_schema, scratch_schema


def turn(seq: int, n: int) -> SessionEvent:
    return SessionEvent(seq=seq, time=1, type="turn/start", data=TurnStart(turn=n))


class Listener:
    """A connection LISTENing on the feed channel; ``payloads`` in arrival order."""

    def __init__(self, conn: Any) -> None:
        self.conn = conn
        self.payloads: list[str] = []
        self.arrived = asyncio.Event()

    def on_notify(self, conn: Any, pid: int, channel: str, payload: str) -> None:
        self.payloads.append(payload)
        self.arrived.set()

    async def settle(self) -> list[str]:
        """Everything delivered so far: a round trip on the listening connection after the
        notifying commits returned (a notification of a committed transaction reaches the
        listener before the answer to its next query)."""
        await self.conn.fetchval("SELECT 1")
        return list(self.payloads)


@pytest.fixture
async def schema() -> AsyncIterator[str]:
    async for name in scratch_schema():
        yield name


@pytest.fixture
async def listener(schema: str) -> AsyncIterator[Listener]:
    conn = await asyncpg.connect(POSTGRES_URL, timeout=5)
    found = Listener(conn)
    await conn.add_listener(Tables(schema).feed_channel, found.on_notify)
    try:
        yield found
    finally:
        await conn.close()


@contextlib.asynccontextmanager
async def opened(store: PostgresStore) -> AsyncIterator[PostgresStore]:
    try:
        yield store
    finally:
        with contextlib.suppress(SessionConflictError, ExceptionGroup):
            await store.close()


async def test_one_notify_per_committed_batch_with_every_sessions_max_seq(
    schema: str, listener: Listener
) -> None:
    """A batch holding two sessions' events commits as one transaction and sends exactly one
    notification naming both sessions' highest seq; the next batch sends one more."""
    async with opened(PostgresStore(POSTGRES_URL, schema=schema, notify=True)) as store:
        a = await store.open_writer("a")
        b = await store.open_writer("b,odd:id%")
        before = store.commits
        # Synchronous writes: nothing runs the writer task until the flush, so this is
        # one batch.
        a.publish()
        b.publish()
        for seq in (1, 2, 3):
            a.write(turn(seq, seq))
        b.write(turn(1, 1))
        b.write(turn(2, 2))
        await a.flush()
        assert store.commits == before + 1
        assert await listener.settle() == ["a:3,b%2Codd%3Aid%25:2"]
        assert parse_feed_payload(listener.payloads[0]) == [("a", 3, None), ("b,odd:id%", 2, None)]
        a.write(turn(4, 4))
        await a.flush()
        assert await listener.settle() == ["a:3,b%2Codd%3Aid%25:2", "a:4"]
        await a.close()
        await b.close()


async def test_another_schemas_batches_are_not_announced_here(
    schema: str, listener: Listener
) -> None:
    """NOTIFY channels belong to the database: a store on another schema (another tenant)
    announces on that schema's channel, never on this one's."""
    other = f"{schema}_other"
    try:
        async with opened(PostgresStore(POSTGRES_URL, schema=other, notify=True)) as store:
            w = await store.open_writer("a")
            w.publish()
            w.write(turn(1, 1))
            await w.close()
        async with opened(PostgresStore(POSTGRES_URL, schema=schema, notify=True)) as store:
            w = await store.open_writer("b")
            w.publish()
            w.write(turn(1, 1))
            await w.close()
        assert await listener.settle() == ["b:1"]
    finally:
        await drop_schema(other)


async def test_a_fenced_out_batch_announces_nothing(schema: str, listener: Listener) -> None:
    """G-2: a batch refused by the fence (the lease was revoked) stores nothing and sends no
    notification; the new owner's batch is announced."""
    async with (
        opened(PostgresStore(POSTGRES_URL, schema=schema, notify=True)) as old_store,
        opened(PostgresStore(POSTGRES_URL, schema=schema, notify=True)) as new_store,
    ):
        old = await old_store.open_writer("s")
        old.publish()
        old.write(turn(1, 1))
        await old.flush()
        assert await listener.settle() == ["s:1"]
        assert await new_store.revoke_lease("s")
        old.write(turn(2, 2))
        with pytest.raises(SessionConflictError, match="taken over"):
            await old.flush()
        assert await listener.settle() == ["s:1"]
        new = await new_store.open_writer("s")
        new.publish()
        new.write(turn(2, 20))
        await new.close()
        assert await listener.settle() == ["s:1", "s:2"]


async def test_notify_is_off_by_default_and_on_through_the_url(
    schema: str, listener: Listener
) -> None:
    """Library users pay nothing: a default store sends no notification; ``?notify=1`` in
    the URL turns it on; a malformed value is refused."""
    async with opened(PostgresStore(POSTGRES_URL, schema=schema)) as quiet:
        assert quiet.notify is False
        w = await quiet.open_writer("q")
        w.publish()
        w.write(turn(1, 1))
        await w.close()
    assert await listener.settle() == []
    url = f"{POSTGRES_URL}?schema={schema}&notify=1"
    async with opened(PostgresStore(url)) as loud:
        assert loud.notify is True
        w = await loud.open_writer("l")
        w.publish()
        w.write(turn(1, 1))
        await w.close()
    assert await listener.settle() == ["l:1"]
    with pytest.raises(ValueError, match="notify"):
        PostgresStore(f"{POSTGRES_URL}?notify=yes")


def test_payloads_split_below_the_server_limit_and_parse_back() -> None:
    """More sessions than one 8000-byte payload holds are split over several payloads (each
    under the limit, every session once); malformed items are skipped when parsing."""
    tops = {f"session-{i:05d}-{'x' * 40}": i for i in range(1, 400)}
    payloads = feed_payloads(tops)
    assert len(payloads) > 1
    assert all(len(p.encode()) < 8000 for p in payloads)
    parsed = [item for p in payloads for item in parse_feed_payload(p)]
    assert parsed == [(sid, seq, None) for sid, seq in tops.items()]
    assert parse_feed_payload("a:1,:2,b:x,c:3:4,d:1:2:3,") == [("a", 1, None), ("c", 3, 4)]
