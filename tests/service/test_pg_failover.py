"""Process-level failover of the PostgreSQL service (issue 13, design/SERVICE.md §3.3–3.4, §5):
real worker processes (``steerloop serve --role worker``) on the local PostgreSQL, an API node
(``create_app(role="api")`` under uvicorn on 127.0.0.1:0) in this process, faults injected
with SIGKILL, SIGSTOP/SIGCONT and ``pg_terminate_backend``.

The model is the rule model of ``failover_profiles.py`` (the same in every worker); a call
is held "mid-tool" by its ``gate`` tool until the test creates ``open-NAME``. Each worker's
log goes to ``worker-N.log`` in the test's directory, and the measured takeover times
(kill → continued turn ended) are printed (``-s`` shows them; they are measured under the
load of the machine at the time, not benchmarks).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import signal
import socket
import subprocess
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest
from httpx_sse import aconnect_sse

from steerloop import SessionPersistenceNotFoundError
from steerloop.service import create_app
from steerloop.service._pg._control import ControlConnection, namespace
from steerloop.service._pg._schema import ServiceTables as Tables
from steerloop.service._pg._sweeper import Sweeper
from steerloop.session import SessionEvent
from steerloop.session._codec import validate_log
from steerloop.session._postgres import PostgresStore
from steerloop.session._session import Session

from ..logcheck import log_problems
from .failover_profiles import TAKEOVER_PLUGIN, profiles
from .livesupport import POSTGRES_URL, fresh_schema, now, poll, sql
from .pgworkers import ROOT, SERVE, env_for
from .served import served

WAIT = 40.0
"""Bound of every wait for the cluster (several processes on a shared 2-core machine)."""

pytestmark = pytest.mark.timeout(180)


@pytest.fixture
async def schema() -> AsyncIterator[str]:
    async for name in fresh_schema():
        yield name


class WorkerProc:
    """One ``steerloop serve --role worker`` process."""

    def __init__(self, proc: subprocess.Popen[str], log: Path) -> None:
        self.proc = proc
        self.log = log
        self.worker_id = f"{socket.gethostname()}:{proc.pid}"

    @property
    def pid(self) -> int:
        return self.proc.pid

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=WAIT)


class Cluster:
    """Workers (processes) and an API node (this process) on one schema."""

    def __init__(self, directory: Path, schema: str, query: str = "") -> None:
        self.dir = directory
        self.schema = schema
        self.t = Tables(schema)
        self.url = f"{POSTGRES_URL}?schema={schema}{query}"
        self.workers: list[WorkerProc] = []
        self.client: httpx.AsyncClient | None = None
        self.pool: Any = None
        self.control: ControlConnection | None = None
        self.sweeper: Sweeper | None = None

    def start_worker(self, *extra: str) -> WorkerProc:
        n = len(self.workers) + 1
        log = self.dir / f"worker-{n}.log"
        env = env_for(
            self.dir,
            STEERLOOP_FAILOVER_DIR=str(self.dir),
            STEERLOOP_TEST_COMMITS=str(self.dir / "commits.jsonl"),
        )
        with open(log, "w") as err:
            proc = subprocess.Popen(
                [
                    *SERVE,
                    "--role",
                    "worker",
                    "--port",
                    "0",
                    "--store",
                    self.url,
                    "--profiles",
                    "tests.service.failover_profiles:profiles",
                    "--no-retry",
                    *extra,
                ],
                cwd=ROOT,
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=err,
                text=True,
            )
        worker = WorkerProc(proc, log)
        self.workers.append(worker)
        return worker

    async def registered(self, *workers: WorkerProc) -> None:
        """Wait until each worker's control connection holds its lock (it can claim)."""
        ids = {w.worker_id for w in workers}

        async def live() -> set[str]:
            rows = await sql(
                f"SELECT w.worker_id FROM {self.t.workers} w JOIN pg_locks l ON "
                "l.locktype = 'advisory' AND l.granted AND l.objsubid = 2 "
                "AND l.objid = w.key::oid"
            )
            return {r["worker_id"] for r in rows}

        for worker in workers:
            if worker.proc.poll() is not None:
                raise AssertionError(f"worker exited: {worker.log.read_text()}")
        await poll(live, until=lambda found: ids <= found, timeout=WAIT)

    async def lead(self) -> None:
        """A sweeper in this process that leads before any worker starts (so a paused worker
        is never the leader: the TTL path, not the deposition of a stale leader, is tested)."""
        self.pool = await asyncpg.create_pool(POSTGRES_URL, min_size=1, max_size=2)
        self.control = ControlConnection(
            POSTGRES_URL,
            self.schema,
            worker_id="test-leader",
            profiles={},
            capacity=0,
            on_lost=lambda: None,
            on_notify=lambda c, p: None,
        )
        await self.control.start()
        # No hung-worker deposition here: a paused owner is found by its lease's TTL (the
        # path these tests pin; test_pg_takeover_time.py covers the deposition).
        self.sweeper = Sweeper(self.pool, self.t, self.control, period=0.1, stale_after=None)
        assert (await self.sweeper.sweep_once()).leader
        self.sweeper.start()

    async def close(self) -> None:
        for worker in self.workers:
            worker.kill()
        if self.sweeper is not None:
            await self.sweeper.close()
        if self.control is not None:
            await self.control.close()
        if self.pool is not None:
            await self.pool.close()

    # --- requests to the API node ------------------------------------------------------------

    async def create(self, sid: str, text: str) -> None:
        """Create ``sid`` (profile ``default``) with the first input ``text``."""
        assert self.client is not None
        answer = await self.client.post(
            "/v1/sessions", json={"session_id": sid, "profile": "default", "input": text}
        )
        assert answer.status_code == 201, answer.text

    async def send(self, sid: str, content: str, mode: str = "followup", **extra: str) -> None:
        """Send ``content`` to ``sid`` as a ``mode`` message (``extra``: e.g. ``message_id``)."""
        assert self.client is not None
        sent = await self.client.post(
            f"/v1/sessions/{sid}/messages", json={"mode": mode, "content": content, **extra}
        )
        assert sent.status_code == 202, sent.text

    async def held(self, *workers: WorkerProc, sid: str = "s1", gate: str = "g1") -> WorkerProc:
        """Once ``workers`` have registered, create ``sid`` with the input ``gate GATE`` and
        wait until one of them holds that call mid-tool (``mid_tool``); returns that worker,
        the session's owner."""
        await self.registered(*workers)
        await self.create(sid, f"gate {gate}")
        pid = await self.mid_tool(sid, gate)
        owners = [w for w in workers if w.pid == pid]
        assert len(owners) == 1, (pid, [w.pid for w in workers])
        return owners[0]

    # --- observations ------------------------------------------------------------------------

    async def lease(self, sid: str) -> tuple[int, int | None, bool]:
        """(token, owner_key, live) of ``sid``'s lease."""
        rows = await sql(
            f"SELECT token, owner_key, lease_id IS NOT NULL AND expires_at > now() AS live "
            f"FROM {self.t.leases} WHERE session_id = $1",
            sid,
        )
        assert rows, f"{sid} has no lease"
        return rows[0]["token"], rows[0]["owner_key"], rows[0]["live"]

    async def owner_pid(self, sid: str) -> int | None:
        rows = await sql(
            f"SELECT w.pid FROM {self.t.leases} l JOIN {self.t.workers} w ON w.key = l.owner_key "
            "WHERE l.session_id = $1 AND l.lease_id IS NOT NULL AND l.expires_at > now()",
            sid,
        )
        return rows[0]["pid"] if rows else None

    async def gate_pid(self, name: str) -> int:
        """The pid of the worker whose ``gate`` tool holds the call ``name`` (bounded)."""

        async def found() -> list[Path]:
            return sorted(self.dir.glob(f"gate-{name}.*"))

        paths = await poll(found, until=bool, timeout=WAIT)
        return int(paths[0].suffix[1:])

    async def events(self, sid: str) -> list[SessionEvent]:
        """The stored log of ``sid`` (``[]`` before its first commit)."""
        store = PostgresStore(self.url)
        try:
            return list(await store.load(sid))
        except SessionPersistenceNotFoundError:
            return []
        finally:
            await store.close()

    async def mid_tool(self, sid: str, name: str) -> int:
        """Wait until ``gate NAME`` holds its call and its ``tool/call`` is committed (the
        body starts before the group commit lands); returns the pid of the worker."""
        pid = await self.gate_pid(name)
        await self.wait_log(sid, lambda ev: any(e.type == "tool/call" for e in ev))
        return pid

    async def wait_log(
        self, sid: str, until: Callable[[list[SessionEvent]], bool]
    ) -> list[SessionEvent]:
        return await poll(lambda: self.events(sid), until=until, timeout=WAIT)

    def requests(self, pid: int) -> list[dict[str, Any]]:
        path = self.dir / f"requests-{pid}.jsonl"
        if not path.exists():
            return []
        return [json.loads(line) for line in path.read_text().splitlines()]

    def logs(self) -> str:
        return "\n".join(f"--- {w.log.name}\n{w.log.read_text()[-4000:]}" for w in self.workers)


