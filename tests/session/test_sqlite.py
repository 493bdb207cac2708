"""The SQLite store on its own: file, schema, header, lease, and every way it can fail.

Real database files under ``tmp_path``; faults are planted with a plain ``sqlite3``
connection (corrupt rows, a newer schema) or with real SQLite limits (``max_page_count``
for a full disk, ``query_only`` for a read-only database).
"""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import stat
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from steerloop import (
    AgentOptions,
    Runtime,
    SessionConflictError,
    SessionCorruptError,
    SessionStorageError,
    user_message,
)
from steerloop.session import SessionEvent
from steerloop.session._events import TurnStart
from steerloop.session._sqlite import MIGRATIONS, SCHEMA_VERSION, SqliteStore, migrate
from steerloop.testing import text_response, tool_calls_response

from ..conftest import SETTLE_TIMEOUT, Harness, settle
from ..logcheck import assert_well_formed
from ..support import Bench

OPTIONS = AgentOptions(provider="mock", model="m")


def turn(seq: int, n: int | None = None) -> SessionEvent:
    return SessionEvent(seq=seq, time=1, type="turn/start", data=TurnStart(turn=n or seq))


def blob(seq: int, size: int = 2000) -> SessionEvent:
    """An ignorable plugin event with a large payload (fills pages quickly)."""
    return SessionEvent(seq=seq, time=1, type="x/blob", data={"t": "x" * size}, ignorable=True)


def is_storage_failure(error: BaseException) -> bool:
    """``error`` is a SessionStorageError, or a group made only of them."""
    if isinstance(error, BaseExceptionGroup):
        return error.split(SessionStorageError)[1] is None
    return isinstance(error, SessionStorageError)


async def store_with(path: Path, session_id: str, count: int) -> None:
    store = SqliteStore(path)
    writer = await store.open_writer(session_id)
    writer.publish()
    for seq in range(1, count + 1):
        writer.write(turn(seq))
    await writer.close()
    await store.close()


def execute(path: Path, sql: str, *args: Any) -> None:
    conn = sqlite3.connect(path)
    try:
        conn.execute(sql, args)
        conn.commit()
    finally:
        conn.close()


async def load(path: Path, session_id: str) -> tuple[SessionEvent, ...]:
    store = SqliteStore(path)
    try:
        return await store.load(session_id)
    finally:
        await store.close()


# --- the file and its schema --------------------------------------------------------------


async def test_runtime_opens_a_sqlite_url_and_creates_a_private_file(tmp_path: Path) -> None:
    """``Runtime.open(store="sqlite:///path")`` creates the database with mode 0600."""
    path = tmp_path / "sessions.db"
    rt = await Runtime.open(store=f"sqlite:///{path}")
    try:
        assert isinstance(rt.sessions.persistence, SqliteStore)
        assert rt.sessions.persistence.path == str(path)
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
        h = Harness(rt)
        agent = await h.agent(text_response("hi"))
        agent.followup(user_message("u"))
        await settle(agent)
        await agent.session.flush()
        for side in (path, Path(f"{path}-wal")):
            if side.exists():
                assert stat.S_IMODE(os.stat(side).st_mode) == 0o600
    finally:
        await asyncio.wait_for(rt.close(), SETTLE_TIMEOUT)
    conn = sqlite3.connect(path)
    try:
        assert conn.execute("SELECT version FROM schema_version").fetchall() == [(SCHEMA_VERSION,)]
        assert conn.execute("PRAGMA journal_mode").fetchone() == ("wal",)
        rows = conn.execute("SELECT seq, body FROM events ORDER BY seq").fetchall()
    finally:
        conn.close()
    assert [seq for seq, _ in rows] == list(range(1, len(rows) + 1))
    assert all(json.loads(body)["seq"] == seq for seq, body in rows)


async def test_bad_urls_are_value_errors() -> None:
    for url in ("sqlite://", "sqlite:///", "sqlite:///dir/", "sqlite:///x.db?mode=ro"):
        with pytest.raises(ValueError, match="SQLite store URL"):
            await Runtime.open(store=url)


