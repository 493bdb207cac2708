"""The SQLite store's session header: one JSON column (schema v3), the form the PostgreSQL
store keeps, read through the shared codec (``encode_header``/``decode_header``).

A v2 file (a column per header field) migrates on open, and its sessions load and go on.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from steerloop import (
    AgentOptions,
    Runtime,
    SessionCorruptError,
    SessionStorageError,
    user_message,
)
from steerloop.session._sqlite import MIGRATIONS, SCHEMA_VERSION, SqliteStore, migrate
from steerloop.session.store._interface import decode_header, encode_header
from steerloop.testing import text_response

from ..support import Harness, settle

OPTIONS = AgentOptions(provider="mock", model="m")
ORIGIN = {"kind": "spawn", "call_id": "c-1", "note": None, "path": [1, {"z": None}]}


def rows_of(path: Path, sql: str) -> list[tuple[object, ...]]:
    conn = sqlite3.connect(path)
    try:
        return conn.execute(sql).fetchall()
    finally:
        conn.close()


async def events_of_a_real_session(path: Path) -> list[tuple[object, ...]]:
    """The stored event rows of one finished turn of session ``s-1``."""
    rt = await Runtime.open(store=SqliteStore(path), clock=lambda: 1000)
    try:
        h = Harness(rt)
        agent = await h.agent(text_response("first answer"))
        agent.followup(user_message("hello"))
        await settle(agent)
    finally:
        await rt.close()
    return rows_of(path, "SELECT session_id, seq, body FROM events ORDER BY seq")


def write_v2_file(path: Path, events: list[tuple[object, ...]], origin: str) -> None:
    """A file at schema v2, with header rows as the v2 store wrote them (8 columns)."""
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        assert migrate(conn, str(path), MIGRATIONS[:2]) == 0
        conn.execute("INSERT INTO sessions VALUES ('s-1', 1, 1000, NULL, NULL, 0, NULL, NULL)")
        conn.execute(
            "INSERT INTO sessions VALUES ('child', 1, 2000, '/repo', 's-1', 1, ?, 2)", (origin,)
        )
        conn.executemany("INSERT INTO events VALUES (?, ?, ?)", events)
        conn.executemany(
            "INSERT INTO events VALUES ('child', ?, ?)", [(seq, body) for _, seq, body in events]
        )
    finally:
        conn.close()


async def test_a_v2_file_migrates_to_one_json_header_and_its_sessions_go_on(
    tmp_path: Path,
) -> None:
    """Opening a v2 file moves every header into one JSON object (NULL fields left out,
    ``origin`` kept as the JSON it was, nested nulls included); the sessions load with the
    same headers and events, and a resumed one runs its next turn."""
    events = await events_of_a_real_session(tmp_path / "source.db")
    path = tmp_path / "v2.db"
    write_v2_file(path, events, json.dumps(ORIGIN))

    store = SqliteStore(path)
    try:
        assert await store.load_header("s-1") == {
            "version": 1, "id": "s-1", "created_at": 1000, "is_seeded": False
        }  # fmt: skip
        assert await store.load_header("child") == {
            "version": 1, "id": "child", "created_at": 2000, "is_seeded": True,
            "cwd": "/repo", "parent_session": "s-1", "origin": ORIGIN, "delegation_depth": 2,
        }  # fmt: skip
        loaded = await store.load("s-1")
        assert [json.loads(str(body)) for _, _, body in events] == [e.to_json() for e in loaded]
        assert (await store.info("child")).events == len(events)
        assert await store.list() == ("child", "s-1")
    finally:
        await store.close()

    assert rows_of(path, "SELECT version FROM schema_version") == [(SCHEMA_VERSION,)]
    columns = [row[1] for row in rows_of(path, "PRAGMA table_info(sessions)")]
    assert columns == ["id", "header"]

    rt = await Runtime.open(store=SqliteStore(path), clock=lambda: 3000)
    try:
        h = Harness(rt)
        h.adapter.add(text_response("second answer"))
        handle = await rt.agents.resume(resume_session_id="s-1", agent_options=OPTIONS)
        result = await handle.agent.run("again")
        assert (result.kind, result.text) == ("completed", "second answer")
        types = [e.type for e in handle.agent.session.events]
    finally:
        await rt.close()
    reloaded = SqliteStore(path)
    try:
        assert [e.type for e in await reloaded.load("s-1")] == types
        assert len(types) > len(events)
    finally:
        await reloaded.close()


async def test_a_v2_header_whose_origin_is_not_json_stops_the_migration_intact(
    tmp_path: Path,
) -> None:
    """A stored origin that is not JSON cannot become part of a JSON header: opening the file
    fails with a storage error naming it, and the migration rolls back (still v2, every row
    as it was), so nothing is lost."""
    events = await events_of_a_real_session(tmp_path / "source.db")
    path = tmp_path / "v2.db"
    write_v2_file(path, events, "{not json")
    before = rows_of(path, "SELECT * FROM sessions ORDER BY id")

    with pytest.raises(SessionStorageError, match=r"version 2 to 3 failed.*malformed JSON"):
        SqliteStore(path)
    assert rows_of(path, "SELECT version FROM schema_version") == [(2,)]
    assert rows_of(path, "SELECT * FROM sessions ORDER BY id") == before
    assert len(rows_of(path, "SELECT * FROM events")) == 2 * len(events)


@pytest.mark.parametrize(
    ("stored", "problem"),
    [
        ("{not json", "is not JSON"),
        ("[1, 2]", "is not a JSON object"),
        ('{"version": 1, "created_at": 1, "is_seeded": false}', "id must be str"),
        ('{"version": true, "id": "s-1", "created_at": 1, "is_seeded": false}', "version"),
        ('{"version": 1, "id": "s-1", "created_at": 1, "is_seeded": 0}', "is_seeded"),
    ],
)
async def test_a_hostile_stored_header_is_reported_as_corrupt(
    tmp_path: Path, stored: str, problem: str
) -> None:
    """A header row that is not a header (hand-edited, damaged) is a SessionCorruptError
    naming the session, from ``load_header`` and ``info``; the events stay readable."""
    path = tmp_path / "s.db"
    await events_of_a_real_session(path)
    conn = sqlite3.connect(path)
    try:
        conn.execute("UPDATE sessions SET header = ? WHERE id = 's-1'", (stored,))
        conn.commit()
    finally:
        conn.close()
    store = SqliteStore(path)
    try:
        with pytest.raises(SessionCorruptError, match=f"session 's-1'.*{problem}"):
            await store.load_header("s-1")
        with pytest.raises(SessionCorruptError, match=problem):
            await store.info("s-1")
        assert "turn/end" in [e.type for e in await store.load("s-1")]
    finally:
        await store.close()


def test_the_header_codec_round_trips_a_stored_header() -> None:
    """``encode_header`` is compact JSON; ``decode_header`` gives the same mapping back."""
    header = {"version": 1, "id": "s", "created_at": 5, "is_seeded": True, "origin": ORIGIN}
    text = encode_header(header)
    assert text == json.dumps(header, separators=(",", ":"))
    assert decode_header(text, "here") == header
    with pytest.raises(SessionCorruptError, match="here: the stored header is int, not text"):
        decode_header(5, "here")
