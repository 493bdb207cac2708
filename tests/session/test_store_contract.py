"""The store contract, run against every backend of ``backends.STORE_BACKENDS``.

Each test gets a ``backend``; ``backend.open()`` is a new handle on the same storage (for
SQLite a second ``SqliteStore`` on the file, standing for another runtime or process).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from steerloop import (
    AgentOptions,
    Runtime,
    SessionConflictError,
    SessionPersistenceNotFoundError,
    SessionStorageError,
    user_message,
)
from steerloop.session import Session, SessionEvent, SessionStore
from steerloop.session._events import TurnStart
from steerloop.testing import text_response, tool_calls_response

from ..conftest import SETTLE_TIMEOUT, Harness, compact, settle
from ..logcheck import assert_well_formed
from ..support import Bench
from .backends import STORE_BACKENDS, Backend

OPTIONS = AgentOptions(provider="mock", model="m")


@pytest.fixture(params=sorted(STORE_BACKENDS))
async def backend(request: pytest.FixtureRequest, tmp_path: Any) -> AsyncIterator[Backend]:
    made = STORE_BACKENDS[request.param](tmp_path)
    try:
        yield made
    finally:
        await asyncio.wait_for(made.close(), SETTLE_TIMEOUT)


async def harness_on(store: SessionStore) -> Harness:
    rt = await Runtime.open(store=store)
    h = Harness(rt)
    h.rt.tools.register(Bench().tool("t"))
    return h


async def close(h: Harness) -> None:
    await asyncio.wait_for(h.rt.close(), SETTLE_TIMEOUT)


def turn(seq: int, n: int) -> SessionEvent:
    return SessionEvent(seq=seq, time=1, type="turn/start", data=TurnStart(turn=n))


async def tool_run(h: Harness, session_id: str = "s-1") -> Any:
    """One finished turn with two tool calls, then a second plain turn."""
    agent = await h.agent(
        tool_calls_response([("c1", "t", {}), ("c2", "t", {})]),
        text_response("after tools"),
        text_response("second"),
        session_id=session_id,
    )
    agent.followup(user_message("u1"))
    await settle(agent)
    agent.followup(user_message("u2"))
    await settle(agent)
    return agent


# --- round trip ---------------------------------------------------------------------------


async def test_append_load_round_trip(backend: Backend) -> None:
    """G-7: a disposed session loads back (from another handle) event for event, and a
    Session seeded with it derives the same messages as the live one."""
    h = await harness_on(backend.open())
    agent = await tool_run(h)
    live = list(agent.session.events)
    live_messages = agent.session.derive_messages()
    await close(h)
    loaded = await backend.open().load("s-1")
    assert list(loaded) == live
    replay = Session._create("s-1", seed=loaded, repair=False)
    assert replay.derive_messages() == live_messages
    assert_well_formed(replay)


async def test_flushed_events_are_visible_to_another_handle(backend: Backend) -> None:
    """G-1: after ``await session.flush()`` every appended event is stored."""
    h = await harness_on(backend.open())
    agent = await tool_run(h)
    await agent.session.flush()
    assert list(await backend.open().load("s-1")) == list(agent.session.events)
    await close(h)


async def test_writer_round_trip_and_seq_checks(backend: Backend) -> None:
    """Writes reach the store in seq order; a wrong seq or a write after close is refused."""
    store = backend.open()
    writer = await store.open_writer("a")
    with pytest.raises(SessionStorageError, match="expected 1"):
        writer.write(turn(2, 1))
    writer.write(turn(1, 1))
    writer.publish()
    writer.write(turn(2, 2))
    await writer.flush()
    assert await store.load("a") == (turn(1, 1), turn(2, 2))
    await writer.close()
    with pytest.raises(SessionStorageError, match="closed"):
        writer.write(turn(3, 3))


# --- list / delete / exists ---------------------------------------------------------------


async def test_list_exists_delete(backend: Backend) -> None:
    """Stored ids are listed sorted; delete removes one; missing ids are not found."""
    store = backend.open()
    for session_id in ("b", "a", "c"):
        writer = await store.open_writer(session_id)
        writer.write(turn(1, 1))
        writer.publish()
        await writer.close()
    assert await store.list() == ("a", "b", "c")
    assert await store.exists("b")
    with pytest.raises(SessionConflictError, match="already stored"):
        await store.check_absent("b")
    await store.delete("b")
    assert not await store.exists("b")
    await store.check_absent("b")
    assert await backend.open().list() == ("a", "c")
    with pytest.raises(SessionPersistenceNotFoundError, match="'b'"):
        await store.load("b")
    with pytest.raises(SessionPersistenceNotFoundError):
        await store.delete("b")
    assert not await store.exists("nope")


# --- the write lease ----------------------------------------------------------------------


async def test_second_writer_conflicts_at_open(backend: Backend) -> None:
    """G-2: a second writer for a session — same handle or another one — gets
    SessionConflictError at open time, and delete refuses a session with a writer."""
    first, second = backend.open(), backend.open()
    writer = await first.open_writer("a")
    writer.write(turn(1, 1))
    writer.publish()
    for store in (first, second):
        with pytest.raises(SessionConflictError):
            await store.open_writer("a")
        with pytest.raises(SessionConflictError):
            await store.delete("a")
    await writer.close()
    again = await second.open_writer("a")  # released with the close
    again.write(turn(2, 2))
    again.publish()
    await again.close()
    assert await first.load("a") == (turn(1, 1), turn(2, 2))


async def test_resume_while_another_runtime_writes(backend: Backend) -> None:
    """C7.2-10, G-2: resuming a session live in another runtime raises
    SessionConflictError and appends nothing to the live log."""
    h1 = await harness_on(backend.open())
    agent = await tool_run(h1)
    await agent.session.flush()
    before = list(agent.session.events)
    h2 = await harness_on(backend.open())
    with pytest.raises(SessionConflictError):
        await h2.rt.agents.resume(resume_session_id="s-1", agent_options=OPTIONS)
    await close(h2)
    assert list(agent.session.events) == before
    await close(h1)
    assert list(await backend.open().load("s-1")) == before


# --- publication --------------------------------------------------------------------------


async def test_nothing_is_stored_before_publish_and_discard_leaves_nothing(
    backend: Backend,
) -> None:
    """C7.2-19: a writer stores nothing before ``publish``; ``discard`` and closing an
    unpublished writer leave no artifact and release the lease."""
    store = backend.open()
    writer = await store.open_writer("a")
    writer.write(turn(1, 1))
    await writer.flush()
    assert not await store.exists("a")
    assert not await backend.open().exists("a")
    await writer.discard()
    assert not await store.exists("a")
    again = await store.open_writer("a")
    again.write(turn(1, 1))
    await again.close()
    assert not await store.exists("a")
    assert await store.list() == ()
    last = await backend.open().open_writer("a")
    await last.discard()


async def test_publish_stores_buffered_events_in_order(backend: Backend) -> None:
    """C7.2-19: events written before publication are stored at publication, first."""
    store = backend.open()
    writer = await store.open_writer("a")
    writer.write(turn(1, 1))
    writer.write(turn(2, 2))
    writer.publish()
    writer.write(turn(3, 3))
    await writer.close()
    assert [e.seq for e in await backend.open().load("a")] == [1, 2, 3]


async def test_failed_creation_leaves_no_artifact(backend: Backend) -> None:
    """C7.2-16, C7.2-19: a creation rolled back by an ``agent/created`` listener stores
    nothing, not even the events its setup appended."""
    h = await harness_on(backend.open())

    def boom(payload: Any) -> None:
        raise RuntimeError("veto")

    h.rt.hooks.on("agent/created", boom)
    with pytest.raises(RuntimeError, match="veto"):
        await h.agent(session_id="s-1", setup=lambda scope: scope.agent.inject(user_message("ctx")))
    assert not await backend.open().exists("s-1")
    await close(h)
    assert not await backend.open().exists("s-1")


# --- resume -------------------------------------------------------------------------------


async def test_resume_after_close_keeps_every_event(backend: Backend) -> None:
    """C7.2-5, C7.2-12: a closed runtime's session resumes from another handle with every
    event; turns and seqs continue, the first request's header says ``resume``."""
    h1 = await harness_on(backend.open())
    agent = await tool_run(h1)
    before = list(agent.session.events)
    await close(h1)
    h2 = await harness_on(backend.open())
    h2.adapter.add(text_response("third"))
    handle = await h2.rt.agents.restore_or_create(session_id="s-1", agent_options=OPTIONS)
    resumed = handle.agent
    assert list(resumed.session.events[: len(before)]) == before
    assert compact(resumed.session)[len(before) :] == ["session/end-seed"]
    resumed.followup(user_message("u3"))
    await settle(resumed)
    assert compact(resumed.session, only=("T",))[-2:] == ["T+3", "T-3:completed"]
    headers = [e for e in resumed.session.events if e.type == "request/header"]
    assert headers[-1].data.reason == "resume"
    assert_well_formed(resumed.session)
    final = list(resumed.session.events)
    await close(h2)
    assert list(await backend.open().load("s-1")) == final


