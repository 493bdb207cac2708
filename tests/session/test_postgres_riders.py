"""The PostgreSQL writer's riders (``attach``) and the lease's ``owner_key``: a statement
attached to an event commits in the fenced transaction of that event's batch (the service
marks a command consumed this way, SERVICE.md §3.4)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import pytest

from steerloop import SessionConflictError, SessionStorageError
from steerloop.session import SessionEvent
from steerloop.session._events import TurnStart
from steerloop.session._postgres import PostgresStore

from .backends import POSTGRES_URL, scratch_schema

pytestmark = pytest.mark.timeout(60)


def turn(seq: int, n: int) -> SessionEvent:
    return SessionEvent(seq=seq, time=1, type="turn/start", data=TurnStart(turn=n))


@pytest.fixture
async def schema() -> AsyncIterator[str]:
    async for name in scratch_schema():
        yield name


@pytest.fixture
async def stores(schema: str) -> AsyncIterator[Any]:
    opened: list[PostgresStore] = []

    def make(**options: Any) -> PostgresStore:
        store = PostgresStore(POSTGRES_URL, schema=schema, **options)
        opened.append(store)
        return store

    yield make
    for store in opened:
        with contextlib.suppress(SessionConflictError, SessionStorageError, ExceptionGroup):
            await store.close()


async def marks(store: PostgresStore) -> list[tuple[str, int]]:
    """The rows of a scratch table the riders write."""
    pool = await store.pool()
    rows = await pool.fetch(f'SELECT tag, seq FROM "{store.schema}".rider_marks ORDER BY seq')
    return [(row["tag"], row["seq"]) for row in rows]


async def scratch(store: PostgresStore) -> str:
    pool = await store.pool()
    table = f'"{store.schema}".rider_marks'
    await pool.execute(f"CREATE TABLE {table} (tag text NOT NULL, seq bigint NOT NULL)")
    return f"INSERT INTO {table} (tag, seq) VALUES ($1, $2)"


async def test_a_rider_commits_with_its_event(stores: Any) -> None:
    """A statement attached to a written event commits with it, in order, also when the
    event was still buffered before ``publish``; the lease records the store's owner_key."""
    store = stores(owner_key=4242)
    insert = await scratch(store)
    writer = await store.open_writer("s")
    writer.write(turn(1, 1))
    writer.attach(1, insert, "before-publish", 1)
    writer.publish()
    writer.write(turn(2, 2))
    writer.attach(2, insert, "published", 2)
    await writer.flush()
    assert await marks(store) == [("before-publish", 1), ("published", 2)]
    assert [e.seq for e in await store.load("s")] == [1, 2]
    pool = await store.pool()
    assert (
        await pool.fetchval(f"SELECT owner_key FROM {store.tables.leases} WHERE session_id = 's'")
        == 4242
    )
    # Only an event written and not yet taken by a batch can carry a statement.
    for seq in (1, 2, 3, "2"):
        with pytest.raises(ValueError, match="cannot attach"):
            writer.attach(seq, insert, "late", 9)
    await writer.close()
    assert await marks(store) == [("before-publish", 1), ("published", 2)]


async def test_a_fenced_out_batch_loses_the_event_and_its_rider(stores: Any) -> None:
    """G-2 with riders: once another host took the lease, the old owner's batch is refused
    by the fence, and its attached statement is not run either."""
    a, b = stores(), stores()
    insert = await scratch(a)
    writer = await a.open_writer("s")
    writer.publish()
    writer.write(turn(1, 1))
    writer.attach(1, insert, "old-owner", 1)
    await writer.flush()
    assert await b.revoke_lease("s")
    writer.write(turn(2, 2))
    writer.attach(2, insert, "stale", 2)
    with pytest.raises(SessionConflictError):
        await writer.flush()
    assert await marks(a) == [("old-owner", 1)]
    assert [e.seq for e in await b.load("s")] == [1]
    taker = await b.open_writer("s")
    taker.publish()
    taker.write(turn(2, 2))
    taker.attach(2, insert, "new-owner", 2)
    await taker.flush()
    assert await marks(a) == [("old-owner", 1), ("new-owner", 2)]
    await taker.close()


async def test_a_failing_rider_fails_its_writer_not_the_batch(stores: Any) -> None:
    """A rider that errors rolls back to its savepoint: its writer's events of that batch
    are not stored and the writer fails for good; another session in the same batch
    commits."""
    store = stores()
    insert = await scratch(store)
    good, bad = await store.open_writer("good"), await store.open_writer("bad")
    good.publish()
    bad.publish()
    good.write(turn(1, 1))
    good.attach(1, insert, "good", 1)
    bad.write(turn(1, 1))
    bad.attach(1, f'SELECT * FROM "{store.schema}".no_such_table')
    await good.flush()
    with pytest.raises(SessionStorageError, match="attached to seq 1"):
        await bad.flush()
    with pytest.raises(SessionStorageError):
        bad.write(turn(2, 2))
    assert await marks(store) == [("good", 1)]
    assert [e.seq for e in await store.load("good")] == [1]
    assert not await store.exists("bad")  # nothing of its batch, not even its header
    await good.close()


@pytest.mark.parametrize("tool_honours_abort", [True, False])
async def test_a_fenced_out_agent_is_disposed_and_the_runtime_resumes_it(
    stores: Any, tool_honours_abort: bool
) -> None:
    """An agent whose lease was revoked while a tool ran, with a message pending, cannot
    write its teardown. Its cancel still aborts the turn (clearing the inbox is refused, the
    abort happens anyway), so a dispose without a timeout ends; with a tool that ignores the
    abort, a dispose with a timeout ends. Either way the agent is unregistered (raising the
    conflict) and the same runtime resumes the session under a new lease, as a service
    worker does after a fence."""
    import asyncio

    from steerloop import AgentOptions, Runtime, define_tool, user_message
    from steerloop.testing import ScriptedAdapter, text_response, tool_call_response

    store, other = stores(), stores()
    rt = await Runtime.open(store=store)
    entered, released = asyncio.Event(), asyncio.Event()

    async def hold(args: Any, exec: Any) -> str:
        entered.set()
        await (exec.signal.wait() if tool_honours_abort else released.wait())
        return "held"

    rt.llm.register_adapter(
        ["mock"],
        ScriptedAdapter([tool_call_response("c1", "hold", {}), text_response("again")]),
    )
    rt.tools.register(
        define_tool(
            name="hold",
            description="holds",
            parameters={"type": "object", "properties": {}},
            execute=hold,
        )
    )
    options = AgentOptions(provider="mock", model="m")
    try:
        handle = await rt.agents.create(session_id="s", agent_options=options)
        handle.agent.followup(user_message("go"))
        await asyncio.wait_for(entered.wait(), 10)
        await handle.agent.session.flush()  # the tool call is stored
        assert await other.revoke_lease("s")
        with pytest.raises(SessionConflictError):
            handle.agent.steer(user_message("late"))  # pending; its batch is refused
            await store.writer("s").flush()
        timeout = None if tool_honours_abort else 0.5
        with pytest.raises((SessionConflictError, ExceptionGroup)):
            await asyncio.wait_for(handle.dispose(timeout=timeout), 10)
        resumed = await rt.agents.resume(resume_session_id="s", agent_options=options)
        types = [e.type for e in resumed.agent.session.events]
        assert types[-4:] == ["tool/result", "step/end", "turn/end", "session/end-seed"]
        assert (await store.lease("s")).token == 3
        await resumed.dispose()
    finally:
        released.set()  # the stray tool of the second case ends
        await rt.close()