@contextlib.asynccontextmanager
async def cluster(tmp_path: Path, schema: str, query: str = "") -> AsyncIterator[Cluster]:
    before = os.environ.get("STEERLOOP_FAILOVER_DIR")
    os.environ["STEERLOOP_FAILOVER_DIR"] = str(tmp_path)  # the API node's own profiles
    c = Cluster(tmp_path, schema, query)
    try:
        app = create_app(c.url, profiles, "api", worker_id="api", idle_unload=None)
        async with served(app) as client:
            client.timeout = httpx.Timeout(WAIT)
            c.client = client
            yield c
    except BaseException:
        print(c.logs())
        raise
    finally:
        await c.close()
        if before is None:
            os.environ.pop("STEERLOOP_FAILOVER_DIR", None)
        else:
            os.environ["STEERLOOP_FAILOVER_DIR"] = before


class SseWatcher:
    """Reads ``/v1/sessions/S/events`` from seq 0 in the background; keeps the durable ids."""

    def __init__(self, client: httpx.AsyncClient, sid: str) -> None:
        self.client = client
        self.sid = sid
        self.ids: list[int] = []
        self._response: httpx.Response | None = None
        self.closing = False
        self.task = asyncio.get_running_loop().create_task(self._read())

    async def _read(self) -> None:
        try:
            async with aconnect_sse(self.client, "GET", f"/v1/sessions/{self.sid}/events") as src:
                self._response = src.response
                async for event in src.aiter_sse():
                    if event.event != "stream" and event.id and ":" not in event.id:
                        self.ids.append(int(event.id))
        except (httpx.ReadError, httpx.StreamClosed):
            if not self.closing:
                raise

    async def until(self, last_seq: int) -> None:
        """Wait until the watcher has seen ``last_seq``, then end its stream."""
        await poll(
            lambda: now(self.ids[-1] if self.ids else 0),
            until=lambda seen: seen >= last_seq or self.task.done(),
            timeout=WAIT,
        )
        await self.close()

    async def close(self) -> None:
        self.closing = True
        if self._response is not None:
            await self._response.aclose()  # ends the reader's iteration
        with contextlib.suppress(Exception):
            async with asyncio.timeout(5):
                await self.task


