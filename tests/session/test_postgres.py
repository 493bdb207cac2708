"""The PostgreSQL store against a real server: publication, leases and fencing (G-2).

Every test gets its own schema (dropped afterwards). The server is
``STEERLOOP_TEST_POSTGRES_URL`` (default ``postgresql://postgres@127.0.0.1:5432/test``); when
it is unreachable these tests fail, unless a developer opts out with
``STEERLOOP_SKIP_POSTGRES=1`` outside CI (``require_postgres``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
from collections.abc import AsyncIterator, Callable
from typing import Any

import asyncpg
import pytest

from steerloop import (
    AgentOptions,
    Runtime,
    SessionConflictError,
    SessionCorruptError,
    SessionPersistenceNotFoundError,
    SessionStorageError,
    user_message,
)
from steerloop.session import SessionEvent
from steerloop.session._events import StepStart, TurnStart
from steerloop.session._postgres import SCHEMA_VERSION, PostgresStore
from steerloop.session._store import open_store
from steerloop.testing import text_response

from ..conftest import Harness, compact, settle
from .backends import POSTGRES_URL, scratch_schema

PG_URL = POSTGRES_URL
OPTIONS = AgentOptions(provider="mock", model="m")


@pytest.fixture
async def schema() -> AsyncIterator[str]:
    async for name in scratch_schema():
        yield name


StoreFactory = Callable[..., PostgresStore]


@pytest.fixture
async def stores(schema: str) -> AsyncIterator[StoreFactory]:
    """``stores(**options)``: a new ``PostgresStore`` (own pool, own owner id) on the schema."""
    opened: list[PostgresStore] = []

    def make(**options: Any) -> PostgresStore:
        store = PostgresStore(PG_URL, schema=schema, **options)
        opened.append(store)
        return store

    yield make
    for store in opened:
        # A fenced-out writer reports its lost events when its store closes.
        with contextlib.suppress(SessionConflictError, ExceptionGroup):
            await store.close()


async def sql(query: str, *args: Any) -> Any:
    conn = await asyncpg.connect(PG_URL, timeout=5)
    try:
        return await conn.fetch(query, *args)
    finally:
        await conn.close()


def turn(seq: int, n: int) -> SessionEvent:
    return SessionEvent(seq=seq, time=1, type="turn/start", data=TurnStart(turn=n))


def seqs(events: Any) -> list[int]:
    return [event.seq for event in events]


async def runtime(store: PostgresStore) -> Harness:
    return Harness(await Runtime.open(store=store))


# --- URL, extra, errors ------------------------------------------------------------------


async def test_open_store_maps_postgres_urls_and_hides_the_password() -> None:
    """``open_store`` builds a PostgresStore lazily (no connection yet); ``url`` never shows
    the password, and our own query options are not passed to the server."""
    store = open_store("postgresql://alice:s3cret@db.example:6543/app?schema=x&lease_ttl=7")
    assert isinstance(store, PostgresStore)
    assert store.url == "postgresql://alice:***@db.example:6543/app?schema=x&lease_ttl=7"
    assert store.schema == "x"
    assert store.lease_ttl == 7.0
    await store.close()
    assert isinstance(open_store("postgres://u@h/db"), PostgresStore)
    with pytest.raises(ValueError, match="lease_ttl"):
        PostgresStore("postgresql://u@h/db?lease_ttl=soon")


def test_missing_asyncpg_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without asyncpg the error says which extra to install."""
    monkeypatch.setitem(sys.modules, "asyncpg", None)
    with pytest.raises(ImportError, match=r"steerloop\[postgres\]"):
        PostgresStore("postgresql://u@h/db")


