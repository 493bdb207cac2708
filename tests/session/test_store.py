"""The persistence seam: ``SessionStore``/``MemoryStore`` and what creation stores (C7.2-19)."""

from __future__ import annotations

import json
from typing import Any

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
from steerloop.session import MemoryStore, Session, SessionEvent
from steerloop.session._events import TurnStart
from steerloop.testing import text_response, tool_call_response

from ..conftest import Harness, compact, settle
from ..support import Bench

OPTIONS = AgentOptions(provider="mock", model="m")


def store_of(rt: Runtime) -> MemoryStore:
    store = rt.sessions.persistence
    assert isinstance(store, MemoryStore)
    return store


def turn(seq: int, n: int) -> SessionEvent:
    return SessionEvent(seq=seq, time=1, type="turn/start", data=TurnStart(turn=n))


# --- the store on its own ------------------------------------------------------------------


async def test_memory_store_keeps_json_and_load_decodes_it() -> None:
    """A published writer stores each event's JSON text; ``load`` decodes it back."""
    store = MemoryStore()
    writer = await store.open_writer("a")
    writer.write(turn(1, 1))
    writer.publish()
    writer.write(turn(2, 2))
    await writer.flush()
    assert [json.loads(line)["seq"] for line in store.raw("a")] == [1, 2]
    assert await store.load("a") == (turn(1, 1), turn(2, 2))
    assert await store.exists("a")
    assert await store.list() == ("a",)
    await writer.close()


async def test_memory_store_lookups_of_a_missing_session() -> None:
    """Not found is its own error; ``check_absent`` refuses a stored id."""
    store = MemoryStore()
    with pytest.raises(SessionPersistenceNotFoundError, match="'nope'"):
        await store.load("nope")
    with pytest.raises(SessionPersistenceNotFoundError):
        await store.delete("nope")
    assert not await store.exists("nope")
    await store.check_absent("nope")
    store.put_raw("x", [turn(1, 1).to_json()])
    with pytest.raises(SessionConflictError, match="already stored"):
        await store.check_absent("x")
    await store.delete("x")
    assert await store.list() == ()


async def test_writer_buffers_until_publish_and_discard_leaves_nothing() -> None:
    """C7.2-19: nothing is stored before ``publish``; ``discard`` leaves no artifact."""
    store = MemoryStore()
    writer = await store.open_writer("a")
    writer.write(turn(1, 1))
    assert store.raw("a") == ()
    assert not await store.exists("a")
    await writer.discard()
    assert not await store.exists("a")
    again = await store.open_writer("a")  # the lease was released
    await again.close()
    assert not await store.exists("a")  # closing an unpublished writer stores nothing


async def test_one_writer_per_session() -> None:
    """G-2: a second writer for a session that has one gets SessionConflictError."""
    store = MemoryStore()
    writer = await store.open_writer("a")
    with pytest.raises(SessionConflictError, match="already has a writer"):
        await store.open_writer("a")
    writer.publish()
    with pytest.raises(SessionConflictError):
        await store.delete("a")
    await writer.close()
    await store.open_writer("a")


async def test_publish_refuses_a_log_that_changed_since_open() -> None:
    """A writer opened on a fresh id cannot publish over a log stored meanwhile."""
    store = MemoryStore()
    writer = await store.open_writer("a")
    writer.write(turn(1, 1))
    store._logs["a"] = []  # another process stored the id meanwhile
    with pytest.raises(SessionConflictError, match="changed"):
        writer.publish()


async def test_writes_must_follow_the_stored_log_and_stop_at_close() -> None:
    """Seqs reach the store in order; a write after close is a storage error."""
    store = MemoryStore()
    writer = await store.open_writer("a")
    with pytest.raises(SessionStorageError, match="seq 2, expected 1"):
        writer.write(turn(2, 1))
    writer.write(turn(1, 1))
    writer.publish()
    await writer.close()
    with pytest.raises(SessionStorageError, match="after the writer was closed"):
        writer.write(turn(2, 2))
    with pytest.raises(SessionStorageError, match="writer is closed"):
        writer.publish()


async def test_load_of_unparsable_text_is_corrupt() -> None:
    """Stored text that is not JSON is a corrupt log."""
    store = MemoryStore()
    store.put_raw("a", [json.dumps(turn(1, 1).to_json()), "{not json"])
    with pytest.raises(SessionCorruptError, match="session 'a': seq 2 is not JSON"):
        await store.load("a")


# --- the runtime wiring --------------------------------------------------------------------


async def test_runtime_store_urls() -> None:
    """``store=None`` means no persistence; ``memory://`` a MemoryStore; other URLs this
    build cannot open raise ValueError."""
    plain = await Runtime.open()
    assert plain.sessions.persistence is None
    assert plain.store is None
    await plain.close()
    rt = await Runtime.open(store="memory://")
    assert isinstance(rt.sessions.persistence, MemoryStore)
    await rt.close()
    with pytest.raises(ValueError, match="cannot open store 'bogus://x'"):
        await Runtime.open(store="bogus://x")
    shared = MemoryStore()
    rt2 = await Runtime.open(store=shared)
    assert rt2.sessions.persistence is shared
    await rt2.close()


