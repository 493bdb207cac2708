"""Service figures (issue 13). One run; each figure is printed with its configuration.

    python bench/service.py [--store URL] [--postgres URL] [--rate 200] [--seconds 10]
        [--sessions 20] [--events 5000] [--repeats 20] [--workers 4]

Part 1, one ``steerloop serve --role all`` process (its own process; this script is the
client) on SQLite (or ``--store``), then, with ``--postgres``, on PostgreSQL (own schema):

* send→SSE: from just before ``POST /messages`` (mode ``inject`` into sessions held
  open by a hanging model step) to the ``agent/inbox/spliced`` event carrying that message
  id arriving on the session's SSE feed; sends paced at ``--rate`` per second.
* POST latency: the 202 answer of those sends.
* idle reload: a session with a ~5k-event log (injects, then one turn that takes them in)
  is unloaded (``--idle-unload 0.3``); from a followup's ``POST /messages`` to its splice
  on the feed, which includes resuming the log. ``--only idle-reload`` runs just this.
* turn throughput: followups each answered by one scripted text reply, 8 in flight, polled
  through ``/log``; again with 2 SSE readers per session (the ratio is printed).

Part 2, with ``--postgres URL``: several processes on one PostgreSQL (a throwaway schema;
children in ``bench/_service_procs.py``):

* send→owner: the API-side transaction (bump ``cmd_seq``, INSERT the command, NOTIFY the
  owner's ``steerloop_w_<key>``) at ``--rate``/s from 8 connections; ``--workers`` owner
  processes LISTEN and read the command row; idle, then with 2 processes writing the log.
  The raw SQL path of SERVICE.md §3.4, not the worker role.
* append→visible on SSE across processes: writer processes (Runtime + notifying
  PostgresStore) inject stamped messages; one ``steerloop serve`` process serves the feeds
  (one LISTEN connection); from the stamp to the splice arriving on SSE here.
* scripted-turn throughput with 1, 2 and 4 processes (Runtime + PostgresStore) on one
  database, with the ratio to one process.
* fan-out (``--only fan-out`` runs just this): send→visible of a probe session on one
  ``--role all`` server while another session, busy (2 injects/s), has ``--readers`` SSE
  readers (default 400, in a child process) against none, alternating in 3 rounds; the
  feed's reads per second (scans of the schema's events and live tables).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import re
import selectors
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
from httpx_sse import aconnect_sse

ROOT = Path(__file__).resolve().parents[1]
KEEPALIVE = 4.0
"""The bench clients' keep-alive expiry, under the server's (``steerloop serve`` 75 s,
uvicorn's default 5 s): the client drops an idle connection before the server may close
it. With equal expiries the server's timer (started at its send) always fires first, and a
POST reusing the connection then can meet the close (``httpx.ReadError``, the keep-alive
race)."""


def bench_client(base: str, connections: int) -> httpx.AsyncClient:
    """The bench's HTTP client: long timeouts, expiring idle connections at ``KEEPALIVE``."""
    return httpx.AsyncClient(
        base_url=base,
        timeout=60,
        limits=httpx.Limits(max_connections=connections, keepalive_expiry=KEEPALIVE),
    )


def profiles(rt: Any) -> list[Any]:
    """The bench's ``--profiles service:profiles``: ``hang`` (a step that never ends),
    ``text`` (answers ``ok``)."""
    from steerloop import AgentOptions
    from steerloop.service import Profile
    from steerloop.testing import HANG, ScriptedAdapter, text_response

    rt.llm.register_adapter(["hang"], ScriptedAdapter([HANG] * 10_000))
    rt.llm.register_adapter(["text"], ScriptedAdapter([text_response("ok")] * 200_000))
    return [
        Profile(name="hang", options=AgentOptions(provider="hang", model="m")),
        Profile(name="default", options=AgentOptions(provider="text", model="m")),
    ]


def start_server(
    store: str, idle_unload: float, role: str = "all", extra: tuple[str, ...] = ()
) -> tuple[subprocess.Popen[str], str]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT / "src"), str(ROOT / "bench")]))
    proc = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "from steerloop.cli import main; main()",
            "serve",
            "--port",
            "0",
            "--store",
            store,
            "--profiles",
            "service:profiles",
            "--idle-unload",
            str(idle_unload),
            *(["--role", role] if role != "all" else []),
            *extra,
        ],
        cwd=ROOT / "bench",
        env=env,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    with selectors.DefaultSelector() as sel:
        sel.register(proc.stdout, selectors.EVENT_READ)
        if not sel.select(timeout=60):
            proc.kill()
            raise SystemExit("the server did not start within 60 s")
    found = re.search(r"(http://\S+)", proc.stdout.readline())
    if found is None:
        proc.kill()
        raise SystemExit(f"steerloop serve --role {role} did not start")
    return proc, found.group(1)


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000


