"""Image and file bytes in every store: stored once by content hash, referenced from events
(rows stay small), durable with the event, loaded when a request needs them, shared by a
fork, collected by a delete; a corrupt or missing blob is the store's corruption error
naming the seq. Run against every backend of ``backends.STORE_BACKENDS``."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncIterator
from typing import Any

import pytest

from steerloop import (
    AgentOptions,
    ImageBlock,
    Runtime,
    SessionCorruptError,
    SessionPersistenceNotFoundError,
    SessionStorageError,
    TextBlock,
    user_message,
)
from steerloop._media import blob_hash
from steerloop.messages import FileBlock, Message
from steerloop.session import MemoryStore, SessionEvent, SessionStore
from steerloop.testing import text_response

from ..media import pdf, png
from ..support import SETTLE_TIMEOUT, Harness, last_reason, settle
from .backends import POSTGRES_URL, STORE_BACKENDS, Backend, PostgresBackend, SqliteBackend

BIG = png(320, 320, noise=True)  # about 300 KB, incompressible
OPTIONS = AgentOptions(provider="mock", model="m")


@pytest.fixture(params=sorted(STORE_BACKENDS))
async def backend(request: pytest.FixtureRequest, tmp_path: Any) -> AsyncIterator[Backend]:
    made = STORE_BACKENDS[request.param](tmp_path)
    try:
        yield made
    finally:
        await asyncio.wait_for(made.close(), SETTLE_TIMEOUT)


async def harness(store: SessionStore) -> Harness:
    return Harness(await Runtime.open(store=store))


async def close(h: Harness) -> None:
    await asyncio.wait_for(h.rt.close(), SETTLE_TIMEOUT)


async def rows(backend: Backend, store: SessionStore, session_id: str) -> list[str]:
    """The stored JSON text of each event of ``session_id``."""
    if isinstance(store, MemoryStore):
        return list(store.raw(session_id))
    if isinstance(backend, SqliteBackend):
        with sqlite3.connect(backend.path) as conn:
            found = conn.execute(
                "SELECT body FROM events WHERE session_id = ? ORDER BY seq", (session_id,)
            ).fetchall()
        return [row[0] for row in found]
    return list(await store.raw(session_id))  # type: ignore[attr-defined]


async def tamper(backend: Backend, store: SessionStore, hash: str, data: bytes | None) -> None:
    """Overwrite the stored bytes of blob ``hash`` (``None``: delete the row)."""
    if isinstance(store, MemoryStore):
        if data is None:
            del store._blobs[hash]
        else:
            store._blobs[hash] = (store._blobs[hash][0], data)
        return
    if isinstance(backend, SqliteBackend):
        with sqlite3.connect(backend.path) as conn:
            if data is None:
                conn.execute("DELETE FROM blobs WHERE hash = ?", (hash,))
            else:
                conn.execute("UPDATE blobs SET data = ? WHERE hash = ?", (data, hash))
        return
    assert isinstance(backend, PostgresBackend)
    import asyncpg

    conn = await asyncpg.connect(POSTGRES_URL)
    try:
        blobs = f'"{backend.schema}".steerloop_blobs'
        refs = f'"{backend.schema}".steerloop_blob_refs'
        if data is None:
            await conn.execute(f"DELETE FROM {refs} WHERE hash = $1", hash)
            await conn.execute(f"DELETE FROM {blobs} WHERE hash = $1", hash)
        else:
            await conn.execute(f"UPDATE {blobs} SET data = $2 WHERE hash = $1", hash, data)
    finally:
        await conn.close()


def sent_images(messages: tuple[Message, ...]) -> list[ImageBlock]:
    return [b for m in messages for b in m.content if isinstance(b, ImageBlock)]


async def write_image_session(backend: Backend, session_id: str = "s-1") -> Any:
    """A finished turn whose user message holds ``BIG``; returns the agent's session."""
    h = await harness(backend.open())
    agent = await h.agent(text_response("a gradient"), session_id=session_id)
    agent.followup(user_message([TextBlock("what is this?"), ImageBlock("image/png", BIG)]))
    await settle(agent)
    assert last_reason(agent).kind == "completed"
    [image] = sent_images(h.adapter.requests[0].messages)
    assert image.data == BIG
    session = agent.session
    await close(h)
    return session


async def resume_and_ask(backend: Backend, session_id: str = "s-1") -> tuple[Harness, Any]:
    h = await harness(backend.open())
    h.adapter.add(text_response("still a gradient"))
    handle = await h.rt.agents.resume(resume_session_id=session_id, agent_options=OPTIONS)
    agent = handle.agent
    agent.followup(user_message("and now?"))
    await settle(agent)
    return h, agent


async def test_rows_stay_small_and_a_fresh_runtime_sends_the_same_bytes(
    backend: Backend,
) -> None:
    """A 300 KB image leaves every events row under 20 KB (the row names the blob); a fresh
    runtime resuming the log loads the bytes for its request: the same bytes go out."""
    session = await write_image_session(backend)
    store = backend.open()
    stored = await rows(backend, store, "s-1")
    assert len(stored) == len(session.events)
    assert max(len(row.encode()) for row in stored) < 20_000
    hash = blob_hash(BIG)
    assert sum(hash in row for row in stored) == 2  # the inbox splice and the user message
    assert await store.blob_exists(hash)
    blob = await store.get_blob(hash, session_id="s-1")
    assert (blob.data, blob.media_type, blob.size) == (BIG, "image/png", len(BIG))

    h, agent = await resume_and_ask(backend)
    assert last_reason(agent).kind == "completed"
    [image] = sent_images(h.adapter.requests[0].messages)
    assert (image.data, image.blob, image.size) == (BIG, hash, len(BIG))
    await close(h)