async def test_created_session_is_stored_and_reloads_equal(hs: Harness) -> None:
    """G-7: after dispose, the stored log loads as exactly the live log, and derives the
    same messages."""
    bench = Bench()
    hs.rt.tools.register(bench.tool("t"))
    agent = await hs.agent(tool_call_response("c1", "t", {"a": 1}), text_response("done"))
    agent.followup(user_message("u1"))
    await settle(agent)
    await agent.session.flush()
    store = store_of(hs.rt)
    loaded = await store.load("s-1")
    assert loaded == tuple(agent.session.events)
    assert Session._create("copy", seed=loaded, repair=False).derive_messages() == (
        agent.session.derive_messages()
    )


async def test_nothing_is_stored_before_publication(hs: Harness) -> None:
    """C7.2-19: with a store, nothing is written for a fresh session until publication
    commits; events appended during setup are stored at publication, before the first live
    event, in seq order."""
    store = store_of(hs.rt)
    seen: dict[str, Any] = {}

    def setup(scope: Any) -> None:
        scope.agent.inject(user_message("c"))
        seen["during setup"] = store.raw("s-1")

    async def on_created(payload: Any) -> None:
        seen["during agent/created"] = store.raw("s-1")

    hs.rt.hooks.on("agent/created", on_created)
    agent = await hs.agent(text_response("r"), setup=setup)
    assert seen == {"during setup": (), "during agent/created": ()}
    assert [json.loads(line)["type"] for line in store.raw("s-1")] == ["agent/inbox/spliced"]
    agent.followup(user_message("u1"))
    await settle(agent)
    await agent.session.flush()
    stored = await store.load("s-1")
    assert stored == tuple(agent.session.events)
    assert compact(agent.session)[:4] == ["ins(ns,c)", "ins(nt,u1)", "T+1", "claim(ns,c)"]


async def test_setup_failure_leaves_no_artifact(hs: Harness) -> None:
    """C7.1-10: if setup raises, nothing is published and, with a store, no artifact remains:
    a following restore_or_create takes the create path."""
    store = store_of(hs.rt)

    def setup(scope: Any) -> None:
        scope.agent.inject(user_message("staged"))
        raise RuntimeError("setup failed")

    with pytest.raises(RuntimeError, match="setup failed"):
        await hs.rt.agents.create(session_id="s-1", agent_options=OPTIONS, setup=setup)
    assert not await store.exists("s-1")
    assert hs.rt.agents.get("s-1") is None
    sources: list[str] = []
    hs.rt.hooks.on("agent/session-start", lambda p: sources.append(p.source))
    handle = await hs.rt.agents.restore_or_create(session_id="s-1", agent_options=OPTIONS)
    assert sources == ["startup"]
    assert list(handle.agent.session.events) == []
    assert handle.agent.inbox.next_step == ()


async def test_commit_callable_failure_leaves_no_artifact(hs: Harness) -> None:
    """C7.1-9 with a store: a raising commit callable stores nothing; the id is free."""
    store = store_of(hs.rt)

    def setup(scope: Any) -> Any:
        scope.agent.inject(user_message("staged"))

        def commit() -> None:
            raise ValueError("veto")

        return commit

    with pytest.raises(ValueError, match="veto"):
        await hs.rt.agents.create(session_id="s-1", agent_options=OPTIONS, setup=setup)
    assert await store.list() == ()
    await hs.rt.agents.create(session_id="s-1", agent_options=OPTIONS)


async def test_created_listener_failure_leaves_no_artifact(hs: Harness) -> None:
    """C7.2-16 with a store: a raising agent/created listener rolls back without leaving a
    stored artifact, even for events appended before it raised."""
    store = store_of(hs.rt)

    def on_created(payload: Any) -> None:
        payload.agent.inject(user_message("early"))
        raise RuntimeError("listener veto")

    dispose = hs.rt.hooks.on("agent/created", on_created)
    with pytest.raises(RuntimeError, match="listener veto"):
        await hs.rt.agents.create(session_id="s-1", agent_options=OPTIONS)
    assert not await store.exists("s-1")
    dispose()
    await hs.rt.agents.create(session_id="s-1", agent_options=OPTIONS)
    assert await store.exists("s-1")


async def test_create_of_a_stored_id_conflicts(hs: Harness) -> None:
    """``create`` never overwrites a stored session: it raises SessionConflictError."""
    store = store_of(hs.rt)
    store.put_raw("s-2", [turn(1, 1).to_json()])
    with pytest.raises(SessionConflictError, match="resume it instead"):
        await hs.rt.agents.create(session_id="s-2", agent_options=OPTIONS)
    assert store.raw("s-2") == (json.dumps(turn(1, 1).to_json(), separators=(",", ":")),)