def line(name: str, values: list[float]) -> str:
    return (
        f"{name:<28} n={len(values):<6} p50 {pct(values, 0.5):7.1f} ms   "
        f"p99 {pct(values, 0.99):7.1f} ms   max {max(values) * 1000:7.1f} ms"
    )


async def watch(client: httpx.AsyncClient, sid: str, seen: dict[str, float]) -> None:
    async with aconnect_sse(client, "GET", f"/v1/sessions/{sid}/events") as source:
        async for event in source.aiter_sse():
            if event.event == "agent/inbox/spliced":
                for message in httpx.Response(200, content=event.data).json()["data"]["inserted"]:
                    seen.setdefault(message["id"], time.perf_counter())


async def send_to_sse(client: httpx.AsyncClient, rate: int, seconds: float, n: int) -> None:
    sids = [f"hang-{i}" for i in range(n)]
    for sid in sids:
        await client.post(
            "/v1/sessions", json={"session_id": sid, "profile": "hang", "input": "hold"}
        )
    seen: dict[str, float] = {}
    watchers = [asyncio.create_task(watch(client, sid, seen)) for sid in sids]
    await asyncio.sleep(1.0)
    sent: dict[str, float] = {}
    posts: list[float] = []

    async def one(i: int) -> None:
        mid = f"m{i}"
        t0 = time.perf_counter()
        sent[mid] = t0
        answer = await client.post(
            f"/v1/sessions/{sids[i % n]}/messages",
            json={"mode": "inject", "content": f"note {i}", "message_id": mid},
        )
        assert answer.status_code == 202, answer.text
        posts.append(time.perf_counter() - t0)

    total = int(rate * seconds)
    start = time.perf_counter()
    tasks = []
    for i in range(total):
        delay = start + i / rate - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(one(i)))
    await asyncio.gather(*tasks)
    async with asyncio.timeout(30):
        while len([m for m in sent if m in seen]) < total:
            await asyncio.sleep(0.05)
    for w in watchers:
        w.cancel()  # the bench's own readers
    await asyncio.gather(*watchers, return_exceptions=True)
    print(f"sends paced at {rate}/s for {seconds:.0f} s over {n} sessions")
    print(line("POST /messages → 202", posts))
    print(line("send → visible on SSE", [seen[m] - sent[m] for m in sent]))


async def post_accepted(client: httpx.AsyncClient, path: str, body: dict[str, Any]) -> None:
    """POST until accepted: a 429 (the session's unconsumed-command limit) is waited out,
    any other refusal ends the bench, so a figure never rests on a log that is short.

    A transport error is tried again (at most 3 times): the keep-alive race, where the
    server closes an idle connection just as this POST reuses it (``httpx.ReadError``).
    A message carries an ``idempotency_key``, so a POST the server did take applies once;
    a create that did go through answers the retry 409."""
    if path.endswith("/messages"):
        body = {"idempotency_key": uuid.uuid4().hex} | body
    failed = 0
    while True:
        try:
            answer = await client.post(path, json=body)
        except httpx.TransportError:
            failed += 1
            if failed > 3:
                raise
            continue
        if answer.status_code == 409 and failed and path == "/v1/sessions":
            return  # the try whose answer was lost created it
        if answer.status_code != 429:
            break
        await asyncio.sleep(min(float(answer.headers.get("retry-after", "1")), 0.2))
    if answer.status_code >= 300:
        raise SystemExit(f"POST {path}: {answer.status_code} {answer.text}")