async def test_header_of_a_fresh_and_a_forked_session(tmp_path: Path) -> None:
    """EVENTS.md §2.7: the header row holds version, id, created_at, is_seeded and, for a
    fork, parent_session."""
    before = int(time.time() * 1000)
    store = SqliteStore(tmp_path / "s.db")
    try:
        async with await Runtime.open(store=store, clock=lambda: 1234) as rt:
            h = Harness(rt)
            agent = await h.agent(text_response("hi"))
            agent.followup(user_message("u"))
            await settle(agent)
            await rt.sessions.fork("s-1", 2, "child")
        header = await store.load_header("s-1")
        created = header.pop("created_at")
        assert isinstance(created, int) and before <= created <= time.time() * 1000
        assert header == {"version": 1, "id": "s-1", "is_seeded": False}
        child = await store.load_header("child")
        assert child["parent_session"] == "s-1"
        assert child["is_seeded"] is True
        assert child["created_at"] >= created
    finally:
        await store.close()


async def test_migration_brings_an_old_database_forward(tmp_path: Path) -> None:
    """Migrations run in order inside one transaction and keep the stored data."""
    path = tmp_path / "s.db"
    await store_with(path, "a", 3)
    extra = ("CREATE INDEX events_by_body ON events (body)",)
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        assert migrate(conn, str(path), (*MIGRATIONS, extra)) == SCHEMA_VERSION
        assert conn.execute("SELECT version FROM schema_version").fetchone() == (
            SCHEMA_VERSION + 1,
        )
        assert migrate(conn, str(path), (*MIGRATIONS, extra)) == SCHEMA_VERSION + 1
        names = {row[0] for row in conn.execute("SELECT name FROM sqlite_master")}
        assert "events_by_body" in names
        assert conn.execute("SELECT count(*) FROM events").fetchone() == (3,)
    finally:
        conn.close()


async def test_a_version_1_database_moves_to_the_append_ordered_table(tmp_path: Path) -> None:
    """v1 clustered events by session (WITHOUT ROWID); v2 keeps them in append order, the
    (session_id, seq) primary key being an index. Opening a v1 file migrates it: the same logs load,
    each session's rows are contiguous, duplicates are still refused, and writes go on."""
    path = tmp_path / "s.db"
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        assert migrate(conn, str(path), MIGRATIONS[:1]) == 0
        conn.execute("INSERT INTO sessions VALUES ('a', 1, 1, NULL, NULL, 0, NULL, NULL)")
        conn.execute("INSERT INTO sessions VALUES ('b', 1, 1, NULL, NULL, 0, NULL, NULL)")
        for seq in range(1, 4):  # interleaved, as concurrent writers leave them
            for sid in ("b", "a"):
                body = json.dumps(turn(seq).to_json(), separators=(",", ":"))
                conn.execute("INSERT INTO events VALUES (?, ?, ?)", (sid, seq, body))
    finally:
        conn.close()

    store = SqliteStore(path)
    try:
        assert [e.seq for e in await store.load("a")] == [1, 2, 3]
        writer = await store.open_writer("a")
        writer.publish()
        writer.write(turn(4))
        await writer.close()
        assert [e.seq for e in await store.load("a")] == [1, 2, 3, 4]
        assert [e.seq for e in await store.load("b")] == [1, 2, 3]
    finally:
        await store.close()

    conn = sqlite3.connect(path)
    try:
        assert conn.execute("SELECT version FROM schema_version").fetchone() == (SCHEMA_VERSION,)
        ddl = conn.execute("SELECT sql FROM sqlite_master WHERE name = 'events'").fetchone()[0]
        assert "PRIMARY KEY (session_id, seq)" in ddl and "WITHOUT ROWID" not in ddl
        order = conn.execute("SELECT session_id, seq FROM events ORDER BY rowid").fetchall()
        assert order == [("a", 1), ("a", 2), ("a", 3), ("b", 1), ("b", 2), ("b", 3), ("a", 4)]
        with pytest.raises(sqlite3.IntegrityError, match="UNIQUE"):
            conn.execute("INSERT INTO events VALUES ('a', 2, '{}')")
    finally:
        conn.close()


async def test_newer_schema_version_is_refused(tmp_path: Path) -> None:
    """G-7: a database written by a newer build is refused at open, naming both versions."""
    path = tmp_path / "s.db"
    await store_with(path, "a", 1)
    execute(path, "UPDATE schema_version SET version = ?", SCHEMA_VERSION + 5)
    with pytest.raises(SessionStorageError, match=rf"schema version {SCHEMA_VERSION + 5} is newer"):
        await Runtime.open(store=f"sqlite:///{path}")


