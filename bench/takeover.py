"""Takeover times on PostgreSQL (issue 25). One run; the figures are printed with their
configuration and the machine's load.

    python bench/takeover.py --postgres URL [--runs 10] [--stops 3]

Processes: one ``steerloop serve --role api`` and two ``--role worker``, all with the
failover tests' rule model (``tests/service/failover_profiles.py``: a ``gate NAME`` message
holds its tool call until a file appears; the takeover message is answered ``continued
after takeover``), on a throwaway schema, the server's default lease TTL (15 s).

* ``kill -9`` mid-tool, ``--runs`` times: a session held in its tool, its owner killed with
  SIGKILL; from the kill to the continued turn's ``turn/end`` in the stored log (repair,
  takeover message, answer); a fresh worker replaces the dead one after each run. Whether
  the owner was the sweeper leader is noted per run (``L``).
* ``SIGSTOP`` mid-tool, ``--stops`` times: the same with the owner paused (then killed);
  found by its stale heartbeat, not the lease's TTL.
"""

from __future__ import annotations

import argparse
import asyncio
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

import asyncpg
import httpx

ROOT = Path(__file__).resolve().parents[1]
WAIT = 60.0


class Procs:
    """The API node and the workers (killed on the way out)."""

    def __init__(self, url: str, directory: Path) -> None:
        self.url = url
        self.dir = directory
        self.procs: list[subprocess.Popen[str]] = []

    def start(self, role: str) -> tuple[subprocess.Popen[str], str]:
        env = dict(
            os.environ,
            PYTHONPATH=os.pathsep.join([str(ROOT / "src"), str(ROOT)]),
            STEERLOOP_FAILOVER_DIR=str(self.dir),
        )
        proc = subprocess.Popen(
            [
                sys.executable,
                "-c",
                "from steerloop.cli import main; main()",
                "serve",
                "--role",
                role,
                "--port",
                "0",
                "--store",
                self.url,
                "--profiles",
                "tests.service.failover_profiles:profiles",
                "--no-retry",
            ],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        self.procs.append(proc)
        assert proc.stdout is not None
        with selectors.DefaultSelector() as sel:
            sel.register(proc.stdout, selectors.EVENT_READ)
            if not sel.select(timeout=WAIT):
                raise SystemExit(f"steerloop serve --role {role} did not start")
        found = re.search(r"(http://\S+)", proc.stdout.readline())
        if found is None:
            raise SystemExit(f"steerloop serve --role {role} did not start")
        return proc, found.group(1)

    def close(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGCONT)
                proc.kill()
            proc.wait(timeout=WAIT)


async def poll(check: Any, what: str) -> Any:
    async with asyncio.timeout(WAIT):
        while True:
            value = await check()
            if value:
                return value
            await asyncio.sleep(0.01)
    raise SystemExit(f"timed out waiting for {what}")


async def leader_pid(conn: Any, schema: str) -> int | None:
    """The pid of the worker holding the sweeper's leadership lock."""
    from steerloop.service._pg._control import namespace

    return await conn.fetchval(
        f"SELECT w.pid FROM pg_locks lead JOIN pg_locks mine ON mine.pid = lead.pid "
        "AND mine.locktype = 'advisory' AND mine.granted AND mine.objsubid = 2 "
        "AND mine.classid = lead.classid AND mine.objid <> lead.objid "
        f'JOIN "{schema}".steerloop_workers w ON w.key = mine.objid::bigint '
        "WHERE lead.locktype = 'advisory' AND lead.granted AND lead.objsubid = 2 "
        "AND lead.classid = $1::bigint::oid AND lead.objid = 0",
        namespace(schema),
    )


async def one_takeover(
    client: httpx.AsyncClient, procs: Procs, conn: Any, schema: str, n: int, sig: int
) -> tuple[float, bool]:
    """Create a session held mid-tool, signal its owner, time the continued turn's end."""
    sid, gate = f"r{n}", f"g{n}"
    answer = await client.post("/v1/sessions", json={"session_id": sid, "input": f"gate {gate}"})
    assert answer.status_code == 201, answer.text

    async def held() -> Any:
        gates = sorted(procs.dir.glob(f"gate-{gate}.*"))
        if not gates:
            return None
        events = (await client.get(f"/v1/sessions/{sid}/log")).json()["events"]
        return int(gates[0].suffix[1:]) if any(e["type"] == "tool/call" for e in events) else None

    pid = await poll(held, f"{sid} mid-tool")
    was_leader = await leader_pid(conn, schema) == pid
    token = await conn.fetchval(
        f'SELECT token FROM "{schema}".steerloop_leases WHERE session_id = $1', sid
    )
    started = time.monotonic()
    os.kill(pid, sig)

    async def revoked() -> bool:
        now = await conn.fetchval(
            f'SELECT token FROM "{schema}".steerloop_leases WHERE session_id = $1', sid
        )
        return bool(now > token)

    await poll(revoked, f"{sid} revoked")
    detected = time.monotonic() - started

    async def continued() -> bool:
        events = (await client.get(f"/v1/sessions/{sid}/log")).json()["events"]
        ends = [e["data"]["reason"]["kind"] for e in events if e["type"] == "turn/end"]
        return ends == ["interrupted", "completed"]

    await poll(continued, f"{sid} continued")
    took = time.monotonic() - started
    print(f"  {sid}: revoked after {detected:.2f} s, continued after {took:.2f} s"
          f"{' (owner led the sweep)' if was_leader else ''}", flush=True)  # fmt: skip
    victim = next(p for p in procs.procs if p.pid == pid)
    if sig == signal.SIGSTOP:
        victim.send_signal(signal.SIGCONT)
    victim.kill()
    victim.wait(timeout=WAIT)
    procs.start("worker")
    return took, was_leader


def summary(name: str, times: list[tuple[float, bool]]) -> str:
    took = [t for t, _ in times]
    return (
        f"{name}, {len(took)} runs: median {statistics.median(took):.2f} s, "
        f"min {min(took):.2f} s, max {max(took):.2f} s  ("
        + ", ".join(f"{t:.2f}{'L' if lead else ''}" for t, lead in times)
        + "; L: the owner led the sweep)"
    )


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--postgres", required=True, help="a PostgreSQL URL (own schema)")
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--stops", type=int, default=3)
    args = parser.parse_args()
    print(
        f"{os.cpu_count()} cores  ·  Python {sys.version.split()[0]}  ·  "
        f"load average {os.getloadavg()[0]:.1f} at start"
    )
    schema = f"bench_takeover_{uuid.uuid4().hex[:8]}"
    sep = "&" if "?" in args.postgres else "?"
    url = f"{args.postgres}{sep}schema={schema}"
    conn = await asyncpg.connect(args.postgres)
    with tempfile.TemporaryDirectory() as tmp:
        procs = Procs(url, Path(tmp))
        try:
            _, base = procs.start("api")
            procs.start("worker")
            procs.start("worker")
            async with httpx.AsyncClient(base_url=base, timeout=WAIT) as client:
                kills = [
                    await one_takeover(client, procs, conn, schema, n, signal.SIGKILL)
                    for n in range(args.runs)
                ]
                print(summary("kill -9 mid-tool -> continued turn ended", kills))
                stops = [
                    await one_takeover(client, procs, conn, schema, 1000 + n, signal.SIGSTOP)
                    for n in range(args.stops)
                ]
                print(summary("SIGSTOP mid-tool (lease TTL 15 s) -> continued", stops))
        finally:
            procs.close()
            await conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
            await conn.close()
    print(f"load average {os.getloadavg()[0]:.1f} at the end")


if __name__ == "__main__":
    asyncio.run(main())