async def test_unreachable_server_is_a_storage_error_without_secrets() -> None:
    """An unreachable server is ``SessionStorageError`` naming the server, never the
    password; ``Runtime.open`` itself does not connect, the first use does."""
    url = "postgresql://postgres:s3cret@127.0.0.1:1/test"
    store = PostgresStore(url, connect_timeout=2)
    for attempt in (store.load("s"), store.exists("s"), store.list()):
        with pytest.raises(SessionStorageError) as info:
            await attempt
        assert "127.0.0.1:1" in str(info.value)
        assert "s3cret" not in str(info.value)
        assert info.value.__cause__ is None
    with pytest.raises(SessionStorageError, match="write lease") as lease_error:
        await store.open_writer("s")
    assert "s3cret" not in str(lease_error.value)
    await store.close()
    rt = await Runtime.open(store=url)
    with pytest.raises(SessionStorageError, match="connecting failed"):
        await rt.agents.create(session_id="s", agent_options=OPTIONS)
    await rt.close()


# --- schema --------------------------------------------------------------------------------


async def test_schema_is_created_with_a_version_and_refuses_a_newer_one(
    schema: str, stores: StoreFactory
) -> None:
    """The first use creates the tables and records the schema version; a database from a
    newer steerloop is refused rather than misread."""
    assert await stores().list() == ()
    rows = await sql(f'SELECT version FROM "{schema}".steerloop_schema_version')
    assert [row["version"] for row in rows] == list(range(1, SCHEMA_VERSION + 1))
    assert await stores().list() == ()  # a second opener migrates nothing
    await sql(f'INSERT INTO "{schema}".steerloop_schema_version (version) VALUES (99)')
    with pytest.raises(SessionStorageError, match="version 99"):
        await stores().list()


async def versioned_schema(schema: str) -> Any:
    """``schema`` with nothing but its empty version table (what an older steerloop's first
    migration starts from); its ``Tables``."""
    from steerloop.session.store.postgres._schema import Tables

    tables = Tables(schema)
    await sql(f'CREATE SCHEMA "{schema}"')
    await sql(
        f"CREATE TABLE {tables.version} (version integer PRIMARY KEY, "
        "applied_at timestamptz NOT NULL DEFAULT now())"
    )
    return tables


async def test_a_version_1_schema_upgrades_in_place(schema: str, stores: StoreFactory) -> None:
    """A database written by a v1 steerloop gains the lease's owner key and the blob tables
    and keeps its rows; the store creates no table of a component (the service brings its
    own migrations: tests/service/test_pg_schema.py)."""
    from steerloop.session.store.postgres._schema import _MIGRATIONS

    tables = await versioned_schema(schema)
    conn = await asyncpg.connect(PG_URL, timeout=5)
    try:  # several statements: execute, not a prepared fetch
        await conn.execute(
            _MIGRATIONS[1].format(
                sessions=tables.sessions, events=tables.events, leases=tables.leases
            )
        )
    finally:
        await conn.close()
    await sql(f"INSERT INTO {tables.version} (version) VALUES (1)")
    await sql(
        f"INSERT INTO {tables.leases} (session_id, owner, lease_id, token, expires_at) "
        "VALUES ('s1', 'old-host', NULL, 7, now())"
    )
    assert await stores().list() == ()
    rows = await sql(f"SELECT version FROM {tables.version} ORDER BY version")
    assert [row["version"] for row in rows] == list(range(1, SCHEMA_VERSION + 1))
    leases = await sql(f"SELECT session_id, owner, token, owner_key FROM {tables.leases}")
    assert [tuple(row) for row in leases] == [("s1", "old-host", 7, None)]
    for table in (tables.blobs, tables.blob_refs):
        assert [tuple(r) for r in await sql(f"SELECT count(*) FROM {table}")] == [(0,)]
    found = await sql(
        "SELECT table_name FROM information_schema.tables WHERE table_schema = $1 "
        "ORDER BY table_name",
        schema,
    )
    assert [row["table_name"] for row in found] == [
        "steerloop_blob_refs",
        "steerloop_blobs",
        "steerloop_events",
        "steerloop_leases",
        "steerloop_schema_version",
        "steerloop_sessions",
    ]


# --- the store on its own ------------------------------------------------------------------