async def idle_reload(client: httpx.AsyncClient, events: int, repeats: int) -> None:
    """The log is built with ``events // 2`` injects (an inject starts no turn), then a
    followup whose turn takes them in (the log then holds ~2 events per inject), so the
    session ends idle with an empty inbox (a worker unloads only such a session). Each
    repeat: wait for ``unloaded``, then a followup; from its POST to its splice on the
    feed, which includes resuming the log."""
    sid = "big"
    await post_accepted(client, "/v1/sessions", {"session_id": sid, "profile": "default"})
    path = f"/v1/sessions/{sid}/messages"
    injects = events // 2
    for start in range(0, injects, 50):  # 50 in flight: under the 100-unconsumed limit
        await asyncio.gather(
            *[
                post_accepted(client, path, {"mode": "inject", "content": f"n{i}"})
                for i in range(start, min(injects, start + 50))
            ]
        )
    await post_accepted(client, path, {"mode": "followup", "content": "take them in"})
    times: list[float] = []
    for r in range(repeats):
        try:
            async with asyncio.timeout(60):
                while (await client.get(f"/v1/sessions/{sid}")).json()["status"] != "unloaded":
                    await asyncio.sleep(0.05)
        except TimeoutError:
            print("idle reload: not measured (the session was not reported unloaded in 60 s)")
            return
        last = (await client.get(f"/v1/sessions/{sid}")).json()["last_seq"]
        seen: dict[str, float] = {}
        async with asyncio.timeout(30):
            watcher = asyncio.create_task(watch_after(client, sid, last, seen))
            await asyncio.sleep(0.2)
            t0 = time.perf_counter()
            await post_accepted(
                client, path, {"mode": "followup", "content": "wake", "message_id": f"w{r}"}
            )
            while f"w{r}" not in seen:
                await asyncio.sleep(0.001)
            times.append(seen[f"w{r}"] - t0)
            watcher.cancel()  # the bench's own reader
    print(f"idle reload of a {last}-event log, {repeats} times")
    print(line("send → visible (reload)", times))


async def watch_after(
    client: httpx.AsyncClient, sid: str, after: int, seen: dict[str, float]
) -> None:
    async with aconnect_sse(client, "GET", f"/v1/sessions/{sid}/events?after={after}") as src:
        async for event in src.aiter_sse():
            if event.event == "agent/inbox/spliced":
                for message in httpx.Response(200, content=event.data).json()["data"]["inserted"]:
                    seen.setdefault(message["id"], time.perf_counter())


async def follow(client: httpx.AsyncClient, sid: str) -> None:
    async with aconnect_sse(client, "GET", f"/v1/sessions/{sid}/events") as source:
        async for _event in source.aiter_sse():
            pass