async def test_header_is_stored_and_comes_back_with_a_resume(backend: Backend) -> None:
    """EVENTS.md §2.7: the header a session was created with (required fields plus the
    optional ones it set) is stored once, read back by ``load_header`` from another handle,
    and restored as ``session.header`` by a resume; a resume's own publication leaves it."""
    h1 = await harness_on(backend.open())

    def setup(scope: Any) -> None:
        header = scope.agent.session.header
        header.update(cwd="/work", parent_session="p-1", delegation_depth=2)
        header["origin"] = {"tool": "spawn_agent", "call_id": "c9"}

    h1.adapter.add(text_response("hi"))
    handle = await h1.rt.agents.create(session_id="s-1", agent_options=OPTIONS, setup=setup)
    handle.agent.followup(user_message("u"))
    await settle(handle.agent)
    await close(h1)

    stored = await backend.open().load_header("s-1")
    created = stored.pop("created_at")
    assert isinstance(created, int) and created > 0
    assert stored == {
        "version": 1,
        "id": "s-1",
        "is_seeded": False,
        "cwd": "/work",
        "parent_session": "p-1",
        "delegation_depth": 2,
        "origin": {"tool": "spawn_agent", "call_id": "c9"},
    }
    with pytest.raises(SessionPersistenceNotFoundError):
        await backend.open().load_header("nope")

    h2 = await harness_on(backend.open())
    resumed = (await h2.rt.agents.resume(resume_session_id="s-1", agent_options=OPTIONS)).agent
    assert resumed.session.header == {**stored, "created_at": created}
    await close(h2)
    assert await backend.open().load_header("s-1") == {**stored, "created_at": created}


