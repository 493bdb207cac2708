"""Hostile input and other spellings at the store boundary (issue 11, items 5 and 6).

Real files and the local PostgreSQL: a database reached through another spelling of its
path, stored rows nested far deeper than a parser can recurse, and session ids that are
not valid Unicode.
"""

from __future__ import annotations

import os
import sqlite3
import uuid
from pathlib import Path

import pytest

from steerloop import SessionConflictError, SessionCorruptError, SessionStorageError
from steerloop.session import MemoryStore, SessionEvent
from steerloop.session._events import TurnStart
from steerloop.session._sqlite import SqliteStore

from .backends import POSTGRES_URL, require_postgres


def turn(seq: int) -> SessionEvent:
    return SessionEvent(seq=seq, time=1, type="turn/start", data=TurnStart(turn=seq))


# --- item 5: one lease per database file, however its path is spelled ----------------------


def _spellings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, tuple[str, str]]:
    db = tmp_path / "real" / "s.db"
    db.parent.mkdir()
    (tmp_path / "other").mkdir()
    os.symlink(db, tmp_path / "link.db")
    monkeypatch.chdir(tmp_path / "real")
    return {
        "symlink": (str(db), str(tmp_path / "link.db")),
        "dotdot": (str(db), str(tmp_path / "other" / ".." / "real" / "s.db")),
        "relative": (str(db), "s.db"),
        "double slash": (str(db), str(tmp_path / "real") + "//./s.db"),
    }


@pytest.mark.parametrize("spelling", ["symlink", "dotdot", "relative", "double slash"])
async def test_the_lease_holds_through_every_spelling_of_the_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, spelling: str
) -> None:
    """G-2: a second store opened through another spelling of the same file (a symlink,
    ``..``, a relative path) cannot take a session the first one writes; once the first
    closes, it resumes with every event."""
    first_path, second_path = _spellings(tmp_path, monkeypatch)[spelling]
    first = SqliteStore(first_path)
    writer = await first.open_writer("a")
    writer.publish()
    writer.write(turn(1))
    await writer.flush()
    second = SqliteStore(second_path)
    with pytest.raises(SessionConflictError, match=rf"pid {os.getpid()}"):
        await second.open_writer("a")
    with pytest.raises(SessionConflictError):
        await second.delete("a")
    writer.write(turn(2))
    await writer.close()
    again = await second.open_writer("a")
    assert again.stored_length == 2  # type: ignore[attr-defined]
    await again.discard()
    assert [e.seq for e in await second.load("a")] == [1, 2]
    await first.close()
    await second.close()


async def test_a_hard_linked_database_is_refused(tmp_path: Path) -> None:
    """G-2: a database file with a second hard link is refused with a storage error (two
    names would mean two SQLite journals and two sets of leases): nothing the first store
    wrote is lost, and its writer keeps working."""
    db = tmp_path / "s.db"
    first = SqliteStore(db)
    writer = await first.open_writer("a")
    writer.publish()
    writer.write(turn(1))
    await writer.flush()
    os.link(db, tmp_path / "hard.db")
    for name in ("hard.db", "s.db"):
        with pytest.raises(SessionStorageError, match="2 hard links"):
            SqliteStore(tmp_path / name)
    writer.write(turn(2))
    await writer.close()
    assert [e.seq for e in await first.load("a")] == [1, 2]
    await first.close()


# --- item 6: rows nested deeper than any parser recurses ------------------------------------

_DEEP = 200_000


def _deep_row(seq: int, depth: int) -> str:
    return (
        f'{{"seq":{seq},"time":1,"type":"x/blob","ignorable":true,"data":{{"v":'
        + "[" * depth
        + "]" * depth
        + "}}"
    )


@pytest.mark.parametrize("depth", [1_100, _DEEP])
async def test_a_deeply_nested_row_is_corrupt_in_memory(depth: int) -> None:
    """A stored row nested deeper than the parsers go is ``SessionCorruptError`` naming its
    seq, never ``RecursionError`` (``decode_rows``, the load path of every store)."""
    store = MemoryStore()
    store.put_raw(
        "a", ['{"seq":1,"time":1,"type":"turn/start","data":{"turn":1}}', _deep_row(2, depth)]
    )
    with pytest.raises(SessionCorruptError, match=r"seq 2 .*nested"):
        await store.load("a")
    assert (await store.info("a")).last_time is None  # a listing reads past it


async def test_a_deeply_nested_row_is_corrupt_in_sqlite(tmp_path: Path) -> None:
    """As above, a row planted in a SQLite file by another program."""
    db = tmp_path / "s.db"
    store = SqliteStore(db)
    writer = await store.open_writer("a")
    writer.publish()
    writer.write(turn(1))
    await writer.close()
    conn = sqlite3.connect(db)
    conn.execute(
        "INSERT INTO events (session_id, seq, body) VALUES ('a', 2, ?)", (_deep_row(2, _DEEP),)
    )
    conn.commit()
    conn.close()
    with pytest.raises(SessionCorruptError, match=r"seq 2 .*nested"):
        await store.load("a")
    assert (await store.info("a")).events == 2
    await store.close()


async def test_a_deeply_nested_row_is_corrupt_in_postgres() -> None:
    """As above on PostgreSQL (its ``json`` column refuses 200k levels itself, so the row
    is as deep as the server stores: far past both parsers' limits)."""
    require_postgres()
    import asyncpg

    from steerloop.session._postgres import PostgresStore

    schema = f"steerloop_deep_{uuid.uuid4().hex[:12]}"
    store = PostgresStore(POSTGRES_URL, schema=schema)
    try:
        writer = await store.open_writer("a")
        writer.publish()
        writer.write(turn(1))
        await writer.close()
        conn = await asyncpg.connect(POSTGRES_URL, timeout=5)
        try:
            await conn.execute(
                f'INSERT INTO "{schema}".steerloop_events (session_id, seq, payload) '
                "VALUES ('a', 2, $1::json)",
                _deep_row(2, 3_000),
            )
        finally:
            await conn.close()
        with pytest.raises(SessionCorruptError, match=r"seq 2 .*nested"):
            await store.load("a")
    finally:
        await store.close()
        conn = await asyncpg.connect(POSTGRES_URL, timeout=5)
        try:
            await conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        finally:
            await conn.close()


# --- item 6: session ids that are not valid Unicode ----------------------------------------


async def test_a_lone_surrogate_id_is_a_storage_error_on_sqlite(tmp_path: Path) -> None:
    """Every SQLite entry point refuses an id with a lone surrogate with the store's own
    ``SessionStorageError`` (as PostgreSQL does), never a bare ``UnicodeEncodeError``; the
    store keeps working."""
    store = SqliteStore(tmp_path / "s.db")
    bad = "a\ud800"
    with pytest.raises(SessionStorageError, match="cannot be stored"):
        await store.open_writer(bad)
    for read in (store.load, store.load_header, store.info, store.exists, store.delete):
        with pytest.raises(SessionStorageError, match="cannot be stored"):
            await read(bad)
    writer = await store.open_writer("a")
    writer.publish()
    writer.write(turn(1))
    await writer.close()
    assert [e.seq for e in await store.load("a")] == [1]
    await store.close()