def check_log(sid: str, events: list[SessionEvent]) -> None:
    """SERVICE.md §5 invariants of one stored log: ``validate_log``, contiguous seqs, every
    ``turn/start`` closed once, the logcheck well-formedness rules."""
    validate_log(events)
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    starts = Counter(e.data.turn for e in events if e.type == "turn/start")
    ends = Counter(e.data.turn for e in events if e.type == "turn/end")
    assert starts == ends and set(starts.values()) <= {1}, (starts, ends)
    session = Session._create(sid, seed=events, repair=False)
    assert log_problems(session) == []


async def committed_batches(c: Cluster) -> list[dict[str, Any]]:
    """The batches the workers recorded (``failover_profiles.record_commits``) whose
    transaction the server says committed (a worker killed before its COMMIT left a line
    for an aborted one)."""
    path = c.dir / "commits.jsonl"
    lines = path.read_text().splitlines() if path.exists() else []
    batches = [json.loads(line) for line in lines if line.strip()]
    rows = await sql(
        "SELECT x, pg_xact_status(x::xid8) FROM unnest($1::text[]) AS x",
        sorted({b["xact"] for b in batches}),
    )
    status = {row[0]: row[1] for row in rows}
    assert set(status.values()) <= {"committed", "aborted"}, status
    return [b for b in batches if status[b["xact"]] == "committed"]