async def turns(
    client: httpx.AsyncClient, total: int, inflight: int, readers: int = 0, tag: str = "t"
) -> float:
    sids = [f"{tag}{i}" for i in range(inflight)]
    for sid in sids:
        await client.post("/v1/sessions", json={"session_id": sid})
    followers = [asyncio.create_task(follow(client, sid)) for sid in sids for _ in range(readers)]
    per = total // inflight

    async def drive(sid: str) -> None:
        for _ in range(per):
            before = (await client.get(f"/v1/sessions/{sid}/log?limit=1&after=0")).json()
            ends = before["last_seq"]
            await client.post(
                f"/v1/sessions/{sid}/messages", json={"mode": "followup", "content": "go"}
            )
            while True:
                page = (await client.get(f"/v1/sessions/{sid}/log?after={ends}")).json()
                if any(e["type"] == "turn/end" for e in page["events"]):
                    break
                await asyncio.sleep(0.002)

    t0 = time.perf_counter()
    await asyncio.gather(*[drive(s) for s in sids])
    elapsed = time.perf_counter() - t0
    for f in followers:
        f.cancel()  # the bench's own readers
    await asyncio.gather(*followers, return_exceptions=True)
    rate = per * inflight / elapsed
    print(
        f"scripted turns: {per * inflight} in {elapsed:.2f} s = {rate:.0f} turns/s "
        f"({inflight} sessions in flight, {readers} SSE readers each, 1 process)"
    )
    return rate


# --- several processes on one PostgreSQL ------------------------------------------------


def child(*args: str, stdin: bool = True) -> subprocess.Popen[str]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT / "src"), str(ROOT / "bench")]))
    return subprocess.Popen(
        [sys.executable, str(ROOT / "bench" / "_service_procs.py"), *args],
        env=env,
        stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        text=True,
    )


def read_line(proc: subprocess.Popen[str], timeout: float = 120) -> str:
    assert proc.stdout is not None
    with selectors.DefaultSelector() as sel:
        sel.register(proc.stdout, selectors.EVENT_READ)
        if not sel.select(timeout=timeout):
            raise SystemExit("a child process did not answer in time")
    return proc.stdout.readline().strip()


async def answer(proc: subprocess.Popen[str], timeout: float = 120) -> str:
    """``read_line`` off the event loop (the bench's own SSE readers keep reading)."""
    return await asyncio.get_running_loop().run_in_executor(None, read_line, proc, timeout)


def go(procs: list[subprocess.Popen[str]]) -> None:
    for proc in procs:
        assert proc.stdin is not None
        proc.stdin.write("go\n")
        proc.stdin.flush()


def kill_all(procs: list[subprocess.Popen[str]]) -> None:
    for proc in procs:
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)


async def prepared(url: str) -> Any:
    """The schema of ``url`` created (through the store's own migration)."""
    from steerloop.session.store.postgres import PostgresStore

    store = PostgresStore(url)
    await store._acquire_pool()
    return store