async def test_publication_and_reload_from_another_host(stores: StoreFactory) -> None:
    """C7.2-19: nothing is stored before ``publish``; after it every write is stored in seq
    order and a second host loads exactly those events, the header and the JSON text."""
    a, b = stores(), stores()
    writer = await a.open_writer("s")
    writer.set_header({"cwd": "/repo", "is_seeded": False})
    writer.write(turn(1, 1))
    await writer.flush()
    assert not await b.exists("s")
    assert await b.raw("s") == ()
    writer.publish()
    writer.write(turn(2, 2))
    await writer.flush()
    assert await b.load("s") == (turn(1, 1), turn(2, 2))
    assert [json.loads(text)["seq"] for text in await b.raw("s")] == [1, 2]
    header = await b.load_header("s")
    assert header["id"] == "s" and header["cwd"] == "/repo" and header["version"] == 1
    assert await b.list() == ("s",)
    await writer.close()
    with pytest.raises(SessionStorageError, match="after the writer was closed"):
        writer.write(turn(3, 3))


async def test_discard_and_unpublished_close_leave_no_artifact(stores: StoreFactory) -> None:
    """C7.2-19: ``discard`` and closing an unpublished writer store nothing and release
    the lease, so the id can be opened again at once."""
    store = stores()
    writer = await store.open_writer("s")
    writer.write(turn(1, 1))
    await writer.discard()
    assert not await store.exists("s")
    again = await store.open_writer("s")
    again.write(turn(1, 1))
    await again.close()
    assert not await store.exists("s")
    assert await store.list() == ()
    lease = await store.lease("s")
    assert lease is not None and not lease.live and lease.token == 2
    await store.open_writer("s")  # released: no conflict


async def test_missing_and_stored_ids(stores: StoreFactory) -> None:
    """Not found is its own error; ``check_absent`` refuses a stored id; ``delete`` refuses a
    leased session (G-2) and removes a released one."""
    a, b = stores(), stores()
    with pytest.raises(SessionPersistenceNotFoundError, match="'nope'"):
        await a.load("nope")
    with pytest.raises(SessionPersistenceNotFoundError):
        await a.load_header("nope")
    with pytest.raises(SessionPersistenceNotFoundError):
        await a.delete("nope")
    await a.check_absent("s")
    writer = await a.open_writer("s")
    writer.publish()
    await writer.flush()
    assert await a.load("s") == ()  # published empty: stored, no events
    with pytest.raises(SessionConflictError, match="already stored"):
        await b.check_absent("s")
    with pytest.raises(SessionConflictError, match="open writer"):
        await a.delete("s")
    with pytest.raises(SessionConflictError, match="holds its lease"):
        await b.delete("s")
    await writer.close()
    await b.delete("s")
    assert await a.list() == ()


async def test_group_commit_stores_a_burst_in_one_transaction(stores: StoreFactory) -> None:
    """Writes are synchronous hand-offs: a burst across sessions becomes one transaction,
    and ``flush`` returns once all of it is durable."""
    store = stores()
    one, two = await store.open_writer("one"), await store.open_writer("two")
    one.publish()
    two.publish()
    await one.flush()
    before = store.commits
    for seq in range(1, 101):
        one.write(turn(seq, seq))
        two.write(turn(seq, seq))
    await two.flush()
    assert store.commits == before + 1
    assert seqs(await stores().load("one")) == list(range(1, 101))
    assert len(await store.raw("two")) == 100