def check_one_writer(sid: str, events: list[SessionEvent], batches: list[dict[str, Any]]) -> int:
    """SERVICE.md §5: at no instant do two workers append to one session. From what the
    workers committed: every stored seq of ``sid`` was committed by exactly one batch, a
    lease token belongs to one worker, and in seq order the tokens never go back (the
    ranges of two writers never interleave). Returns how many tokens wrote."""
    mine = sorted((b for b in batches if b["session"] == sid), key=lambda b: b["first"])
    assert all(b["n"] == b["last"] - b["first"] + 1 for b in mine), mine
    seqs = [seq for b in mine for seq in range(b["first"], b["last"] + 1)]
    assert seqs == [e.seq for e in events], (sid, mine)
    tokens = [b["token"] for b in mine]
    assert tokens == sorted(tokens), (sid, mine)
    writers: dict[int, set[tuple[int, int]]] = {}
    for b in mine:
        writers.setdefault(b["token"], set()).add((b["pid"], b["key"]))
    assert all(len(w) == 1 for w in writers.values()), (sid, writers)
    return len(writers)


def turn_ends(events: list[SessionEvent]) -> list[str]:
    return [e.data.reason.kind for e in events if e.type == "turn/end"]


def result_codes(events: list[SessionEvent]) -> dict[str, str | None]:
    return {
        e.data.message.call_id: (e.data.error.code if e.data.error else None)
        for e in events
        if e.type == "tool/result"
    }


def replies(events: list[SessionEvent]) -> list[str]:
    """The text of each assistant message, in order."""
    return [
        "".join(getattr(b, "text", "") for b in e.data.message.content)
        for e in events
        if e.type == "assistant/message"
    ]


def takeover_requests(c: Cluster, sid: str, pids: list[int]) -> list[dict[str, Any]]:
    """The requests (of the given workers) whose last message is the takeover message."""
    found = []
    for pid in pids:
        for request in c.requests(pid):
            last = request["messages"][-1]
            if request["session"] == sid and last.get("source", {}).get("plugin") == (
                TAKEOVER_PLUGIN
            ):
                found.append(request)
    return found


async def check_taken_over(c: Cluster, token: int, heir: WorkerProc) -> None:
    """``s1``'s lease is live again under a token greater than ``token``, owned by ``heir``,
    whose model got exactly one request ending with the takeover message, naming the call
    ``call-g1`` of the tool ``gate``."""
    new_token, _, live = await c.lease("s1")
    assert new_token > token and live
    assert await c.owner_pid("s1") == heir.pid
    asked = takeover_requests(c, "s1", [heir.pid])
    assert len(asked) == 1
    text = asked[0]["messages"][-1]["content"][0]["text"]
    assert 'tool "gate" (call call-g1): its outcome is unknown' in text


# --- kill -9 of the owner mid-tool -------------------------------------------------------------


