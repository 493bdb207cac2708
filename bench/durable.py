"""Durable append throughput and resume time of a long session: SQLite, and PostgreSQL too.

Run: ``python bench/durable.py [--events 100000] [--sessions 16] [--repeats 3] [--dir DIR]
[--postgres URL]``.

Measured in one run, on a fresh database file in ``--dir`` (default: a temporary
directory — put it on the disk you care about):

1. *Group commit.* ``--sessions`` sessions append typed events concurrently through
   ``Session.append`` (validation, encoding, hand-over to the writer thread), each calling
   ``await session.flush()`` after every 10 events (a "turn"); the time runs until every
   event is durable. Reported as events/s and events per commit.
2. *Group commit, every event acknowledged.* The same, but each session flushes after
   every single event, so each event is individually durable before its session goes on.
3. *One commit per event.* One session, ``append`` then ``await flush()`` for every event:
   each event pays its own ``synchronous=FULL`` commit (the design without grouping).
   The ratio (1)/(3) is printed.
4. *Resume.* A 100k-event session written by real agent turns (tool calls and answers) is
   resumed in a fresh runtime and store handle each repeat: ``rt.agents.resume`` =
   load + decode + validate + fold + ``session/end-seed``; ``store.load`` alone is timed
   as well, and one full ``gc.collect()`` after the resume (what the resumed log costs the
   application's next full collection).

Targets: (1) >= 50k events/s; (4) resume of 100k events <= 1 s.

With ``--postgres URL`` the same measurements run on PostgreSQL too, each store in a
throwaway schema that is dropped at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import platform
import sqlite3
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from typing import Any

from steerloop import AgentOptions, Runtime, define_tool, user_message
from steerloop.session import Session
from steerloop.session._events import ToolCallEvent
from steerloop.session._sqlite import SqliteStore
from steerloop.testing import ScriptedAdapter, text_response, tool_calls_response

OPTIONS = AgentOptions(provider="mock", model="m")
ARGUMENTS = '{"path": "src/steerloop/session/_sqlite.py", "pattern": "def ", "limit": 50}' * 3


async def open_session(store: Any, session_id: str) -> Session:
    session = Session._create(session_id, sink=await store.open_writer(session_id))
    session.publish()
    return session


def append(session: Session, n: int) -> None:
    session.append(
        "tool/call",
        ToolCallEvent(turn=1, step=1, call_id=f"c{n}", name="grep", arguments=ARGUMENTS),
    )


async def writer_task(session: Session, events: int, every: int) -> None:
    for n in range(events):
        append(session, n)
        if (n + 1) % every == 0:
            await session.flush()
    await session.flush()


async def throughput(
    make: Callable[[], Any], sessions: int, events: int, every: int
) -> tuple[float, float]:
    """events/s and events per commit for ``sessions`` concurrent writers on ``make()``."""
    store = make()
    opened = [await open_session(store, f"s{i}") for i in range(sessions)]
    for session in opened:
        await session.flush()
    per_session = events // sessions
    commits = store.commits
    start = time.perf_counter()
    await asyncio.gather(*(writer_task(s, per_session, every) for s in opened))
    elapsed = time.perf_counter() - start
    commits = store.commits - commits
    for session in opened:
        await session.close()
    await store.close()
    total = per_session * sessions
    return total / elapsed, total / max(commits, 1)


async def write_long_session(store: Any, target: int) -> int:
    """Real agent turns (two tool calls, then an answer) until ``target`` events."""
    rt = await Runtime.open(store=store)
    adapter = ScriptedAdapter()
    rt.llm.register_adapter(["mock"], adapter)

    async def grep(args: Any, exec: Any) -> str:
        return "src/steerloop/session/_sqlite.py:42: def migrate(conn, where, migrations)"

    rt.tools.register(
        define_tool(
            name="grep",
            description="grep",
            parameters={"type": "object"},
            execute=grep,
            concurrency_safe=True,
        )
    )
    handle = await rt.agents.create(session_id="long", agent_options=OPTIONS)
    agent = handle.agent
    n = 0
    while len(agent.session.events) < target:
        n += 1
        adapter.add(
            tool_calls_response([(f"a{n}", "grep", {"q": n}), (f"b{n}", "grep", {"q": -n})]),
            text_response(f"Found what you asked for in turn {n}: the migration helper."),
        )
        agent.followup(user_message(f"find the migration helper ({n})"))
        await agent.when_idle()
        # ScriptedAdapter.requests keeps each request with its whole history: O(turns x
        # history) memory that the collector would walk; this bench does not read them.
        adapter.requests.clear()
    count = len(agent.session.events)
    await rt.close()
    return count


async def resume_time(make: Callable[[], Any]) -> tuple[float, float, float, int]:
    """``store.load`` alone, ``rt.agents.resume``, then one full ``gc.collect()``; each on
    a fresh store handle from ``make()``.

    The last figure is the collector's debt: a full pass walks every object the resumed log
    is made of, a cost the application pays at its next full collection.
    """
    store = make()
    start = time.perf_counter()
    events = await store.load("long")
    load = time.perf_counter() - start
    loaded = len(events)
    del events  # resume below must not pay for a second copy of the log kept alive
    gc.collect()
    await store.close()
    store = make()
    rt = await Runtime.open(store=store)
    rt.llm.register_adapter(["mock"], ScriptedAdapter())
    start = time.perf_counter()
    handle = await rt.agents.resume(resume_session_id="long", agent_options=OPTIONS)
    resume = time.perf_counter() - start
    # a first resume appends session/end-seed; a log that already ends with one gets none
    assert len(handle.agent.session.events) in (loaded, loaded + 1)
    start = time.perf_counter()
    gc.collect()
    collect = time.perf_counter() - start
    await rt.close()
    await store.close()
    return load, resume, collect, loaded


def spread(values: list[float], fmt: str) -> str:
    """min / median / max of ``values``."""
    low, mid, high = min(values), statistics.median(values), max(values)
    return " / ".join(format(v, fmt) for v in (low, mid, high))


def filesystem(directory: str) -> str:
    try:
        with open("/proc/mounts") as mounts:
            best = ("", "?")
            real = os.path.realpath(directory)
            for line in mounts:
                _, mount, fstype, *_ = line.split()
                if real.startswith(mount) and len(mount) > len(best[0]):
                    best = (mount, fstype)
            return f"{best[1]} (mounted at {best[0]})"
    except OSError:
        return "unknown"


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--sessions", type=int, default=16)
    parser.add_argument("--single", type=int, default=2_000, help="events of the 1-commit run")
    parser.add_argument("--dir", default=None)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--postgres",
        default=None,
        metavar="URL",
        help="also measure on PostgreSQL (throwaway schemas), e.g. postgresql://postgres@127.0.0.1/test",
    )
    args = parser.parse_args()
    directory = args.dir or tempfile.mkdtemp(prefix="steerloop-bench-")
    print(
        f"python {sys.version.split()[0]} ({platform.python_implementation()}), "
        f"sqlite {sqlite3.sqlite_version}, {platform.system()} {platform.machine()}"
    )
    print(f"database dir {directory} on {filesystem(directory)}")
    print(
        "journal_mode=WAL; synchronous=FULL for commits that acknowledge a flush, NORMAL "
        "for the others; one writer thread"
    )
    print(f"event: tool/call with {len(ARGUMENTS)}-byte arguments")
    print()

    print(f"{args.repeats} repeats; figures are min / median / max")
    print()
    counter = [0]

    def sqlite_store() -> SqliteStore:
        counter[0] += 1
        return SqliteStore(os.path.join(directory, f"t{counter[0]}.db"))

    await measure(args, sqlite_store, lambda: SqliteStore(os.path.join(directory, "long.db")))
    if args.postgres:
        await postgres_section(args)


async def measure(
    args: argparse.Namespace, fresh: Callable[[], Any], long: Callable[[], Any]
) -> None:
    """Every measurement on one backend: ``fresh()`` is an empty store, ``long()`` a handle
    on the store that will hold the long session."""
    ratios: list[float] = []
    group_rates: list[float] = []
    for label, sessions, events, every in (
        (
            f"group commit, {args.sessions} sessions, flush every 10 events",
            args.sessions,
            args.events,
            10,
        ),
        (
            f"group commit, {args.sessions} sessions, flush every 100 events",
            args.sessions,
            args.events,
            100,
        ),
        ("group commit, 64 sessions, flush after every event", 64, args.events // 4, 1),
        ("one commit per event, 1 session, flush after every event", 1, args.single, 1),
    ):
        rates, per_commit = [], []
        for _ in range(args.repeats):
            rate, grouped = await throughput(fresh, sessions, events, every)
            rates.append(rate)
            per_commit.append(grouped)
        if every == 10:
            group_rates = rates
        if sessions == 1:
            ratios = [g / r for g, r in zip(group_rates, rates, strict=True)]
        print(
            f"{label}: {spread(rates, ',.0f')} events/s ({spread(per_commit, '.1f')} events/commit)"
        )
    print(
        "ratio group commit (flush every 10) / one commit per event, same repeat: "
        f"{spread(ratios, '.1f')}x"
    )
    print()

    store = long()
    start = time.perf_counter()
    count = await write_long_session(store, args.events)
    written = time.perf_counter() - start
    await store.close()
    print(
        f"long session: {count:,} events from real agent turns, written in "
        f"{written:.1f} s ({count / written:,.0f} events/s through the agent loop)"
    )
    loads, resumes, collects = [], [], []
    loaded = 0
    for _ in range(args.repeats):
        load, resume, collect, loaded = await resume_time(long)
        loads.append(load)
        resumes.append(resume)
        collects.append(collect)
    print(f"store.load of {loaded:,} events: {spread(loads, '.3f')} s")
    print(f"rt.agents.resume of {loaded:,} events: {spread(resumes, '.3f')} s")
    print(
        f"then one full gc.collect() (the collector's walk of the log): {spread(collects, '.3f')} s"
    )


async def postgres_section(args: argparse.Namespace) -> None:
    """The same measurements on PostgreSQL, each store in a throwaway schema."""
    import asyncpg

    from steerloop.session._postgres import PostgresStore

    run = uuid.uuid4().hex[:8]
    schemas: list[str] = []

    def fresh() -> PostgresStore:
        schemas.append(f"bench_{run}_{len(schemas)}")
        return PostgresStore(args.postgres, schema=schemas[-1])

    long_schema = f"bench_{run}_long"
    schemas.append(long_schema)
    conn = await asyncpg.connect(args.postgres)
    try:
        version = await conn.fetchval("SHOW server_version")
        print()
        print(f"PostgreSQL {version} at {args.postgres} (one writer task per store, asyncpg)")
        print()
        await measure(args, fresh, lambda: PostgresStore(args.postgres, schema=long_schema))
    finally:
        for schema in schemas:
            await conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        await conn.close()


if __name__ == "__main__":
    asyncio.run(main())
