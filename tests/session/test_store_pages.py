"""``SessionStore.load_after``: the stored log read one page at a time by seq, on every
backend of ``backends.STORE_BACKENDS`` (what the service's SSE and log readers use instead of
loading the whole log per page)."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncIterator
from typing import Any

import pytest

from steerloop import SessionCorruptError, SessionPersistenceNotFoundError, SessionStorageError
from steerloop.session import MemoryStore, SessionEvent, SessionStore
from steerloop.session._events import TurnStart
from steerloop.session.store.postgres import PostgresStore

from ..conftest import SETTLE_TIMEOUT
from .backends import STORE_BACKENDS, Backend, PostgresBackend, SqliteBackend


@pytest.fixture(params=sorted(STORE_BACKENDS))
async def backend(request: pytest.FixtureRequest, tmp_path: Any) -> AsyncIterator[Backend]:
    made = STORE_BACKENDS[request.param](tmp_path)
    try:
        yield made
    finally:
        await asyncio.wait_for(made.close(), SETTLE_TIMEOUT)


def turn(seq: int) -> SessionEvent:
    return SessionEvent(seq=seq, time=seq, type="turn/start", data=TurnStart(turn=seq))


async def stored(store: SessionStore, session_id: str, count: int) -> None:
    writer = await store.open_writer(session_id)
    writer.publish()
    for seq in range(1, count + 1):
        writer.write(turn(seq))
    await writer.close()


async def test_pages_follow_the_log_by_seq(backend: Backend) -> None:
    """Each page is the JSON form of the events after the cursor, at most ``limit`` of
    them; past the end it is empty; read from another handle (another process)."""
    await stored(backend.open(), "s", 7)
    reader = backend.open()
    whole = [event.to_json() for event in await reader.load("s")]
    assert list(await reader.load_after("s", 0, 3)) == whole[0:3]
    assert list(await reader.load_after("s", 3, 3)) == whole[3:6]
    assert list(await reader.load_after("s", 6, 3)) == whole[6:7]
    assert await reader.load_after("s", 7, 3) == ()
    assert await reader.load_after("s", 70, 1) == ()
    assert [e["seq"] for e in await reader.load_after("s", 2, 100)] == [3, 4, 5, 6, 7]


async def test_an_unknown_session_or_a_bad_page_is_refused(backend: Backend) -> None:
    """An id with nothing stored is not found (not an empty page); a negative cursor or a
    limit below 1 is a ValueError."""
    store = backend.open()
    await stored(store, "s", 1)
    with pytest.raises(SessionPersistenceNotFoundError, match="'nope'"):
        await store.load_after("nope", 0, 10)
    with pytest.raises(ValueError, match="after"):
        await store.load_after("s", -1, 10)
    with pytest.raises(ValueError, match="limit"):
        await store.load_after("s", 0, 0)


async def corrupt(backend: Backend, store: SessionStore, seq: int, body: str) -> bool:
    """Replace the stored text of event ``seq`` of session ``s`` behind the store's back;
    False when the backend cannot hold such a row at all (PostgreSQL's json column refuses
    text that is not JSON)."""
    if isinstance(backend, SqliteBackend):
        with sqlite3.connect(backend.path) as conn:
            conn.execute(
                "UPDATE events SET body = ? WHERE session_id = 's' AND seq = ?", (body, seq)
            )
        return True
    if isinstance(store, MemoryStore):
        lines = list(store.raw("s"))
        lines[seq - 1] = body
        store.put_raw("s", lines)
        return True
    assert isinstance(backend, PostgresBackend) and isinstance(store, PostgresStore)
    lines = list(await store.raw("s"))
    lines[seq - 1] = body
    try:
        await store.put_raw("s", lines)
    except SessionStorageError as exc:
        assert "invalid input syntax for type json" in str(exc)
        return False
    return True


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ('{"seq": 4, "time": 1, "type": "turn/start"', "seq 4 is not JSON"),
        ('{"seq": 9, "time": 1, "type": "turn/start", "data": {}}', "at seq 4 says seq 9"),
        ("[4]", "at seq 4 says seq"),
    ],
)
async def test_a_malformed_stored_row_names_its_seq(
    backend: Backend, body: str, message: str
) -> None:
    """Hostile stored rows: a page that holds a row which is not JSON, or which says another
    seq, raises SessionCorruptError naming the seq; pages before it still read."""
    store = backend.open()
    await stored(store, "s", 6)
    if not await corrupt(backend, store, 4, body):
        assert message == "seq 4 is not JSON"  # the only row PostgreSQL cannot hold
        return
    reader = backend.open()
    assert [e["seq"] for e in await reader.load_after("s", 0, 3)] == [1, 2, 3]
    with pytest.raises(SessionCorruptError, match=message):
        await reader.load_after("s", 2, 3)