async def send_to_owner(
    url: str, schema: str, workers: int, rate: int, seconds: float, background: int
) -> None:
    """The raw API-side path: bump ``cmd_seq``, INSERT the command, NOTIFY its owner's
    channel, in one transaction (one statement); W owner processes LISTEN on their own
    channel and read the command row. ``background`` turn processes write the log (with
    their per-batch feed notify) meanwhile."""
    import asyncpg

    store = await prepared(url)
    q = f'"{schema}"'
    sessions = [f"own-{i}" for i in range(8 * workers)]
    conn = await asyncpg.connect(url.split("?")[0])
    try:
        await conn.execute(f"DELETE FROM {q}.steerloop_commands")
        for i, sid in enumerate(sessions):
            await conn.execute(
                f"INSERT INTO {q}.steerloop_specs (session_id, profile, profile_version) "
                "VALUES ($1, 'default', 1) ON CONFLICT DO NOTHING",
                sid,
            )
            await conn.execute(
                f"INSERT INTO {q}.steerloop_leases (session_id, owner, lease_id, token, "
                "expires_at, owner_key) VALUES ($1, 'bench', gen_random_uuid(), 1, "
                "now() + interval '1 hour', $2) ON CONFLICT (session_id) DO UPDATE SET "
                "owner_key = EXCLUDED.owner_key",
                sid,
                1 + i % workers,
            )
    finally:
        await conn.close()
    owners = [
        child("owner", url, schema, str(k), str(seconds + 3), stdin=False)
        for k in range(1, workers + 1)
    ]
    loads = [child("turns", url, str(seconds + 2), "8", f"bg{b}") for b in range(background)]
    try:
        for proc in owners + loads:
            assert await answer(proc) == "ready"
        go(loads)
        pool = await asyncpg.create_pool(url.split("?")[0], min_size=8, max_size=8)
        send = f"""
            WITH s AS (UPDATE {q}.steerloop_specs SET cmd_seq = cmd_seq + 1
                        WHERE session_id = $1 RETURNING cmd_seq),
                 c AS (INSERT INTO {q}.steerloop_commands (session_id, cmd_seq, kind, body)
                       SELECT $1, cmd_seq, 'steer', $2::json FROM s RETURNING cmd_seq)
            SELECT pg_notify('steerloop_w_' || l.owner_key, $1 || ':' || c.cmd_seq)
              FROM c, {q}.steerloop_leases l
             WHERE l.session_id = $1 AND l.lease_id IS NOT NULL AND l.expires_at > now()"""
        total = int(rate * seconds)
        start = time.perf_counter()
        tasks = []

        async def one(i: int) -> None:
            body = json.dumps({"sent_at": time.time(), "i": i})
            await pool.execute(send, sessions[i % len(sessions)], body)

        for i in range(total):
            delay = start + i / rate - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(one(i)))
        await asyncio.gather(*tasks)
        await pool.close()
        lat: list[float] = []
        for proc in owners:
            lat.extend(json.loads(await answer(proc, seconds + 30)))
        turned = sum([int(await answer(proc, 60)) for proc in loads])
    finally:
        kill_all(owners + loads)
        await store.close()
    load = (
        f"+ {background} processes running scripted turns ({turned / (seconds + 2):.0f} turns/s)"
        if background
        else "idle"
    )
    print(
        f"send→owner (INSERT+NOTIFY, {workers} owner processes, {rate}/s, {load}): "
        + line("", [x / 1000 for x in lat]).strip()
        + f"  ({len(lat)}/{total} received)"
    )


async def cross_process_sse(
    url: str, workers: int, sessions: int, rate: int, seconds: float
) -> None:
    """append→visible on SSE across processes: W writer processes (Runtime + notifying
    PostgresStore) inject messages stamped with their wall-clock time; one API process
    (``steerloop serve`` on the same database) serves the SSE feeds; this process reads
    them and takes ``now - stamp`` for each ``agent/inbox/spliced``."""
    writers = [
        child("writer", url, str(seconds), str(sessions), f"x{w}", str(rate / workers))
        for w in range(workers)
    ]
    server, base = None, ""
    try:
        for proc in writers:
            assert await answer(proc) == "ready"
        server, base = start_server(url, 300)
        seen: list[float] = []

        async def watch_stamps(client: httpx.AsyncClient, sid: str) -> None:
            async with aconnect_sse(client, "GET", f"/v1/sessions/{sid}/events") as source:
                async for event in source.aiter_sse():
                    if event.event != "agent/inbox/spliced":
                        continue
                    now = time.time()
                    for message in json.loads(event.data)["data"]["inserted"]:
                        text = message["content"][0]["text"]
                        seen.append(now - json.loads(text)["sent_at"])

        async with bench_client(base, 400) as client:
            sids = [f"x{w}-{i}" for w in range(workers) for i in range(sessions)]
            watchers = [asyncio.create_task(watch_stamps(client, sid)) for sid in sids]
            await asyncio.sleep(1.0)
            go(writers)
            total = sum([int(await answer(proc, seconds + 60)) for proc in writers])
            async with asyncio.timeout(30):
                while len(seen) < total:
                    await asyncio.sleep(0.05)
            for w in watchers:
                w.cancel()  # the bench's own readers
            await asyncio.gather(*watchers, return_exceptions=True)
        print(
            f"append→visible on SSE across processes ({workers} writer processes, "
            f"{len(sids)} sessions, {rate}/s, 1 API process, one reader per session): "
            + line("", seen).strip()
        )
    finally:
        go(writers)
        kill_all(writers + ([server] if server is not None else []))