async def test_corrupt_rows_name_the_seq(stores: StoreFactory) -> None:
    """A malformed stored event or an unknown required type is ``SessionCorruptError``
    naming its seq; an ignorable unknown type loads (G-7)."""
    store = stores()
    good = turn(1, 1).to_json()
    await store.put_raw("bad", [good, {"seq": 2, "time": 1, "type": "turn/start", "data": {}}])
    with pytest.raises(SessionCorruptError, match="seq 2"):
        await store.load("bad")
    unknown = {"seq": 2, "time": 1, "type": "x/new", "data": {}}
    await store.put_raw("unknown", [good, unknown])
    with pytest.raises(SessionCorruptError, match="seq 2: unknown required event type"):
        await store.load("unknown")
    await store.put_raw("ignorable", [good, {**unknown, "ignorable": True}])
    assert seqs(await store.load("ignorable")) == [1, 2]
    await store.put_raw("shifted", [good, turn(3, 2).to_json()])
    with pytest.raises(SessionCorruptError, match="seq 2"):
        await store.load("shifted")


@pytest.mark.parametrize(
    ("stored", "problem"),
    [
        ('"a string"', "is not a JSON object"),
        ("[1, 2]", "is not a JSON object"),
        ('{"version": 1, "created_at": 1, "is_seeded": false}', "id must be str"),
        ('{"version": true, "id": "s", "created_at": 1, "is_seeded": false}', "version"),
        ('{"version": 1, "id": "s", "created_at": 1, "is_seeded": 0}', "is_seeded"),
    ],
)
async def test_a_hostile_stored_header_is_reported_as_corrupt(
    stores: StoreFactory, stored: str, problem: str
) -> None:
    """The header is read through the shared codec (``decode_header``), as on SQLite: a row
    that is not a header is a SessionCorruptError naming the session from ``load_header``
    and ``info``; the events stay readable."""
    store = stores()
    await store.put_raw("s", [turn(1, 1).to_json()])
    await sql(f"UPDATE {store.tables.sessions} SET header = $1::json", stored)
    with pytest.raises(SessionCorruptError, match=f"session 's'.*{problem}"):
        await store.load_header("s")
    with pytest.raises(SessionCorruptError, match=problem):
        await store.info("s")
    assert seqs(await store.load("s")) == [1]


# --- leases and fencing (G-2) ----------------------------------------------------------------


async def test_a_cancelled_close_still_stores_what_was_written(stores: StoreFactory) -> None:
    """G-2: cancelling a writer's close does not give its lease back ahead of the events
    it queued (their fence would then fail): they are committed, then the lease goes."""
    store = stores()
    writer = await store.open_writer("a")
    writer.publish()
    for seq in range(1, 6):
        writer.write(turn(seq, seq))
    closing = asyncio.ensure_future(writer.close())
    await asyncio.sleep(0)
    closing.cancel()
    with pytest.raises(asyncio.CancelledError):
        await closing
    await store.close()
    other = stores()
    assert seqs(await other.load("a")) == [1, 2, 3, 4, 5]
    again = await other.open_writer("a")  # and the lease was released after all
    await again.discard()