async def test_kill_9_mid_tool_another_worker_repairs_and_continues(
    tmp_path: Path, schema: str
) -> None:
    """G-2, C7.2-9: SIGKILL of the worker whose tool call is running: after the sweeper's grace
    another worker resumes the session, repair answers the call TOOL_OUTCOME_UNKNOWN and ends the
    turn ``interrupted``, the model's next request ends with the takeover message naming the
    call, the turn carries on to ``completed``; the lease token is greater; an SSE watcher that
    was attached throughout sees every seq once, in order, without a gap."""
    async with cluster(tmp_path, schema) as c:
        workers = [c.start_worker(), c.start_worker()]
        victim = await c.held(*workers)
        survivor = next(w for w in workers if w is not victim)
        assert await poll(lambda: c.owner_pid("s1"), until=bool, timeout=WAIT) == victim.pid
        token, _, _ = await c.lease("s1")
        assert c.client is not None
        watcher = SseWatcher(c.client, "s1")
        await poll(lambda: now(len(watcher.ids)), until=bool, timeout=WAIT)

        started = time.monotonic()
        victim.kill()
        events = await c.wait_log("s1", lambda ev: turn_ends(ev) == ["interrupted", "completed"])
        took = time.monotonic() - started
        print(f"\nmeasured under load: kill -9 -> continued turn ended in {took:.2f} s")

        assert result_codes(events) == {"call-g1": "TOOL_OUTCOME_UNKNOWN"}
        types = [e.type for e in events]
        repair = types.index("session/end-seed")
        assert types[repair - 3 : repair + 1] == [
            "tool/result",
            "step/end",
            "turn/end",
            "session/end-seed",
        ]
        await check_taken_over(c, token, survivor)
        assert replies(events)[-1] == "continued after takeover"
        check_log("s1", events)
        await watcher.until(events[-1].seq)
        assert watcher.ids == list(range(1, len(watcher.ids) + 1))
        assert watcher.ids[-1] == events[-1].seq


# --- pg_terminate_backend of the owner's control connection ------------------------------------


async def test_terminated_control_connection_self_fences_and_is_taken_over(
    tmp_path: Path, schema: str
) -> None:
    """``pg_terminate_backend`` of the owner's control connection (found by
    ``application_name='steerloop-ctl:<id>'``) while its tool call runs: the worker
    self-fences (nothing more of its lifecycle is stored: no abort, no cancelled result),
    registers again under a new key, and the session is taken over like a crash — repair
    (TOOL_OUTCOME_UNKNOWN, ``interrupted``), the takeover message, a completed turn, a
    greater token."""
    async with cluster(tmp_path, schema) as c:
        workers = [c.start_worker(), c.start_worker()]
        owner = await c.held(*workers)
        token, old_key, _ = await c.lease("s1")
        started = time.monotonic()
        killed = await sql(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1",
            f"steerloop-ctl:{owner.worker_id}",
        )
        assert [r[0] for r in killed] == [True]
        events = await c.wait_log("s1", lambda ev: turn_ends(ev) == ["interrupted", "completed"])
        took = time.monotonic() - started
        print(f"\nmeasured under load: control connection killed -> continued in {took:.2f} s")
        assert result_codes(events) == {"call-g1": "TOOL_OUTCOME_UNKNOWN"}
        assert replies(events)[-1] == "continued after takeover"
        new_token, new_key, live = await c.lease("s1")
        assert new_token > token and new_key != old_key and live
        keys = await sql(f"SELECT worker_id, key FROM {c.t.workers}")
        assert {r["worker_id"] for r in keys} == {w.worker_id for w in workers}
        assert old_key not in {r["key"] for r in keys}  # the old registration is gone
        assert "self-fencing 1 sessions" in owner.log.read_text()
        check_log("s1", events)


# --- SIGSTOP / SIGCONT of the owner -------------------------------------------------------------


