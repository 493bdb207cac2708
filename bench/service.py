"""Service figures (issue 13) for one ``steerloop serve --role all`` process on SQLite or
PostgreSQL: the server runs as its own process; this script is the client.

    python bench/service.py [--store URL] [--rate 200] [--seconds 10] [--sessions 20]

* send→SSE: from just before ``POST /messages`` (mode ``inject`` into sessions held
  open by a hanging model step) to the ``agent/inbox/spliced`` event carrying that message
  id arriving on the session's SSE feed; sends paced at ``--rate`` per second.
* POST latency: the 202 answer of those sends.
* idle reload: a session with a ~5k-event log is unloaded (``--idle-unload 0.3``); from
  ``POST /messages`` to its splice on the feed, which includes resuming the log.
* turn throughput: followups each answered by one scripted text reply, 8 in flight.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import selectors
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
from httpx_sse import aconnect_sse

ROOT = Path(__file__).resolve().parents[1]


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


def start_server(store: str, idle_unload: float) -> tuple[subprocess.Popen[str], str]:
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
    assert found
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


async def idle_reload(client: httpx.AsyncClient, events: int, repeats: int) -> None:
    sid = "big"
    await client.post("/v1/sessions", json={"session_id": sid, "profile": "hang"})
    for start in range(0, events, 200):
        await asyncio.gather(
            *[
                client.post(
                    f"/v1/sessions/{sid}/messages", json={"mode": "inject", "content": f"n{i}"}
                )
                for i in range(start, min(events, start + 200))
            ]
        )
    times: list[float] = []
    for r in range(repeats):
        async with asyncio.timeout(30):
            while (await client.get(f"/v1/sessions/{sid}")).json()["status"] != "unloaded":
                await asyncio.sleep(0.05)
        last = (await client.get(f"/v1/sessions/{sid}")).json()["last_seq"]
        seen: dict[str, float] = {}
        async with asyncio.timeout(30):
            watcher = asyncio.create_task(watch_after(client, sid, last, seen))
            await asyncio.sleep(0.2)
            t0 = time.perf_counter()
            await client.post(
                f"/v1/sessions/{sid}/messages",
                json={"mode": "inject", "content": "wake", "message_id": f"w{r}"},
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


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--store")
    parser.add_argument("--rate", type=int, default=200)
    parser.add_argument("--seconds", type=float, default=10)
    parser.add_argument("--sessions", type=int, default=20)
    parser.add_argument("--events", type=int, default=5000)
    parser.add_argument("--repeats", type=int, default=20)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        store = args.store or f"sqlite:///{tmp}/bench.db"
        proc, url = start_server(store, 0.3)
        try:
            print(
                f"store {store.split('?')[0].split('@')[-1]}  ·  {os.cpu_count()} cores  ·  "
                f"Python {sys.version.split()[0]}"
            )
            async with httpx.AsyncClient(
                base_url=url, timeout=60, limits=httpx.Limits(max_connections=200)
            ) as client:
                await send_to_sse(client, args.rate, args.seconds, args.sessions)
                await idle_reload(client, args.events, args.repeats)
                await turns(client, 400, 8)
        finally:
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=30)


if __name__ == "__main__":
    asyncio.run(main())