async def turn_scaling(
    url: str, counts: list[int], seconds: float, sessions: int, notify: bool = True
) -> None:
    """Scripted turns (a followup answered by one text reply) with 1, 2, 4 … processes on
    one database, each a Runtime on a PostgresStore (``notify`` as given) with ``sessions``
    sessions."""
    rates: dict[int, float] = {}
    for n in counts:
        run = uuid.uuid4().hex[:6]
        procs = [
            child("turns", url, str(seconds), str(sessions), f"s{run}p{p}", f"{notify:d}")
            for p in range(n)
        ]
        try:
            for proc in procs:
                assert await answer(proc) == "ready"
            go(procs)
            done = sum([int(await answer(proc, seconds + 60)) for proc in procs])
        finally:
            kill_all(procs)
        rates[n] = done / seconds
    base = rates[counts[0]]
    print(
        f"scripted turns on one PostgreSQL ({sessions} sessions per process, {seconds:.0f} s, "
        f"feed notify {'on' if notify else 'off'}): "
        + ", ".join(
            f"{n} proc {rate:.0f} turns/s ({rate / base:.2f}x)" for n, rate in rates.items()
        )
    )


async def split_roles(url: str, workers: int, args: argparse.Namespace) -> None:
    """send→visible on SSE through the service's own split: one ``--role api`` process
    (this script's client talks to it) and ``workers`` ``--role worker`` processes; the
    command travels API → commands table + NOTIFY → owning worker → its splice → feed."""
    procs: list[subprocess.Popen[str]] = []
    try:
        for _ in range(workers):
            procs.append(start_server(url, 300, role="worker")[0])
        api, base = start_server(url, 300, role="api")
        procs.append(api)
    except SystemExit as exc:
        kill_all(procs)
        print(f"split roles: not measured ({exc})")
        return
    try:
        print(f"--role api (1 process) + --role worker ({workers} processes) on one PostgreSQL")
        async with bench_client(base, 200) as client:
            await send_to_sse(client, args.rate, args.seconds, args.sessions)
    finally:
        kill_all(procs)


async def table_reads(url: str, schema: str) -> int:
    """Index and sequential scans of the schema's events and live tables so far (the feed's
    reads; the statistics of other schemas and databases are not counted)."""
    import asyncpg

    conn = await asyncpg.connect(url.split("?")[0])
    try:
        return int(
            await conn.fetchval(
                "SELECT coalesce(sum(coalesce(idx_scan, 0) + seq_scan), 0) FROM "
                "pg_stat_user_tables WHERE schemaname = $1 "
                "AND relname IN ('steerloop_events', 'steerloop_live')",
                schema,
            )
        )
    finally:
        await conn.close()


async def fan_out(
    store: str,
    schema: str,
    readers: int,
    *,
    busy_rate: float = 2,
    rate: int = 20,
    seconds: float = 10,
    rounds: int = 3,
) -> None:
    """send→visible on SSE of a probe session while another, busy session (injects at
    ``busy_rate``/s) has ``readers`` SSE readers (a child process, raw sockets), against
    the same with none, alternating for ``rounds`` rounds (a shared machine's load drifts);
    and the feed's table reads per second in each phase."""
    room = str(readers + 100)  # the edge's stream bounds (16 per session by default)
    bounds = ("--max-connections", room, "--max-streams", room, "--max-streams-per-session", room)
    proc, base = start_server(store, 300, extra=bounds)
    try:
        async with bench_client(base, 50) as client:
            for sid in ("busy", "probe"):
                await post_accepted(
                    client, "/v1/sessions", {"session_id": sid, "profile": "hang", "input": "x"}
                )
            stop = asyncio.Event()
            busy = asyncio.create_task(keep_busy(client, busy_rate, stop))
            results: dict[int, list[tuple[list[float], float]]] = {0: [], readers: []}
            try:
                for r in range(rounds):
                    for count in (0, readers):
                        found = await fan_out_phase(
                            client, base, store, schema, count, rate, seconds, f"p{r}-{count}"
                        )
                        results[count].append(found)
            finally:
                stop.set()
                await busy
        print(
            f"send→visible of another session while one session (injects {busy_rate:.0f}/s) "
            f"has SSE readers (probe {rate}/s for {seconds:.0f} s per phase, {rounds} rounds "
            "alternating, --role all):"
        )
        for count, found in results.items():
            seen = [x for one, _ in found for x in one]
            per_round = ", ".join(f"{pct(one, 0.5):.0f}" for one, _ in found)
            reads = statistics.mean(r for _, r in found)
            print(
                line(f"  {count} readers", seen)
                + f"   feed reads {reads:.0f}/s   (p50 per round: {per_round} ms)"
            )
        alone = [x for one, _ in results[0] for x in one]
        crowded = [x for one, _ in results[readers] for x in one]
        print(
            f"  p50 with {readers} readers / without: "
            f"{pct(crowded, 0.5) / max(pct(alone, 0.5), 1e-3):.2f}x"
        )
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)