async def test_paused_owner_is_taken_over_and_appends_nothing_after_sigcont(
    tmp_path: Path, schema: str
) -> None:
    """G-2: SIGSTOP of the owner mid-tool (lease TTL 3 s through the store URL): its socket
    and lock live on, so the lease's expiry shows it; another worker takes the session over
    (repair, takeover message, completed turn, greater token). After SIGCONT its gate
    passes, but its fence is refused: the log never gets its result, nor anything else of
    it, and the session goes on with the new owner. (Its own loop may still take a step
    in memory before a commit or heartbeat tells it: group commit refuses at commit time.)"""
    async with cluster(tmp_path, schema, "&lease_ttl=3") as c:
        await c.lead()
        workers = [c.start_worker(), c.start_worker()]
        paused = await c.held(*workers)
        paused_pid = paused.pid
        other = next(w for w in workers if w is not paused)
        token, _, _ = await c.lease("s1")
        started = time.monotonic()
        os.kill(paused_pid, signal.SIGSTOP)
        try:
            events = await c.wait_log(
                "s1", lambda ev: turn_ends(ev) == ["interrupted", "completed"]
            )
            took = time.monotonic() - started
            print(f"\nmeasured under load: SIGSTOP (TTL 3 s) -> continued in {took:.2f} s")
            new_token, _, live = await c.lease("s1")
            assert new_token > token and live
            assert await c.owner_pid("s1") == other.pid
        finally:
            os.kill(paused_pid, signal.SIGCONT)
        assert result_codes(events) == {"call-g1": "TOOL_OUTCOME_UNKNOWN"}
        (tmp_path / "open-g1").touch()
        await poll(
            lambda: now((tmp_path / f"passed-g1.{paused_pid}").exists()), until=bool, timeout=WAIT
        )
        # Causally after the old owner's gate returned: one more turn on the new owner.
        await c.send("s1", "after")
        final = await c.wait_log("s1", lambda ev: len(turn_ends(ev)) == 3)
        assert turn_ends(final) == ["interrupted", "completed", "completed"]
        assert final[: len(events)] == events
        assert result_codes(final) == {"call-g1": "TOOL_OUTCOME_UNKNOWN"}
        assert replies(final) == ["", "continued after takeover", "echo after"]
        # Its in-memory turn may have gone on (the refusal comes with the commit), but
        # nothing of it reached the log, and the process lives on.
        assert "gate g1 passed" not in json.dumps([e.to_json() for e in final])
        assert paused.proc.poll() is None
        assert (await c.lease("s1"))[0] == new_token
        check_log("s1", final)


# --- chaos ---------------------------------------------------------------------------------------