async def test_an_unexpected_commit_error_fails_the_batch_not_the_store(
    stores: StoreFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A bug-shaped error inside a batch transaction fails that batch's writers with a
    SessionStorageError naming it; the writer task lives on and other sessions commit."""
    store = stores()
    broken = await store.open_writer("a")
    commit_in = store._commit_in
    calls = [0]

    async def fails_once(*args: Any) -> Any:
        calls[0] += 1
        if calls[0] == 1:
            raise TypeError("a bug in the batch")
        return await commit_in(*args)

    monkeypatch.setattr(store, "_commit_in", fails_once)
    broken.publish()
    broken.write(turn(1, 1))
    with pytest.raises(SessionStorageError, match="a bug in the batch"):
        await broken.flush()
    healthy = await store.open_writer("b")
    healthy.publish()
    healthy.write(turn(1, 1))
    await healthy.flush()
    await healthy.close()
    assert seqs(await stores().load("b")) == [1]
    with pytest.raises(SessionStorageError, match="a bug in the batch"):
        await broken.close()


async def test_a_publication_clash_gives_the_lease_back_at_close(stores: StoreFactory) -> None:
    """G-2: a fresh session that someone else stored meanwhile clashes at publication
    (SessionConflictError); the lease was still ours, so closing releases it at once
    instead of leaving it to expire."""
    first, second = stores(), stores()
    writer = await first.open_writer("x")
    await second.put_raw("x", [turn(1, 1).to_json()])  # stored behind the lease's back
    writer.publish()
    writer.write(turn(1, 1))
    with pytest.raises(SessionConflictError, match="by someone else"):
        await writer.flush()
    with pytest.raises(SessionConflictError):
        await writer.close()
    again = await second.open_writer("x")  # no wait for lease_ttl
    await again.discard()


async def test_one_writer_per_session_across_hosts(stores: StoreFactory) -> None:
    """G-2: a second writer, in this store or another host's, gets SessionConflictError at
    open time, naming the holder; the holder keeps writing."""
    a, b = stores(), stores()
    writer = await a.open_writer("s")
    with pytest.raises(SessionConflictError, match="already has a writer"):
        await a.open_writer("s")
    with pytest.raises(SessionConflictError, match=f"{a.owner} holds its lease"):
        await b.open_writer("s")
    writer.publish()
    writer.write(turn(1, 1))
    await writer.flush()
    assert seqs(await b.load("s")) == [1]


async def test_heartbeat_keeps_a_live_owner_leased(stores: StoreFactory) -> None:
    """G-2: an owner whose loop runs renews its lease, so it outlives the TTL."""
    a, b = stores(lease_ttl=0.3), stores()
    await a.open_writer("s")
    await asyncio.sleep(1.0)  # > 3 TTLs of heartbeats
    with pytest.raises(SessionConflictError):
        await b.open_writer("s")


async def test_paused_owner_is_taken_over_and_fenced(stores: StoreFactory, schema: str) -> None:
    """G-2: a paused owner (no heartbeat past the TTL) loses the lease; the next opener
    takes it over with a higher token; the old owner's later batch is refused as a whole
    (its flush, or its next write once the loss is known, raises SessionConflictError)."""
    a, b = stores(lease_ttl=30), stores()  # no heartbeat falls due within this test
    old = await a.open_writer("s")
    old.publish()
    old.write(turn(1, 1))
    await old.flush()
    # The server's clock is the lease clock: moving the expiry into the past is the TTL
    # elapsing while the owner is paused, without a wall-clock sleep.
    await sql(f"UPDATE {schema}.steerloop_leases SET expires_at = now() WHERE session_id = 's'")
    new = await b.open_writer("s")  # takeover of the expired lease
    lease = await b.lease("s")
    assert lease is not None and lease.token == 2 and lease.owner == b.owner
    with pytest.raises(SessionConflictError, match="taken over"):
        # Refused at once if its heartbeat already found the lease gone, else by the fence.
        old.write(turn(2, 2))
        old.write(turn(3, 3))
        await old.flush()
    new.publish()
    new.write(turn(2, 20))
    await new.flush()
    stored = await b.load("s")
    assert [(e.seq, e.data.turn) for e in stored] == [(1, 1), (2, 20)]
    with pytest.raises(SessionConflictError):
        await old.close()
    await new.close()


async def test_revoked_lease_fences_the_holder(stores: StoreFactory) -> None:
    """G-2: ``revoke_lease`` (an operator fencing a dead host) ends the lease at once: the
    holder's next batch is refused, and the next opener gets a fresh token."""
    a, b = stores(), stores()
    old = await a.open_writer("s")
    old.publish()
    await old.flush()
    assert await b.revoke_lease("s")
    assert not await b.revoke_lease("s")
    old.write(turn(1, 1))
    with pytest.raises(SessionConflictError, match="token 1"):
        await old.flush()
    new = await b.open_writer("s")
    assert (await b.lease("s")).token == 3  # type: ignore[union-attr]
    new.write(turn(1, 9))
    new.publish()
    await new.close()
    assert [e.data.turn for e in await a.load("s")] == [9]


async def test_second_runtime_cannot_drive_a_leased_session(stores: StoreFactory) -> None:
    """C7.2-10, C7.2-6, G-2: while runtime 1 drives a session, runtime 2's ``resume`` and
    ``restore_or_create`` raise SessionConflictError, create nothing and leave the stored
    log unchanged; after runtime 1 disposes, runtime 2 resumes it (C7.2-5, C7.2-12)."""
    h1, h2 = await runtime(stores()), await runtime(stores())
    h1.adapter.add(text_response("one"))
    first = await h1.rt.agents.create(session_id="s", agent_options=OPTIONS)
    agent = first.agent
    agent.followup(user_message("u1"))
    await settle(agent)
    await agent.session.flush()
    store2 = h2.rt.sessions.persistence
    assert isinstance(store2, PostgresStore)
    before = await store2.raw("s")
    with pytest.raises(SessionConflictError, match="already has a writer"):
        await h2.rt.agents.resume(resume_session_id="s", agent_options=OPTIONS)
    with pytest.raises(SessionConflictError):
        await h2.rt.agents.restore_or_create(session_id="s", agent_options=OPTIONS)
    assert h2.rt.agents.get("s") is None
    assert await store2.raw("s") == before
    await first.dispose()
    h2.adapter.add(text_response("two"))
    handle = await h2.rt.agents.restore_or_create(session_id="s", agent_options=OPTIONS)
    resumed = handle.agent
    resumed.followup(user_message("u2"))
    await settle(resumed)
    assert compact(resumed.session, only=("T", "hdr")) == [
        "T+1",
        "hdr(initial)",
        "T-1:completed",
        "T+2",
        "hdr(resume)",
        "T-2:completed",
    ]
    await h2.rt.close()
    await h1.rt.close()
    assert seqs(await stores().load("s")) == seqs(resumed.session.events)


async def test_taken_over_runtime_appends_nothing_more(stores: StoreFactory) -> None:
    """G-2: runtime 1's lease is taken over (it stopped heartbeating); runtime 2 resumes and
    runs a turn; runtime 1's agent keeps running in memory, but its flush raises
    SessionConflictError and the stored log holds only runtime 2's events after the
    takeover point."""
    store1, store2 = stores(), stores()
    h1, h2 = await runtime(store1), await runtime(store2)
    agent1 = await h1.agent(text_response("one"), text_response("late"), session_id="s")
    agent1.followup(user_message("u1"))
    await settle(agent1)
    await agent1.session.flush()
    cut = len(agent1.session.events)
    # The heartbeat stopped (a partition): the lease expires in the database.
    await sql(f"UPDATE \"{store1.schema}\".steerloop_leases SET expires_at = now() - interval '1s'")
    h2.adapter.add(text_response("two"))
    agent2 = (await h2.rt.agents.resume(resume_session_id="s", agent_options=OPTIONS)).agent
    agent2.followup(user_message("u2"))
    await settle(agent2)
    await agent2.session.flush()
    agent1.followup(user_message("stale"))
    await settle(agent1)
    with pytest.raises(SessionConflictError, match="taken over"):
        await agent1.session.flush()
    stored = await store2.load("s")
    assert stored == tuple(agent2.session.events)
    assert stored[:cut] == tuple(agent1.session.events[:cut])
    assert "stale" not in json.dumps([e.to_json() for e in stored])
    with pytest.raises((SessionConflictError, ExceptionGroup)):
        await h1.rt.close()
    await h2.rt.close()


async def test_resume_repairs_a_crashed_log(stores: StoreFactory) -> None:
    """C7.2-9: a stored log whose turn never closed gets ``step/end``, an interrupted
    ``turn/end`` and ``session/end-seed`` on resume, durably."""
    store = stores()
    await store.put_raw(
        "s",
        [
            turn(1, 1).to_json(),
            SessionEvent(
                seq=2, time=1, type="step/start", data=StepStart(turn=1, step=1)
            ).to_json(),
        ],
    )
    h = await runtime(store)
    handle = await h.rt.agents.resume(resume_session_id="s", agent_options=OPTIONS)
    assert [e.type for e in handle.agent.session.events] == [
        "turn/start",
        "step/start",
        "step/end",
        "turn/end",
        "session/end-seed",
    ]
    await handle.dispose()
    stored = await stores().load("s")
    assert stored[3].data.reason.kind == "interrupted"
    await h.rt.close()


async def test_runtime_open_with_a_url_owns_its_store(schema: str) -> None:
    """``Runtime.open(store="postgresql://...")`` creates, stores and closes its store; a new
    runtime on the same URL restores the session (C7.2-5)."""
    url = f"{PG_URL}?schema={schema}"
    h = Harness(await Runtime.open(store=url))
    agent = await h.agent(text_response("hi"), session_id="s")
    agent.followup(user_message("u1"))
    await settle(agent)
    events = tuple(agent.session.events)
    await h.rt.close()
    again = Harness(await Runtime.open(store=url))
    handle = await again.rt.agents.restore_or_create(session_id="s", agent_options=OPTIONS)
    assert tuple(handle.agent.session.events)[: len(events)] == events
    await again.rt.close()


async def test_restore_or_create_waits_for_teardown(stores: StoreFactory) -> None:
    """C7.2-8: ``restore_or_create`` during teardown waits for it and restores everything
    the old lifecycle flushed, including its final ``turn/end``."""
    h = await runtime(stores())
    h.adapter.add(text_response("one"))
    handle = await h.rt.agents.create(session_id="s", agent_options=OPTIONS)
    handle.agent.followup(user_message("u1"))
    teardown = asyncio.ensure_future(handle.dispose())
    await asyncio.sleep(0)  # teardown has begun
    restored = await h.rt.agents.restore_or_create(session_id="s", agent_options=OPTIONS)
    await teardown
    old = tuple(handle.agent.session.events)
    assert old[-1].type == "turn/end"
    assert tuple(restored.agent.session.events)[: len(old)] == old
    await h.rt.close()


async def test_dead_host_inbox_is_restored_elsewhere(stores: StoreFactory) -> None:
    """C7.2-11, G-2: host 1 dies with an ``inject`` pending (flushed, never disposed); once
    its lease is revoked, host 2 resumes with the message pending, and the first turn
    after resume claims it ahead of the new prompt."""
    store1, store2 = stores(), stores()
    h1, h2 = await runtime(store1), await runtime(store2)
    agent1 = (await h1.rt.agents.create(session_id="s", agent_options=OPTIONS)).agent
    agent1.inject(user_message("pending"))
    await agent1.session.flush()
    with pytest.raises(SessionConflictError):
        await h2.rt.agents.resume(resume_session_id="s", agent_options=OPTIONS)
    assert await store2.revoke_lease("s")  # host 1 is known dead
    h2.adapter.add(text_response("two"))
    agent = (await h2.rt.agents.resume(resume_session_id="s", agent_options=OPTIONS)).agent
    assert [message.id for message in agent.inbox.next_step] == [
        message.id for message in agent1.inbox.next_step
    ]
    agent.followup(user_message("u1"))
    await settle(agent)
    assert compact(agent.session, only=("claim",)) == ["claim(ns,pending)", "claim(nt,u1)"]
    await h2.rt.close()
    with contextlib.suppress(SessionConflictError, ExceptionGroup):
        await h1.rt.close()


# --- a writer that lost its lease, an interrupted commit (issue 11, item 7) ---------------


async def _until(condition: Callable[[], bool]) -> None:
    """Let the store's writer task run until ``condition`` holds (bounded)."""
    async with asyncio.timeout(10):
        while not condition():
            await asyncio.sleep(0.01)


async def test_an_append_after_a_refused_fence_raises_at_once(stores: StoreFactory) -> None:
    """G-2: once a batch of a writer whose lease was taken over is refused, its next
    ``write`` raises SessionConflictError at once (as on SQLite), before any flush; the
    stored log keeps only the new owner's events."""
    a, b = stores(), stores()
    old = await a.open_writer("s")
    old.publish()
    old.write(turn(1, 1))
    await old.flush()
    assert await b.revoke_lease("s")
    new = await b.open_writer("s")  # the takeover
    old.write(turn(2, 2))  # not known yet: queued, then refused by the fence
    await _until(lambda: old.error is not None)  # type: ignore[attr-defined]
    with pytest.raises(SessionConflictError, match="taken over"):
        old.write(turn(3, 3))
    new.publish()
    new.write(turn(2, 20))
    await new.close()
    assert [(e.seq, e.data.turn) for e in await b.load("s")] == [(1, 1), (2, 20)]
    with pytest.raises(SessionConflictError, match="taken over"):
        await old.close()


async def test_a_taken_over_agent_stops_at_its_next_append(stores: StoreFactory) -> None:
    """G-2: an agent whose lease was taken over does not run on unrecorded: once the fence
    refused its batch, the next append raises, the turn ends in error and ``followup``
    refuses work, with no flush in between."""
    store1, store2 = stores(), stores()
    h1 = await runtime(store1)
    agent1 = await h1.agent(text_response("one"), text_response("late"), session_id="s")
    agent1.followup(user_message("u1"))
    await settle(agent1)
    await agent1.session.flush()
    assert await store2.revoke_lease("s")
    taker = await store2.open_writer("s")
    agent1.followup(user_message("stale"))  # runs before the refusal is known
    await settle(agent1)
    writer = agent1.session._sink
    await _until(lambda: writer.error is not None)
    count = len(agent1.session.events)
    with pytest.raises(SessionConflictError, match="taken over"):
        agent1.followup(user_message("later"))
    assert len(agent1.session.events) == count  # nothing more was folded in memory
    await taker.discard()
    with pytest.raises((SessionConflictError, ExceptionGroup)):
        await h1.rt.close()


async def test_an_interrupted_commit_is_a_storage_error(stores: StoreFactory) -> None:
    """A commit whose server connection dies mid-transaction (terminated while its fence
    waits on a row lock) fails the writer with SessionStorageError, never a raw driver
    error: at ``flush``, at the next ``write`` and at ``close``; nothing of the batch is
    stored, and the store keeps serving other sessions."""
    store = stores()
    writer = await store.open_writer("a")
    writer.publish()
    writer.write(turn(1, 1))
    await writer.flush()
    blocker = await asyncpg.connect(PG_URL, timeout=5)
    try:
        tx = blocker.transaction()
        await tx.start()
        await blocker.execute(
            f'SELECT 1 FROM "{store.schema}".steerloop_leases WHERE session_id = $1 FOR UPDATE',
            "a",
        )
        writer.write(turn(2, 2))
        flushing = asyncio.ensure_future(writer.flush())
        waiting: list[Any] = []

        async def blocked() -> bool:
            rows = await blocker.fetch(
                "SELECT pid FROM pg_stat_activity WHERE application_name = $1 "
                "AND wait_event_type = 'Lock'",
                store.application_name,
            )
            waiting[:] = [row["pid"] for row in rows]
            return bool(waiting)

        async with asyncio.timeout(10):
            while not await blocked():
                await asyncio.sleep(0.01)
        await blocker.fetch("SELECT pg_terminate_backend(pid) FROM unnest($1::int[]) pid", waiting)
        await tx.rollback()
    finally:
        await blocker.close()
    with pytest.raises(SessionStorageError, match="committing"):
        await asyncio.wait_for(flushing, 10)
    with pytest.raises(SessionStorageError, match="committing"):
        writer.write(turn(3, 3))
    with pytest.raises(SessionStorageError):
        await writer.close()
    other = await store.open_writer("b")
    other.publish()
    other.write(turn(1, 1))
    await other.close()
    assert seqs(await store.load("a")) == [1]
    assert seqs(await store.load("b")) == [1]
