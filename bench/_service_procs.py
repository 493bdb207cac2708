"""Child processes of ``bench/service.py`` on one PostgreSQL (run as scripts).

python bench/_service_procs.py owner URL SCHEMA KEY SECONDS
    LISTENs on ``steerloop_w_<KEY>``; for each notification ``sid:cmd_seq`` reads the
    command row (the owner holding the command) and records ``now - sent_at`` (the
    sender's wall clock, in the row's body). Prints the latencies (ms) as one line.
python bench/_service_procs.py turns URL SECONDS SESSIONS TAG
    A Runtime on the store (``notify=1``) running scripted turns (a followup answered by
    one text reply) on SESSIONS sessions for SECONDS; prints how many turns ended.
python bench/_service_procs.py readers BASE_URL SESSION N AFTER
    N SSE readers of one session from seq AFTER on (``Last-Event-ID``; raw sockets: the
    bench measures the server, not a client's parser); prints "ready" once each has its
    first event, then, after a line on stdin, the number of events each received (min and
    max) and exits.
python bench/_service_procs.py writer URL SECONDS SESSIONS TAG RATE
    A Runtime on the store (``notify=1``) sending followups at RATE per second over
    SESSIONS sessions, each message carrying its wall-clock send time; prints "ready"
    once its sessions exist, then runs after a line on stdin.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from typing import Any


async def owner(url: str, schema: str, key: int, seconds: float) -> None:
    import asyncpg

    conn = await asyncpg.connect(url.split("?")[0])
    lat: list[float] = []
    pending: asyncio.Queue[str] = asyncio.Queue()
    await conn.add_listener(f"steerloop_w_{key}", lambda *a: pending.put_nowait(a[3]))
    print("ready", flush=True)
    loop = asyncio.get_running_loop()
    end = loop.time() + seconds
    sql = f'SELECT body FROM "{schema}".steerloop_commands WHERE session_id = $1 AND cmd_seq = $2'
    while (left := end - loop.time()) > 0:
        try:
            payload = await asyncio.wait_for(pending.get(), left)
        except TimeoutError:
            break
        sid, _, seq = payload.rpartition(":")
        body = await conn.fetchval(sql, sid, int(seq))
        lat.append((time.time() - json.loads(body)["sent_at"]) * 1000)
    print(json.dumps(lat), flush=True)
    await conn.close()


def _runtime_parts(url: str, notify: bool = True) -> tuple[Any, Any]:
    from steerloop import AgentOptions
    from steerloop.session.store.postgres import PostgresStore

    return PostgresStore(url, notify=notify), AgentOptions(provider="text", model="m")


async def turns(url: str, seconds: float, sessions: int, tag: str, notify: bool) -> None:
    from steerloop import Runtime, user_message
    from steerloop.testing import ScriptedAdapter, text_response

    store, options = _runtime_parts(url, notify)
    rt = await Runtime.open(store=store)
    rt.llm.register_adapter(["text"], ScriptedAdapter([text_response("ok")] * 1_000_000))
    handles = [
        await rt.agents.create(session_id=f"{tag}-{i}", agent_options=options)
        for i in range(sessions)
    ]
    print("ready", flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
    done = 0
    loop = asyncio.get_running_loop()
    end = loop.time() + seconds

    async def drive(handle: Any) -> None:
        nonlocal done
        while loop.time() < end:
            handle.agent.followup(user_message("go"))
            await handle.agent.when_idle()
            done += 1

    await asyncio.gather(*(drive(h) for h in handles))
    for h in handles:
        await h.agent.session.flush()
    print(done, flush=True)
    await rt.close()
    await store.close()


async def writer(url: str, seconds: float, sessions: int, tag: str, rate: float) -> None:
    from steerloop import Runtime, user_message
    from steerloop.testing import ScriptedAdapter, text_response

    store, options = _runtime_parts(url)
    rt = await Runtime.open(store=store)
    rt.llm.register_adapter(["text"], ScriptedAdapter([text_response("ok")] * 1_000_000))
    handles = [
        await rt.agents.create(session_id=f"{tag}-{i}", agent_options=options)
        for i in range(sessions)
    ]
    for h in handles:
        await h.agent.session.flush()
    pool = await store._acquire_pool()
    for h in handles:  # the spec row an API node finds a session by
        await pool.execute(
            f"INSERT INTO {store._tables.specs} (session_id, profile, profile_version, status)"
            " VALUES ($1, 'default', 1, 'idle') ON CONFLICT DO NOTHING",
            h.agent.id,
        )
    print("ready", flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
    loop = asyncio.get_running_loop()
    start = loop.time()
    total = int(seconds * rate)
    for i in range(total):
        delay = start + i / rate - loop.time()
        if delay > 0:
            await asyncio.sleep(delay)
        agent = handles[i % sessions].agent
        agent.inject(user_message(json.dumps({"sent_at": time.time(), "i": i})))
    for h in handles:
        await h.agent.session.flush()
    print(total, flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
    await rt.close()
    await store.close()


async def readers(base: str, session: str, n: int, after: int) -> None:
    host, _, port = base.removeprefix("http://").partition(":")
    counts = [0] * n
    first = [asyncio.Event() for _ in range(n)]

    async def read(i: int) -> None:
        reader, writer = await asyncio.open_connection(host, int(port))
        request = f"GET /v1/sessions/{session}/events HTTP/1.1\r\nHost: {host}\r\n"
        writer.write((request + f"Last-Event-ID: {after}\r\n\r\n").encode())
        await writer.drain()
        tail = b""
        while chunk := await reader.read(65536):
            data = tail + chunk  # an "\nid: " across two reads counts once
            counts[i] += data.count(b"\nid: ") - tail.count(b"\nid: ")
            tail = data[-8:]
            if counts[i]:
                first[i].set()

    tasks = [asyncio.create_task(read(i)) for i in range(n)]
    await asyncio.wait_for(asyncio.gather(*(e.wait() for e in first)), 120)
    print("ready", flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
    print(f"{min(counts)} {max(counts)}", flush=True)
    for task in tasks:
        task.cancel()  # this child's own readers


def main() -> None:
    kind, *args = sys.argv[1:]
    if kind == "owner":
        asyncio.run(owner(args[0], args[1], int(args[2]), float(args[3])))
    elif kind == "turns":
        notify = len(args) < 5 or args[4] == "1"
        asyncio.run(turns(args[0], float(args[1]), int(args[2]), args[3], notify))
    elif kind == "readers":
        asyncio.run(readers(args[0], args[1], int(args[2]), int(args[3])))
    elif kind == "writer":
        asyncio.run(writer(args[0], float(args[1]), int(args[2]), args[3], float(args[4])))
    else:
        raise SystemExit(f"unknown child {kind!r}")


if __name__ == "__main__":
    main()