async def test_seeded_chaos_across_three_workers(tmp_path: Path, schema: str) -> None:
    """Random followups, steers and cancels to four sessions across three worker processes,
    with workers killed (SIGKILL) and replaced along the way (seed ``STEERLOOP_CHAOS_SEED``,
    default 1313). At quiescence (SERVICE.md §5): every log passes ``validate_log`` and the
    well-formedness checks with contiguous seqs; each ``turn/start`` has one ``turn/end``;
    every message id is inserted exactly once; no command is left unconsumed, and each
    consumed message's ``consumed_seq`` is the splice that inserted it; and at no instant
    did two workers append to one session (``check_one_writer`` over the batches each worker
    process recorded as it committed them)."""
    seed = int(os.environ.get("STEERLOOP_CHAOS_SEED", "1313"))
    rng = random.Random(seed)
    print(f"\nchaos seed {seed}")
    sessions = [f"c{n}" for n in range(4)]
    async with cluster(tmp_path, schema) as c:
        assert c.client is not None
        client = c.client
        alive = [c.start_worker() for _ in range(3)]
        await c.registered(*alive)
        for sid in sessions:
            await c.create(sid, "hello")
        sent: list[str] = []
        kills = 0
        for step in range(60):
            sid = rng.choice(sessions)
            roll = rng.random()
            if roll < 0.45:
                mode = "followup" if rng.random() < 0.7 else "inject"
                content = f"sleep {rng.randrange(100, 800)}" if rng.random() < 0.6 else f"t{step}"
            elif roll < 0.65:
                mode, content = "steer", f"steer {step}"
            elif roll < 0.85:
                answer = await client.post(f"/v1/sessions/{sid}/cancel", json={})
                assert answer.status_code == 202, answer.text
                mode = ""
            else:
                mode = ""
                if kills < 3 and step > 5:
                    # Mostly the owner of a running session, so kills land mid-turn.
                    running = await sql(
                        f"SELECT w.pid FROM {c.t.specs} s JOIN {c.t.leases} l USING "
                        f"(session_id) JOIN {c.t.workers} w ON w.key = l.owner_key "
                        "WHERE s.status = 'running' AND l.lease_id IS NOT NULL "
                        "ORDER BY s.session_id"
                    )
                    owners = [w for w in alive if w.pid in {r["pid"] for r in running}]
                    victim = rng.choice(owners if owners and rng.random() < 0.8 else alive)
                    victim.kill()
                    alive.remove(victim)
                    kills += 1
                    alive.append(c.start_worker())
            if mode:
                message_id = f"m{step}"
                await c.send(sid, content, mode, message_id=message_id)
                sent.append(message_id)
            await asyncio.sleep(rng.uniform(0, 0.08))  # pacing of the workload, not a sync
        assert kills >= 1
        await c.registered(*alive)

        async def state() -> tuple[int, int, list[str], bool]:
            unconsumed = (
                await sql(f"SELECT count(*) FROM {c.t.commands} WHERE consumed_at IS NULL")
            )[0][0]
            wakeups = (await sql(f"SELECT count(*) FROM {c.t.wakeups}"))[0][0]
            statuses = [r["status"] for r in await sql(f"SELECT status FROM {c.t.specs}")]
            balanced = True
            for sid in sessions:
                events = await c.events(sid)
                starts = sum(e.type == "turn/start" for e in events)
                balanced = balanced and starts == len(turn_ends(events))
            return unconsumed, wakeups, statuses, balanced

        await poll(
            state,
            until=lambda s: s[0] == 0 and s[1] == 0 and "running" not in s[2] and s[3],
            timeout=90,
        )
        leaders = await sql(
            "SELECT a.application_name FROM pg_locks l JOIN pg_stat_activity a USING (pid) "
            "WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 2 "
            "AND l.classid::bigint = $1 AND l.objid = 0",
            namespace(schema),
        )
        # Leadership passed on through the kills: one live worker leads.
        assert [r[0] for r in leaders] in [[f"steerloop-ctl:{w.worker_id}"] for w in alive]
        commands = await sql(
            f"SELECT session_id, kind, message_id, consumed_seq FROM {c.t.commands} "
            "ORDER BY session_id, cmd_seq"
        )
        inserted: Counter[str] = Counter()
        interrupted = 0
        writers = 0
        batches = await committed_batches(c)
        for sid in sessions:
            events = await c.events(sid)
            check_log(sid, events)
            writers += check_one_writer(sid, events, batches)
            interrupted += turn_ends(events).count("interrupted")
            for event in events:
                if event.type == "agent/inbox/spliced":
                    inserted.update(m.id for m in event.data.inserted)
            for row in commands:
                if row["session_id"] != sid or row["kind"] == "cancel":
                    continue
                assert row["consumed_seq"] is not None, row
                splice = events[row["consumed_seq"] - 1]
                assert splice.type == "agent/inbox/spliced"
                assert row["message_id"] in {m.id for m in splice.data.inserted}
        assert set(inserted.values()) == {1}, [k for k, v in inserted.items() if v != 1]
        assert set(sent) <= set(inserted)
        print(
            f"chaos: {len(sent)} messages, {kills} kills, {interrupted} interrupted turns "
            f"taken over, {sum(inserted.values())} messages inserted, {len(batches)} batches "
            f"by {writers} (session, token) writers"
        )


# --- reconciliation ------------------------------------------------------------------------------