@pytest.mark.parametrize(
    ("key", "value"),
    [("origin", {"tool": {1, 2}}), ("delegation_depth", "2"), ("delegation_depth", -1), ("cwd", 7)],
)
async def test_a_header_field_of_the_wrong_kind_stores_nothing(
    backend: Backend, key: str, value: Any
) -> None:
    """EVENTS.md §2.7: every store refuses a header field of the wrong kind alike, at
    publication: the creation fails with ValueError and nothing is stored."""
    h = await harness_on(backend.open())

    def setup(scope: Any) -> None:
        scope.agent.session.header[key] = value

    with pytest.raises(ValueError, match=f"header {key}"):
        await h.rt.agents.create(session_id="s-1", agent_options=OPTIONS, setup=setup)
    assert not await backend.open().exists("s-1")
    assert h.rt.agents.get("s-1") is None
    await close(h)


async def test_info_reads_count_last_time_and_header_without_the_log(backend: Backend) -> None:
    """A listing's summary: event count, time of the last event and the header, equal to
    what a full load gives; an empty stored log has no last time; an unknown id is not
    found."""
    h = await harness_on(backend.open())
    agent = await tool_run(h)
    await agent.session.flush()
    events = list(agent.session.events)
    await close(h)
    store = backend.open()
    info = await store.info("s-1")
    assert (info.session_id, info.events, info.last_time) == ("s-1", len(events), events[-1].time)
    assert info.header == await store.load_header("s-1")
    assert info.header["id"] == "s-1"

    writer = await store.open_writer("empty")
    writer.publish()
    await writer.close()
    empty = await store.info("empty")
    assert (empty.events, empty.last_time, empty.header["id"]) == (0, None, "empty")
    with pytest.raises(SessionPersistenceNotFoundError):
        await store.info("nope")