async def test_a_fork_shares_the_blob_and_deletes_collect_it(backend: Backend) -> None:
    """The child of a fork references the parent's blob (stored once); deleting the parent
    keeps it for the child, deleting the child too collects it."""
    session = await write_image_session(backend)
    h = await harness(backend.open())
    await h.rt.sessions.fork("s-1", len(session.events), "child")
    await close(h)
    store = backend.open()
    hash = blob_hash(BIG)
    await store.delete("s-1")
    assert await store.blob_exists(hash)
    with pytest.raises(SessionPersistenceNotFoundError):
        await store.get_blob(hash, session_id="s-1")

    h, agent = await resume_and_ask(backend, "child")
    assert last_reason(agent).kind == "completed"
    assert [b.data for b in sent_images(h.adapter.requests[0].messages)] == [BIG]
    await close(h)
    await backend.open().delete("child")
    assert not await backend.open().blob_exists(hash)


@pytest.mark.parametrize("damage", ["corrupt", "missing"])
async def test_a_damaged_blob_is_the_stores_corruption_error_naming_the_seq(
    backend: Backend, damage: str
) -> None:
    """A blob row whose bytes no longer hash to its key, or no row at all: the resumed turn
    ends in error with the corruption naming the seq of the message that references it, and
    no request is sent."""
    session = await write_image_session(backend)
    seq = next(e.seq for e in session.events if e.type == "user/message")
    store = backend.open()
    await tamper(
        backend, store, blob_hash(BIG), BIG[:-1] + b"\x00" if damage == "corrupt" else None
    )
    h, agent = await resume_and_ask(backend)
    reason = last_reason(agent)
    assert reason.kind == "error"
    assert reason.error is not None
    assert "SessionCorruptError" in reason.error.message
    assert f"seq {seq} references blob {blob_hash(BIG)}" in reason.error.message
    assert ("missing" if damage == "missing" else "corrupt") in reason.error.message
    assert h.adapter.requests == []
    await close(h)


async def test_blob_api_put_get_exists(backend: Backend) -> None:
    """The package's blob API: ``put_blob`` stores durably and returns the hash; ``get_blob``
    checks it; scoped to a session it serves only what that session references."""
    store = backend.open()
    data = pdf(2)
    hash = await store.put_blob(data, "application/pdf")
    assert hash == blob_hash(data)
    assert await store.blob_exists(hash)
    assert await backend.open().blob_exists(hash)
    blob = await backend.open().get_blob(hash)
    assert (blob.data, blob.media_type) == (data, "application/pdf")
    with pytest.raises(SessionPersistenceNotFoundError):
        await store.get_blob(hash, session_id="nobody")
    with pytest.raises(SessionPersistenceNotFoundError):
        await store.get_blob(blob_hash(b"never stored"))
    with pytest.raises(ValueError, match="not a blob hash"):
        await store.get_blob("sha256:../../etc/passwd")


async def test_a_reference_to_a_blob_the_store_does_not_hold_is_refused(
    backend: Backend,
) -> None:
    """Hostile: an event naming a blob the store never stored (a hand-made or foreign log) is
    not stored: the writer fails loudly rather than keep a log it cannot serve back."""
    store = backend.open()
    writer = await store.open_writer("s-x")
    writer.publish()
    ghost = FileBlock("text/plain", None, "a.txt", blob=blob_hash(b"ghost"), size=5)
    event = SessionEvent(seq=1, time=1, type="user/message", data=user_message([ghost]))
    with pytest.raises(SessionStorageError, match=f"blob {ghost.blob}"):
        writer.write(event)  # the memory store refuses here, before the seq is taken
        await writer.flush()  # a database store fails the writer in the commit
    if isinstance(store, MemoryStore):
        await writer.close()
        assert store.raw("s-x") == ()
        return
    with pytest.raises(SessionStorageError):
        await writer.close()
    assert await rows(backend, backend.open(), "s-x") == []


async def test_a_malformed_stored_reference_is_corruption_naming_the_seq() -> None:
    """Hostile rows: a reference whose hash is not a hash (or that carries bytes inline) is
    refused by the codec, naming the seq."""
    store = MemoryStore()
    good = user_message([ImageBlock("image/png", BIG)])
    event = SessionEvent(seq=1, time=1, type="user/message", data=good).to_json()
    bad = {**event, "data": {**event["data"], "content": [{**event["data"]["content"][0]}]}}
    bad["data"]["content"][0]["blob"] = "sha256:../../etc"
    store.put_raw("s-1", [bad])
    with pytest.raises(SessionCorruptError, match=r"seq 1.*not a blob hash"):
        await store.load("s-1")
    inline = {**event, "data": {**event["data"], "content": [{**event["data"]["content"][0]}]}}
    inline["data"]["content"][0]["data"] = "iVBORw0KGgo="
    store.put_raw("s-1", [inline])
    with pytest.raises(SessionCorruptError, match=r"seq 1.*unknown image block field"):
        await store.load("s-1")