async def keep_busy(client: httpx.AsyncClient, rate: float, stop: asyncio.Event) -> None:
    """Injects into ``busy`` at ``rate``/s until ``stop``."""
    n = 0
    while not stop.is_set():
        n += 1
        await post_accepted(
            client, "/v1/sessions/busy/messages", {"mode": "inject", "content": f"b{n}"}
        )
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), 1 / rate)


async def fan_out_phase(
    client: httpx.AsyncClient,
    base: str,
    store: str,
    schema: str,
    count: int,
    rate: int,
    seconds: float,
    tag: str,
) -> tuple[list[float], float]:
    """One phase: ``count`` readers on ``busy`` (none: no child), the probe's latencies and
    the feed's table reads per second meanwhile."""
    readers_proc = None
    if count:  # readers that follow the session live (from its last seq on)
        last = (await client.get("/v1/sessions/busy")).json()["last_seq"]
        readers_proc = child("readers", base, "busy", str(count), str(last))
        assert await answer(readers_proc) == "ready"
    await asyncio.sleep(2.0)  # the readers settle; the statistics are flushed
    before = await table_reads(store, schema)
    started = time.perf_counter()
    seen = await probe(client, rate, seconds, tag)
    await asyncio.sleep(1.5)  # the server's statistics reach the view
    reads = (await table_reads(store, schema) - before) / (time.perf_counter() - started)
    if readers_proc is not None:
        go([readers_proc])
        got = await answer(readers_proc)
        readers_proc.wait(timeout=30)
        print(f"  {count} readers of the busy session each got {got} events (min max)")
    return seen, reads


async def probe(client: httpx.AsyncClient, rate: int, seconds: float, tag: str) -> list[float]:
    """Injects into ``probe`` paced at ``rate``/s; each one's time to its splice on SSE."""
    seen: dict[str, float] = {}
    watcher = asyncio.create_task(watch(client, "probe", seen))
    await asyncio.sleep(0.5)
    sent: dict[str, float] = {}
    start = time.perf_counter()
    tasks = []

    async def one(mid: str) -> None:
        sent[mid] = time.perf_counter()
        await post_accepted(
            client, "/v1/sessions/probe/messages",
            {"mode": "inject", "content": mid, "message_id": mid},
        )  # fmt: skip

    for i in range(int(rate * seconds)):
        delay = start + i / rate - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(one(f"{tag}-{i}")))
    await asyncio.gather(*tasks)
    async with asyncio.timeout(120):
        while any(m not in seen for m in sent):
            await asyncio.sleep(0.05)
    watcher.cancel()  # the bench's own reader
    await asyncio.gather(watcher, return_exceptions=True)
    return [seen[m] - sent[m] for m in sent]