async def test_a_command_whose_wakeup_and_notify_were_lost_is_delivered(
    tmp_path: Path, schema: str
) -> None:
    """Reconciliation across processes: a command stored for an unloaded session with no
    wakeup and no NOTIFY (both lost) is found by the sweeper (older than 1 s, no live lease,
    no wakeup), woken, claimed and applied exactly once; its consumption names its splice."""
    async with cluster(tmp_path, schema) as c:
        worker = c.start_worker("--idle-unload", "0.3")
        await c.registered(worker)
        await c.create("r1", "hello")
        await c.wait_log("r1", lambda ev: turn_ends(ev) == ["completed"])

        async def unloaded() -> bool:
            rows = await sql(f"SELECT status FROM {c.t.specs} WHERE session_id = 'r1'")
            return rows[0]["status"] == "unloaded" and not (await c.lease("r1"))[2]

        await poll(unloaded, until=bool, timeout=WAIT)
        await sql(
            f"WITH s AS (UPDATE {c.t.specs} SET cmd_seq = cmd_seq + 1 WHERE session_id = 'r1' "
            f"RETURNING cmd_seq) INSERT INTO {c.t.commands} (session_id, cmd_seq, kind, "
            "message_id, body) SELECT 'r1', cmd_seq, 'followup', 'lost-1', "
            """'{"content": "found again"}'::json FROM s"""
        )
        assert await sql(f"SELECT * FROM {c.t.wakeups}") == []
        events = await c.wait_log("r1", lambda ev: turn_ends(ev) == ["completed", "completed"])
        assert replies(events) == ["echo hello", "echo found again"]
        rows = await sql(f"SELECT consumed_seq FROM {c.t.commands} WHERE message_id = 'lost-1'")
        splice = events[rows[0]["consumed_seq"] - 1]
        assert splice.type == "agent/inbox/spliced"
        assert [m.id for m in splice.data.inserted] == ["lost-1"]
        check_log("r1", events)


async def test_paused_owner_that_leads_the_sweep_is_deposed_and_taken_over(
    tmp_path: Path, schema: str
) -> None:
    """The paused owner is also the sweeper leader, so no sweep runs while it sleeps: the
    other worker sees the leader's heartbeat go stale, ends its control connection
    (``leader_stale_after``, 10 s), leads, and the session is taken over and continued; after
    SIGCONT the old worker finds its control connection gone and self-fences."""
    async with cluster(tmp_path, schema, "&lease_ttl=3") as c:
        first = c.start_worker()
        assert await c.held(first) is first

        async def leader_pid() -> int | None:
            rows = await sql(
                "SELECT a.application_name FROM pg_locks l JOIN pg_stat_activity a USING (pid) "
                "WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 2 "
                "AND l.classid::bigint = $1 AND l.objid = 0",
                namespace(schema),
            )
            return int(rows[0][0].rpartition(":")[2]) if rows else None

        assert await poll(leader_pid, until=bool, timeout=WAIT) == first.pid
        second = c.start_worker()
        await c.registered(second)
        token, _, _ = await c.lease("s1")
        started = time.monotonic()
        os.kill(first.pid, signal.SIGSTOP)
        try:
            events = await c.wait_log(
                "s1", lambda ev: turn_ends(ev) == ["interrupted", "completed"]
            )
            took = time.monotonic() - started
            print(f"\nmeasured under load: paused leader-owner -> continued in {took:.2f} s")
            assert await leader_pid() == second.pid
            assert (await c.lease("s1"))[0] > token
        finally:
            os.kill(first.pid, signal.SIGCONT)
        assert result_codes(events) == {"call-g1": "TOOL_OUTCOME_UNKNOWN"}
        assert replies(events)[-1] == "continued after takeover"
        await poll(lambda: now("self-fencing" in first.log.read_text()), until=bool, timeout=WAIT)
        assert "has no heartbeat" in second.log.read_text()
        check_log("s1", await c.events("s1"))