async def test_unreadable_schema_version_is_corrupt(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    await store_with(path, "a", 1)
    execute(path, "UPDATE schema_version SET version = 'two'")
    with pytest.raises(SessionCorruptError, match="schema_version must hold one integer"):
        SqliteStore(path)
    execute(path, "DROP TABLE schema_version")
    with pytest.raises(SessionCorruptError, match="schema_version is missing"):
        SqliteStore(path)


async def test_a_file_that_is_not_a_database_is_corrupt(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    path.write_bytes(b"this is not a database " * 500)
    with pytest.raises(SessionCorruptError, match=r"s\.db.*corrupt"):
        await Runtime.open(store=f"sqlite:///{path}")


async def test_a_truncated_database_is_corrupt(tmp_path: Path) -> None:
    """A database file cut in half is reported as corrupt (at open or at load), naming
    the file — never loaded as a silently shorter log."""
    path = tmp_path / "s.db"
    await store_with(path, "a", 3000)
    size = path.stat().st_size
    with path.open("r+b") as file:
        file.truncate(size // 2)
    with pytest.raises(SessionCorruptError, match=r"s\.db.*malformed"):
        await load(path, "a")


# --- corrupt logs -------------------------------------------------------------------------


async def test_seq_gap_is_corrupt(tmp_path: Path) -> None:
    """G-1: a log with a missing seq is refused, naming the session, file and seq."""
    path = tmp_path / "s.db"
    await store_with(path, "a", 5)
    execute(path, "DELETE FROM events WHERE session_id = 'a' AND seq = 3")
    with pytest.raises(SessionCorruptError, match=r"session 'a' in .*s\.db: seq 3 is missing"):
        await load(path, "a")


async def test_unknown_required_event_type_is_corrupt(tmp_path: Path) -> None:
    """G-7: an unknown required type makes the log unreadable; an ignorable one is kept."""
    path = tmp_path / "s.db"
    await store_with(path, "a", 3)
    body = {"seq": 2, "time": 1, "type": "plugin/thing", "data": {"k": 1}}
    execute(path, "UPDATE events SET body = ? WHERE seq = 2", json.dumps(body))
    with pytest.raises(SessionCorruptError, match=r"seq 2: unknown required event type"):
        await load(path, "a")
    body["ignorable"] = True
    execute(path, "UPDATE events SET body = ? WHERE seq = 2", json.dumps(body))
    events = await load(path, "a")
    assert [e.type for e in events] == ["turn/start", "plugin/thing", "turn/start"]


async def test_torn_json_is_corrupt(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    await store_with(path, "a", 3)
    execute(path, 'UPDATE events SET body = \'{"seq": 2, "ti\' WHERE seq = 2')
    with pytest.raises(SessionCorruptError, match="seq 2 is not JSON"):
        await load(path, "a")
    execute(path, "UPDATE events SET body = ? WHERE seq = 2", json.dumps(turn(7).to_json()))
    with pytest.raises(SessionCorruptError, match="stored at seq 2 says seq 7"):
        await load(path, "a")


async def test_events_without_a_header_are_corrupt(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    await store_with(path, "a", 2)
    execute(path, "DELETE FROM sessions WHERE id = 'a'")
    with pytest.raises(SessionCorruptError, match="without a session header"):
        await load(path, "a")


async def test_resume_of_a_corrupt_log_changes_nothing(tmp_path: Path) -> None:
    """C7.2-6: restore_or_create raises the corrupt error and leaves the rows as they were."""
    path = tmp_path / "s.db"
    await store_with(path, "a", 4)
    execute(path, "DELETE FROM events WHERE seq = 2")
    before = sqlite3.connect(path).execute("SELECT * FROM events ORDER BY seq").fetchall()
    rt = await Runtime.open(store=f"sqlite:///{path}")
    with pytest.raises(SessionCorruptError, match="seq 2 is missing"):
        await rt.agents.restore_or_create(session_id="a", agent_options=OPTIONS)
    await rt.close()
    after = sqlite3.connect(path).execute("SELECT * FROM events ORDER BY seq").fetchall()
    assert after == before


# --- storage failures ---------------------------------------------------------------------


async def test_read_only_database_is_a_storage_error(tmp_path: Path) -> None:
    """A database that refuses writes is reported at open (the schema check writes)."""
    path = tmp_path / "s.db"
    with pytest.raises(SessionStorageError, match=r"s\.db.*readonly"):
        SqliteStore(path, pragmas={"query_only": 1})
    await store_with(path, "a", 1)
    with pytest.raises(SessionStorageError, match="readonly"):
        SqliteStore(path, pragmas={"query_only": 1})
    assert len(await load(path, "a")) == 1


async def test_missing_directory_is_a_storage_error(tmp_path: Path) -> None:
    with pytest.raises(SessionStorageError, match="cannot create"):
        SqliteStore(tmp_path / "no" / "such" / "dir.db")


async def test_disk_full_fails_at_flush_and_keeps_every_acknowledged_event(
    tmp_path: Path,
) -> None:
    """G-1: when the file cannot grow, the next ``flush()`` raises SessionStorageError,
    every later write raises too, ``close()`` surfaces it, and the stored log is exactly
    the acknowledged prefix (flushed events are never lost)."""
    path = tmp_path / "s.db"
    store = SqliteStore(path, pragmas={"max_page_count": 16})
    writer = await store.open_writer("a")
    writer.publish()
    acknowledged = 0
    with pytest.raises(SessionStorageError, match=r"database or disk is full") as failure:
        for seq in range(1, 200):
            writer.write(blob(seq))
            await writer.flush()
            acknowledged = seq
    assert acknowledged > 0
    assert f"from seq {acknowledged + 1} on are not stored" in str(failure.value)
    with pytest.raises(SessionStorageError, match="disk is full"):
        writer.write(blob(acknowledged + 2))
    with pytest.raises(SessionStorageError, match="disk is full"):
        await writer.close()
    other = await store.open_writer("b")  # the lease was released; other sessions still work
    other.write(turn(1))
    other.publish()
    await other.close()
    await store.close()
    events = await load(path, "a")
    assert [e.seq for e in events] == list(range(1, acknowledged + 1))
    assert [e.seq for e in await load(path, "b")] == [1]


async def test_a_failure_of_one_session_spares_the_others(tmp_path: Path) -> None:
    """A failed group is retried per session: only the session whose write failed fails."""
    path = tmp_path / "s.db"
    store = SqliteStore(path, pragmas={"max_page_count": 16})
    small, big = await store.open_writer("small"), await store.open_writer("big")
    small.publish()
    big.publish()
    await small.flush()
    await big.flush()
    small.write(turn(1))
    big.write(blob(1, size=200_000))  # can never fit
    small.write(turn(2))
    with pytest.raises(SessionStorageError, match=r"session 'big'.*disk is full"):
        await big.flush()
    await small.flush()
    await small.close()
    with pytest.raises(SessionStorageError):
        await big.close()
    assert [e.seq for e in await store.load("small")] == [1, 2]
    assert await store.load("big") == ()
    await store.close()


async def test_agent_stops_taking_work_when_its_log_cannot_be_written(tmp_path: Path) -> None:
    """G-1: once the store fails under a running agent, the failing turn ends (in error,
    reported through ``agent/error``), sends raise SessionStorageError instead of running
    ahead of the log, and dispose surfaces the failure. The stored log is a valid prefix of
    the live one holding every acknowledged event; a resume repairs it and works on."""
    path = tmp_path / "s.db"
    store = SqliteStore(path, pragmas={"max_page_count": 24})
    try:
        rt = await Runtime.open(store=store)
        try:
            h = Harness(rt)
            errors: list[Any] = []
            rt.hooks.on("agent/error", errors.append)
            handle = await rt.agents.create(session_id="s-1", agent_options=OPTIONS)
            agent = handle.agent
            acknowledged = 0
            failed: SessionStorageError | None = None
            for n in range(60):
                h.adapter.add(text_response(f"answer {n} " + "y" * 3000))
                try:
                    agent.followup(user_message(f"u{n}"))
                    await settle(agent)
                    await agent.session.flush()
                except SessionStorageError as exc:
                    failed = exc
                    break
                acknowledged = len(agent.session.events)
            assert failed is not None and "disk is full" in str(failed)
            assert acknowledged > 0
            await settle(agent)
            with pytest.raises(SessionStorageError, match="takes no more writes"):
                agent.followup(user_message("more"))
            with pytest.raises(SessionStorageError, match="takes no more writes"):
                await agent.session.flush()
            live = list(agent.session.events)
            assert all(is_storage_failure(p.error) for p in errors)
            with pytest.raises(SessionStorageError, match="takes no more writes"):
                await handle.dispose()
        finally:
            await rt.close()
    finally:
        await store.close()

    stored = await load(path, "s-1")
    assert len(stored) >= acknowledged
    assert list(stored) == live[: len(stored)]

    async with await Runtime.open(store=f"sqlite:///{path}") as rt2:
        h2 = Harness(rt2)
        h2.adapter.add(text_response("back"))
        handle = await rt2.agents.resume(resume_session_id="s-1", agent_options=OPTIONS)
        handle.agent.followup(user_message("again"))
        await settle(handle.agent)
        assert handle.agent.session.events[-1].type == "turn/end"
        assert handle.agent.session.events[-1].data.reason.kind == "completed"
        assert_well_formed(handle.agent.session)


async def test_a_write_failure_mid_turn_fails_the_turn(tmp_path: Path) -> None:
    """G-1: a model answer too large for the disk fails its group; the fence before the
    exclusive tool raises, so its body never starts (write-ahead intent), the next append
    raises, and the turn ends in error (``agent/error`` carries the SessionStorageError)
    with nothing more appended. A resume repairs the stored prefix (C7.2-9) and the next
    turn completes."""
    path = tmp_path / "s.db"
    store = SqliteStore(path, pragmas={"max_page_count": 24})
    try:
        rt = await Runtime.open(store=store)
        try:
            h = Harness(rt)
            errors: list[Any] = []
            rt.hooks.on("agent/error", errors.append)
            seen: list[BaseException] = []

            async def body(args: Any, exec: Any) -> str:
                try:
                    await agent.session.flush()
                except SessionStorageError as exc:
                    seen.append(exc)
                return "done"

            rt.tools.register(Bench().tool("t", then=body))
            handle = await rt.agents.create(session_id="s-1", agent_options=OPTIONS)
            agent = handle.agent
            h.adapter.add(text_response("small"))
            agent.followup(user_message("u0"))
            await settle(agent)
            await agent.session.flush()
            acknowledged = list(agent.session.events)
            h.adapter.add(tool_calls_response([("c1", "t", {"pad": "z" * 200_000})]))
            agent.followup(user_message("u1"))
            await settle(agent)
            assert seen == []  # the body never ran: its intent could not be made durable
            assert errors and all(is_storage_failure(p.error) for p in errors)
            assert any("disk is full" in str(p.error) for p in errors)
            live = list(agent.session.events)
            assert live[-1].type == "tool/call"  # the tool/result append raised: nothing after it
            with pytest.raises(SessionStorageError):
                agent.followup(user_message("u2"))
            assert list(agent.session.events) == live
            with pytest.raises(SessionStorageError):
                await handle.dispose()
        finally:
            await rt.close()
    finally:
        await store.close()

    stored = await load(path, "s-1")
    assert list(stored[: len(acknowledged)]) == acknowledged
    assert list(stored) == live[: len(stored)]
    assert all(e.type != "assistant/message" for e in stored[len(acknowledged) :])
    async with await Runtime.open(store=f"sqlite:///{path}") as rt2:
        h2 = Harness(rt2)
        h2.adapter.add(text_response("back"))
        resumed = await rt2.agents.resume(resume_session_id="s-1", agent_options=OPTIONS)
        added = resumed.agent.session.events[len(stored) :]
        if len(stored) > len(acknowledged):  # part of turn 2 was committed before the failure
            assert [e.type for e in added][-2:] == ["turn/end", "session/end-seed"]
            assert added[-2].data.reason.kind == "interrupted"
        else:
            assert [e.type for e in added] == ["session/end-seed"]
        assert_well_formed(resumed.agent.session)
        resumed.agent.followup(user_message("again"))
        await settle(resumed.agent)
        assert resumed.agent.session.events[-1].data.reason.kind == "completed"
        assert_well_formed(resumed.agent.session)


# --- the lease ----------------------------------------------------------------------------


async def test_lease_is_held_across_store_objects_and_released_on_close(
    tmp_path: Path,
) -> None:
    """G-2: two stores on one file (two runtimes) cannot write one session at once; the
    conflict names the owner, and the store's close releases leftover leases."""
    path = tmp_path / "s.db"
    first, second = SqliteStore(path), SqliteStore(path)
    writer = await first.open_writer("a")
    with pytest.raises(SessionConflictError, match=rf"pid {os.getpid()}"):
        await second.open_writer("a")
    await first.close()  # without closing the writer
    with pytest.raises(SessionStorageError, match="closed"):
        writer.write(turn(1))
    again = await second.open_writer("a")
    await again.discard()
    await second.close()


async def test_a_writer_closed_while_its_store_closes_releases_its_lease(tmp_path: Path) -> None:
    """G-2: a writer whose close races the store's close (the store already refuses work)
    raises, and still gives its lease back: another store can take the session."""
    path = tmp_path / "s.db"
    store = SqliteStore(path)
    try:
        writer = await store.open_writer("a")
        writer.publish()
        writer.write(turn(1))
        closing = asyncio.ensure_future(store.close())
        while not store._closed:  # the store refuses work from here on; its writers are not
            await asyncio.sleep(0)  # abandoned before its writer thread stops, a turn later
        with pytest.raises(SessionStorageError, match="closed"):
            await writer.close()
        await asyncio.wait_for(closing, SETTLE_TIMEOUT)
    finally:
        await store.close()  # idempotent: what the race left open is closed on a failure
    other = SqliteStore(path)
    try:
        again = await other.open_writer("a")
        await again.discard()
        assert [e.seq for e in await other.load("a")] == [1]
    finally:
        await other.close()


async def test_reads_commit_nothing(tmp_path: Path) -> None:
    """A read waits for what was queued before it (read-your-writes) but is no write: it
    takes no transaction and no fsync of its own; a flush still commits with a sync."""
    store = SqliteStore(tmp_path / "s.db")
    writer = await store.open_writer("a")
    writer.publish()
    writer.write(turn(1))
    await writer.flush()
    commits = store.commits
    for _ in range(3):
        assert await store.exists("a")
        assert [e.seq for e in await store.load("a")] == [1]
        assert (await store.info("a")).events == 1
    assert await store.list() == ("a",)
    assert store.commits == commits
    writer.write(turn(2))
    assert [e.seq for e in await store.load("a")] == [1, 2]  # queued before the read
    assert store.commits == commits + 1
    await writer.close()
    await store.close()


# --- the writer thread's inserts under GIL contention --------------------------------------


class _Spy:
    """A connection proxy that records which insert path each call took. A starved
    ``executemany`` (``slow`` > 0 counts them down; ``starving`` keeps it on) advances the
    fake clock by 2 ms per row: a writer waiting for the GIL after every row."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn
        self.calls: list[tuple[str, int]] = []
        self.now = 0.0
        self.slow = 0
        self.starving = False

    def clock(self) -> float:
        return self.now

    def execute(self, sql: str, params: Any = ()) -> Any:
        kind = "json" if "json_each" in sql else "one"
        self.calls.append((kind, len(json.loads(params[0])) if kind == "json" else 1))
        return self.conn.execute(sql, params)

    def executemany(self, sql: str, rows: Any) -> Any:
        rows = list(rows)
        self.calls.append(("many", len(rows)))
        if self.starving or self.slow:
            self.slow = max(0, self.slow - 1)
            self.now += 2e-3 * len(rows)
        return self.conn.executemany(sql, rows)


def _spy(tmp_path: Path) -> _Spy:
    conn = sqlite3.connect(tmp_path / "i.db", isolation_level=None)
    migrate(conn, str(tmp_path / "i.db"))
    return _Spy(conn)


async def test_inserts_switch_to_one_statement_when_the_writer_starves(tmp_path: Path) -> None:
    """Two ``executemany`` slices in a row that waited for the GIL (slower than SLOW_ROW
    per row) send the rest of the group, and every group for HOLD seconds, as one JSON
    statement; then ``executemany`` is tried again. One slow slice alone (a collector
    pause) changes nothing. Every path stores the same rows exactly."""
    from steerloop.session._sqlite import _Inserter

    spy = _spy(tmp_path)
    inserter = _Inserter(spy.clock)
    tricky = '{"t":"quote \\" backslash \\\\ \\u0000 é 😀"}'
    rows = [("s-1", n, f'{{"n":{n}}}') for n in range(1, 161)] + [("s-2", 1, tricky)]

    inserter.insert(spy, rows[:40])  # type: ignore[arg-type]
    assert spy.calls == [("many", 32), ("many", 8)]

    spy.slow = 1  # one slow slice, then fast again
    inserter.insert(spy, rows[40:80])  # type: ignore[arg-type]
    assert spy.calls[2:] == [("many", 32), ("many", 8)]

    spy.starving = True
    inserter.insert(spy, rows[80:])  # type: ignore[arg-type]
    assert spy.calls[4:] == [("many", 32), ("many", 32), ("json", 17)]

    more = [("s-3", n, f'{{"m":{n}}}') for n in range(1, 51)]
    inserter.insert(spy, more[:10])  # type: ignore[arg-type]
    assert spy.calls[7:] == [("json", 10)]
    spy.starving = False
    spy.now += _Inserter.HOLD
    inserter.insert(spy, more[10:])  # type: ignore[arg-type]
    assert spy.calls[8:] == [("many", 32), ("many", 8)]

    stored = spy.conn.execute(
        "SELECT session_id, seq, body, typeof(seq) FROM events ORDER BY session_id, seq"
    ).fetchall()
    assert [(sid, seq, body) for sid, seq, body, _ in stored] == sorted(rows + more)
    assert {kind for *_, kind in stored} == {"integer"}
    spy.conn.close()


async def test_single_rows_and_nul_ids_skip_the_json_statement(tmp_path: Path) -> None:
    """In single-statement mode a session id holding NUL (which SQLite's JSON functions
    would cut) or a lone surrogate (which they would mangle) still goes through
    ``executemany``, and a single row is a plain insert."""
    from steerloop.session._sqlite import _Inserter

    spy = _spy(tmp_path)
    inserter = _Inserter(spy.clock)
    spy.starving = True
    inserter.insert(spy, [("a", n, "{}") for n in range(1, 81)])  # type: ignore[arg-type]
    assert spy.calls == [("many", 32), ("many", 32), ("json", 16)]
    nul = [("x\x00y", 1, "{}"), ("x\x00y", 2, "{}")]
    inserter.insert(spy, nul)  # type: ignore[arg-type]
    inserter.insert(spy, [("b", 1, "{}")])  # type: ignore[arg-type]
    assert spy.calls[3:] == [("many", 2), ("one", 1)]
    with pytest.raises(UnicodeEncodeError):  # refused as executemany refuses it, not mangled
        inserter.insert(spy, [("\ud800", 1, "{}"), ("\ud800", 2, "{}")])  # type: ignore[arg-type]
    assert spy.calls[5:] == [("many", 2)]
    assert spy.conn.execute(
        "SELECT seq FROM events WHERE session_id = ? ORDER BY seq", ("x\x00y",)
    ).fetchall() == [(1,), (2,)]
    assert spy.conn.execute("SELECT count(*) FROM events").fetchone() == (83,)
    spy.conn.close()


_json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=10,
)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    ids=st.lists(st.text(min_size=1, max_size=12), min_size=1, max_size=4, unique=True),
    values=st.lists(_json_values, min_size=2, max_size=20),
)
def test_the_json_statement_stores_exactly_what_executemany_would(
    tmp_path_factory: pytest.TempPathFactory, ids: list[str], values: list[Any]
) -> None:
    """Any session ids and any event bodies (JSON text as the stores write it) come out of
    the single-statement path byte for byte as ``executemany`` stores them."""
    from steerloop.session._json import dumps
    from steerloop.session._sqlite import _Inserter

    rows = [(ids[n % len(ids)], n + 1, dumps({"seq": n + 1, "v": v})) for n, v in enumerate(values)]
    stored: list[Any] = []
    for forced in (False, True):
        path = tmp_path_factory.mktemp("ins") / "i.db"
        conn = sqlite3.connect(path, isolation_level=None)
        migrate(conn, str(path))
        inserter = _Inserter()
        if forced:
            inserter._json_until = float("inf")
        try:
            inserter.insert(conn, rows)
        except UnicodeEncodeError:  # a lone surrogate in an id: refused on both paths
            stored.append("refused")
            conn.close()
            continue
        stored.append(
            conn.execute("SELECT session_id, seq, body FROM events ORDER BY rowid").fetchall()
        )
        conn.close()
    assert stored[0] == stored[1]
    if stored[0] != "refused":
        assert sorted(stored[0]) == sorted(rows)