async def drop_schema(url: str, schema: str) -> None:
    import asyncpg

    conn = await asyncpg.connect(url)
    try:
        await conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
    finally:
        await conn.close()


async def role_all(store: str, args: argparse.Namespace) -> None:
    """The figures of one ``steerloop serve`` (``--role all``) process on ``store``."""
    proc, url = start_server(store, 0.3)
    try:
        print(f"--role all on {store.split('?')[0].split('@')[-1]} (one server process)")
        async with bench_client(url, 200) as client:
            if args.only == "idle-reload":
                await idle_reload(client, args.events, args.repeats)
                return
            await send_to_sse(client, args.rate, args.seconds, args.sessions)
            await idle_reload(client, args.events, args.repeats)
            alone = await turns(client, 400, 8, tag="t")
            read = await turns(client, 400, 8, readers=2, tag="r")
            print(f"turns/s with 2 SSE readers per session / without: {read / alone:.2f}x")
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--store", help="the --role all server's store (default: SQLite)")
    parser.add_argument(
        "--postgres", help="a PostgreSQL URL: adds the multi-process figures (own schema)"
    )
    parser.add_argument("--rate", type=int, default=200)
    parser.add_argument("--seconds", type=float, default=10)
    parser.add_argument("--sessions", type=int, default=20)
    parser.add_argument("--events", type=int, default=5000)
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument(
        "--only", choices=["idle-reload", "fan-out"], help="run one figure (fan-out: PostgreSQL)"
    )
    parser.add_argument("--readers", type=int, default=400)
    args = parser.parse_args()
    print(
        f"{os.cpu_count()} cores  ·  Python {sys.version.split()[0]}  ·  "
        f"load average {os.getloadavg()[0]:.1f} at start"
    )
    if args.only == "fan-out":
        if not args.postgres:
            raise SystemExit("--only fan-out needs --postgres")
        schema = f"bench_fan_{uuid.uuid4().hex[:8]}"
        sep = "&" if "?" in args.postgres else "?"
        try:
            await fan_out(f"{args.postgres}{sep}schema={schema}", schema, args.readers)
        finally:
            await drop_schema(args.postgres, schema)
        return
    with tempfile.TemporaryDirectory() as tmp:
        await role_all(args.store or f"sqlite:///{tmp}/bench.db", args)
    if args.postgres and not args.store:
        schema = f"bench_all_{uuid.uuid4().hex[:8]}"
        sep = "&" if "?" in args.postgres else "?"
        try:
            await role_all(f"{args.postgres}{sep}schema={schema}", args)
        finally:
            await drop_schema(args.postgres, schema)
    if args.postgres and args.only is None:
        schema = f"bench_service_{uuid.uuid4().hex[:8]}"
        sep = "&" if "?" in args.postgres else "?"
        pg = f"{args.postgres}{sep}schema={schema}"
        print(f"several processes on one PostgreSQL ({args.postgres.split('@')[-1]})")
        try:
            await send_to_owner(pg, schema, args.workers, args.rate, args.seconds, 0)
            await send_to_owner(pg, schema, args.workers, args.rate, args.seconds, 2)
            await cross_process_sse(pg, args.workers, 5, args.rate, args.seconds)
            fan = f"bench_fan_{uuid.uuid4().hex[:8]}"
            try:
                await fan_out(f"{args.postgres}{sep}schema={fan}", fan, args.readers)
            finally:
                await drop_schema(args.postgres, fan)
            await turn_scaling(pg, [1, 2, 4], 5.0, 8)
            await turn_scaling(pg, [1, 2, 4], 5.0, 8, notify=False)
        finally:
            await drop_schema(args.postgres, schema)
        split = f"bench_split_{uuid.uuid4().hex[:8]}"  # no rows of the raw path for its workers
        try:
            await split_roles(f"{args.postgres}{sep}schema={split}", args.workers, args)
        finally:
            await drop_schema(args.postgres, split)


if __name__ == "__main__":
    asyncio.run(main())