async def test_a_log_that_grew_between_load_and_lease_is_a_conflict(backend: Backend) -> None:
    """C7.2-6: resume loads, then takes the write lease; if another writer appended in
    between, the seed is stale: ``SessionConflictError``, nothing of the new lifecycle is
    stored, and ``restore_or_create`` raises it too instead of creating."""
    h1 = await harness_on(backend.open())
    await tool_run(h1)
    await close(h1)
    h1 = await harness_on(backend.open())  # now the log ends with session/end-seed, so a
    await h1.rt.agents.resume(resume_session_id="s-1", agent_options=OPTIONS)  # resume
    await close(h1)  # writes nothing at once and only the lease check can see the change
    store = backend.open()
    before = list(await store.load("s-1"))
    assert before[-1].type == "session/end-seed"
    load = store.load

    async def load_then_someone_writes(session_id: str) -> tuple[SessionEvent, ...]:
        events = await load(session_id)
        other = backend.open()
        writer = await other.open_writer(session_id)
        writer.publish()
        writer.write(turn(len(events) + 1, 99))
        await writer.close()
        return events

    store.load = load_then_someone_writes  # type: ignore[method-assign]
    h2 = await harness_on(store)
    with pytest.raises(SessionConflictError, match="changed since it was loaded"):
        await h2.rt.agents.resume(resume_session_id="s-1", agent_options=OPTIONS)
    after = list(await load("s-1"))
    assert after[: len(before)] == before and len(after) == len(before) + 1
    with pytest.raises(SessionConflictError):
        await h2.rt.agents.restore_or_create(session_id="s-1", agent_options=OPTIONS)
    assert h2.rt.agents.get("s-1") is None
    await close(h2)


async def test_restore_or_create_creates_when_absent(backend: Backend) -> None:
    """C7.2-5: only not-found falls back to creating; the created session is stored."""
    h = await harness_on(backend.open())
    h.adapter.add(text_response("hi"))
    handle = await h.rt.agents.restore_or_create(session_id="new", agent_options=OPTIONS)
    handle.agent.followup(user_message("u"))
    await settle(handle.agent)
    await handle.dispose()
    assert await backend.open().exists("new")
    await close(h)


async def test_repair_of_an_unclosed_turn(backend: Backend) -> None:
    """C7.2-9, C7.10-8: a stored log cut right after ``tool/call(c1)`` resumes with
    result(c1, TOOL_OUTCOME_UNKNOWN), result(c2, TOOL_NOT_STARTED), S-1.1,
    T-1:interrupted, end-seed — and the repair is stored."""
    h = await harness_on(backend.open())
    agent = await tool_run(h)
    events = list(agent.session.events)
    cut = next(e.seq for e in events if e.type == "tool/call" and e.data.call_id == "c1")
    writer = await backend.open().open_writer("crashed")
    for event in events[:cut]:
        writer.write(event)
    writer.publish()
    await writer.close()
    h.adapter.add(text_response("after crash"))
    handle = await h.rt.agents.resume(resume_session_id="crashed", agent_options=OPTIONS)
    resumed = handle.agent
    assert compact(resumed.session)[cut - 1 :] == [
        "call(c1)", "result(c1,TOOL_OUTCOME_UNKNOWN)", "result(c2,TOOL_NOT_STARTED)",
        "S-1.1", "T-1:interrupted", "session/end-seed",
    ]  # fmt: skip
    resumed.followup(user_message("next"))
    await settle(resumed)
    assert compact(resumed.session, only=("T",))[-2:] == ["T+2", "T-2:completed"]
    assert_well_formed(resumed.session)
    final = list(resumed.session.events)
    await handle.dispose()
    assert list(await backend.open().load("crashed")) == final
    await close(h)


# --- fork ---------------------------------------------------------------------------------


async def test_fork_stores_a_repaired_child_and_leaves_the_parent(backend: Backend) -> None:
    """C7.10-9: a fork at a seq inside a turn stores the parent's prefix, the repair and
    ``session/end-seed{inherited}``; the parent's stored log is unchanged."""
    h = await harness_on(backend.open())
    agent = await tool_run(h)
    await agent.session.flush()
    parent = list(agent.session.events)
    cut = next(e.seq for e in parent if e.type == "tool/call" and e.data.call_id == "c2")
    child = await h.rt.sessions.fork("s-1", cut, "child")
    other = backend.open()
    stored = list(await other.load("child"))
    assert stored == list(child.events)
    assert stored[:cut] == parent[:cut]
    assert compact(child)[cut:] == [
        "result(c2,TOOL_OUTCOME_UNKNOWN)", "S-1.1", "T-1:interrupted", "session/end-seed",
    ]  # fmt: skip
    assert stored[-1].data.inherited is True
    assert list(await other.load("s-1")) == parent
    h.adapter.add(text_response("child turn"))
    handle = await h.rt.agents.resume(resume_session_id="child", agent_options=OPTIONS)
    handle.agent.followup(user_message("go"))
    await settle(handle.agent)
    assert compact(handle.agent.session, only=("T",))[-2:] == ["T+2", "T-2:completed"]
    await close(h)
