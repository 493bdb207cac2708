"""The service on PostgreSQL with separate roles (API.md "Service", SERVICE.md §3.4): an API
node (uvicorn in this process, ``role="api"``) and worker processes (``steerloop serve
--role worker``) that meet only through the v2 tables."""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from steerloop.service import create_app

from . import pgprofiles
from .pgworkers import Pg, pg_schema, records, until, workers
from .served import served, turn_ends, types, wait_for_log

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
async def pg() -> AsyncIterator[Pg]:
    async with pg_schema() as found:
        yield found


@pytest.fixture
def files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """Where the model of every process records requests and where gates are opened."""
    gates = tmp_path / "gates"
    gates.mkdir()
    env = {
        "STEERLOOP_TEST_RECORD": str(tmp_path / "requests.jsonl"),
        "STEERLOOP_TEST_GATES": str(gates),
    }
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    return env


def api(pg: Pg, **options: Any) -> Any:
    return create_app(pg.url, pgprofiles.profiles, "api", **options)


def splices_of(events: list[dict[str, Any]], message_id: str) -> list[dict[str, Any]]:
    return [
        e
        for e in events
        if e["type"] == "agent/inbox/spliced"
        and any(m.get("id") == message_id for m in e["data"].get("inserted", ()))
    ]


async def counts(pg: Pg) -> tuple[int, int, int]:
    specs = await pg.val("SELECT count(*) FROM steerloop_specs")
    commands = await pg.val("SELECT count(*) FROM steerloop_commands")
    wakeups = await pg.val("SELECT count(*) FROM steerloop_wakeups")
    return specs, commands, wakeups


# --- the API node alone -------------------------------------------------------------------


async def test_an_unserved_profile_queues_and_the_101st_command_is_429(pg: Pg) -> None:
    """With no worker running, a create and every message are accepted and stay queued (the
    answer says so); the 101st unconsumed command of a session is 429 with Retry-After and
    is not stored; cmd_seq is gap-free."""
    async with served(api(pg)) as client:
        created = await client.post("/v1/sessions", json={"session_id": "q"})
        assert created.status_code == 201
        assert created.json()["queued"] is True
        assert "no running worker serves profile 'default' version 1" in created.json()["note"]
        for n in range(1, 101):
            sent = await client.post(
                "/v1/sessions/q/messages", json={"mode": "followup", "content": f"m{n}"}
            )
            assert sent.status_code == 202
            assert sent.json()["cmd_seq"] == n
            assert sent.json()["queued"] is True
        refused = await client.post(
            "/v1/sessions/q/messages", json={"mode": "steer", "content": "one too many"}
        )
        assert refused.status_code == 429
        assert refused.headers["retry-after"] == "1"
        assert refused.json()["error"]["code"] == "too_many_commands"
        seqs = await pg.fetch("SELECT cmd_seq FROM steerloop_commands ORDER BY cmd_seq")
        assert [row[0] for row in seqs] == list(range(1, 101))
        info = (await client.get("/v1/sessions/q")).json()
        assert info == {
            "session_id": "q",
            "profile": "default",
            "status": "queued",
            "queued_reason": "no running worker serves profile 'default' version 1",
            "last_seq": 0,
            "owner": None,
            "pending_approvals": [],
            "pending_inputs": [],
            "state": {},
            "pending_client_calls": [],
        }


async def test_bad_input_is_refused_and_writes_nothing(pg: Pg) -> None:
    """An unknown session is 404, an unknown profile or mode 422, an existing id 409: clear
    errors, and no spec, command or wakeup row is written by any of them."""
    async with served(api(pg)) as client:
        assert (await client.post("/v1/sessions", json={"session_id": "s"})).status_code == 201
        before = await counts(pg)
        assert before == (1, 0, 1)
        missing = await client.post(
            "/v1/sessions/nope/messages", json={"mode": "followup", "content": "x"}
        )
        assert missing.status_code == 404
        assert missing.json()["error"]["code"] == "session_not_found"
        assert (await client.post("/v1/sessions/nope/cancel", json={})).status_code == 404
        assert (await client.get("/v1/sessions/nope")).status_code == 404
        profile = await client.post("/v1/sessions", json={"session_id": "t", "profile": "zz"})
        assert profile.status_code == 422
        assert profile.json()["error"]["code"] == "unknown_profile"
        mode = await client.post("/v1/sessions/s/messages", json={"mode": "shout", "content": "x"})
        assert mode.status_code == 422
        assert mode.json()["error"]["code"] == "invalid_mode"
        again = await client.post("/v1/sessions", json={"session_id": "s", "input": "hi"})
        assert again.status_code == 409
        assert await counts(pg) == before


async def test_a_session_id_the_routes_cannot_address_is_refused(pg: Pg) -> None:
    """The PostgreSQL host refuses the same hostile ids through the same check (422
    ``invalid_session_id``): no spec, command, wakeup or event row is written."""
    from .test_service import HOSTILE_IDS

    async with served(api(pg)) as client:
        for session_id in HOSTILE_IDS:
            answer = await client.post(
                "/v1/sessions", json={"session_id": session_id, "input": "hi"}
            )
            assert answer.status_code == 422, session_id
            assert answer.json()["error"]["code"] == "invalid_session_id"
        assert await counts(pg) == (0, 0, 0)
        assert await pg.val("SELECT count(*) FROM steerloop_events") == 0
        created = await client.post("/v1/sessions", json={"session_id": "x" * 128})
        assert created.status_code == 201
        assert await counts(pg) == (1, 0, 1)


async def test_a_cancel_with_nothing_to_cancel_is_applied_by_the_api_node(pg: Pg) -> None:
    """A cancel for a session no worker holds, with nothing queued and no turn, is consumed
    at once as a no-op (no wakeup, nothing loaded); with a message queued before it, it is
    queued in order instead."""
    async with served(api(pg)) as client:
        await client.post("/v1/sessions", json={"session_id": "s"})
        await pg.fetch("DELETE FROM steerloop_wakeups")
        cancel = await client.post("/v1/sessions/s/cancel", json={})
        assert cancel.status_code == 202
        assert cancel.json() == {"cmd_seq": 1}
        rows = await pg.fetch(
            "SELECT cmd_seq, kind, consumed_at IS NOT NULL, consumed_seq FROM steerloop_commands"
        )
        assert [tuple(r) for r in rows] == [(1, "cancel", True, None)]
        assert await pg.val("SELECT count(*) FROM steerloop_wakeups") == 0
        await client.post("/v1/sessions/s/messages", json={"mode": "followup", "content": "x"})
        queued = await client.post("/v1/sessions/s/cancel", json={"keep_inbox": True})
        assert queued.json()["cmd_seq"] == 3 and queued.json()["queued"] is True
        rows = await pg.fetch(
            "SELECT cmd_seq, consumed_at IS NOT NULL, body::text FROM steerloop_commands "
            "WHERE cmd_seq > 1 ORDER BY cmd_seq"
        )
        assert [(r[0], r[1], json.loads(r[2])) for r in rows] == [
            (2, False, {"content": "x"}),
            (3, False, {"keep_inbox": True}),
        ]
        assert await pg.val("SELECT reason FROM steerloop_wakeups") == "command"


async def test_an_api_process_accepts_and_a_worker_process_applies(
    pg: Pg, files: dict[str, str], tmp_path: Path
) -> None:
    """``steerloop serve --role api`` and ``--role worker`` as two processes: the API one
    answers /healthz with its role and queues while no worker runs; a worker started later
    picks the queued session up and runs its turn."""
    import httpx

    async with workers(tmp_path, pg.url, 1, role="api", **files) as (node,):
        async with httpx.AsyncClient(base_url=node.base_url, timeout=15) as client:
            assert (await client.get("/healthz")).json()["role"] == "api"
            created = await client.post("/v1/sessions", json={"session_id": "s", "input": "hi"})
            assert created.status_code == 201 and created.json()["queued"] is True
            async with workers(tmp_path, pg.url, 1, **files) as (worker,):
                events = await wait_for_log(client, "s", lambda ev: turn_ends(ev) == 1)
                assert "assistant/message" in types(events)
                info = (await client.get("/v1/sessions/s")).json()
                assert info["owner"]["pid"] == worker.pid
                sent = await client.post(
                    "/v1/sessions/s/messages", json={"mode": "followup", "content": "more"}
                )
                assert "queued" not in sent.json()
                await wait_for_log(client, "s", lambda ev: turn_ends(ev) == 2)
                # Served mode's lease TTL is 15 s (SERVICE.md §3.3).
                left = await pg.val(
                    "SELECT extract(epoch FROM expires_at - now()) FROM steerloop_leases"
                )
                assert 0 < float(left) <= 15.0
        assert [r["users"] for r in records(Path(files["STEERLOOP_TEST_RECORD"]))] == [
            ["hi"],
            ["hi", "more"],
        ]


async def test_sqlite_refuses_the_split_roles(tmp_path: Path) -> None:
    """Roles api and worker need a store every process shares: SQLite is refused, clearly."""
    for role in ("api", "worker"):
        with pytest.raises(ValueError, match=f"role '{role}' needs a postgresql:// store"):
            create_app(f"sqlite:///{tmp_path / 's.db'}", (), role)
    proc = await asyncio.create_subprocess_exec(
        "python",
        "-c",
        "from steerloop.cli import main; main()",
        "serve",
        "--role",
        "worker",
        "--port",
        "0",
        "--store",
        f"sqlite:///{tmp_path / 's.db'}",
        env={**os.environ, "HOME": str(tmp_path), "PYTHONPATH": os.environ.get("PYTHONPATH", "")},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    try:
        out, _ = await asyncio.wait_for(proc.communicate(), 60)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    assert proc.returncode == 2
    assert "needs a postgresql:// store" in out.decode()


# --- API node + worker processes -------------------------------------------------------------


async def test_a_steer_accepted_by_the_api_reaches_the_owning_worker(
    pg: Pg, files: dict[str, str], tmp_path: Path
) -> None:
    """SERVICE.md §3.4 "Steer a session owned by another worker": the API node stores the
    steer and notifies the owner (a worker process); the owner splices it while the step is
    held, its consumption commits with that splice, and the next step's request has it."""
    async with workers(tmp_path, pg.url, 1, **files) as (worker,), served(api(pg)) as client:
        health = (await client.get(f"{worker.base_url}/healthz")).json()
        assert health["ok"] is True and health["role"] == "worker"
        assert (await client.get(f"{worker.base_url}/v1/sessions")).status_code == 404
        created = await client.post("/v1/sessions", json={"session_id": "s", "input": "gate a"})
        assert created.status_code == 201
        assert "queued" not in created.json()
        await wait_for_log(client, "s", lambda ev: "tool/call" in types(ev))
        info = (await client.get("/v1/sessions/s")).json()
        assert info["status"] == "running"
        assert info["owner"]["pid"] == worker.pid
        sent = await client.post(
            "/v1/sessions/s/messages",
            json={"mode": "steer", "content": "steered", "message_id": "m-steer"},
        )
        assert sent.status_code == 202
        assert sent.json() == {"cmd_seq": 2, "message_id": "m-steer"}
        events = await wait_for_log(client, "s", lambda ev: splices_of(ev, "m-steer"))
        (splice,) = splices_of(events, "m-steer")
        assert splice["data"]["target"] == "next-step"
        consumed = await until(
            lambda: pg.fetch(
                "SELECT cmd_seq, consumed_seq FROM steerloop_commands "
                "WHERE consumed_at IS NOT NULL ORDER BY cmd_seq"
            ),
            "both commands consumed",
        )
        first = splices_of(events, events[0]["data"]["inserted"][0]["id"])[0]
        assert [tuple(r) for r in consumed] == [(1, first["seq"]), (2, splice["seq"])]
        (Path(files["STEERLOOP_TEST_GATES"]) / "a").touch()
        events = await wait_for_log(client, "s", lambda ev: turn_ends(ev) == 1)
        assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
        assert [r["users"] for r in records(Path(files["STEERLOOP_TEST_RECORD"]))] == [
            ["gate a"],
            ["gate a", "steered"],
        ]
        assert {r["pid"] for r in records(Path(files["STEERLOOP_TEST_RECORD"]))} == {worker.pid}
        status = await until(
            lambda: _status(client, "s", "idle"), "the owner to report the session idle"
        )
        assert status["owner"]["pid"] == worker.pid


async def _status(client: Any, session_id: str, wanted: str) -> dict[str, Any] | None:
    info: dict[str, Any] = (await client.get(f"/v1/sessions/{session_id}")).json()
    return info if info["status"] == wanted else None


async def test_a_cancel_reaches_the_owner_and_aborts_the_turn(
    pg: Pg, files: dict[str, str], tmp_path: Path
) -> None:
    """SERVICE.md §3.4 "Cancel": the owner consumes the cancel with a fenced update first,
    then aborts the running turn (cause user) and clears the queued followup."""
    async with workers(tmp_path, pg.url, 1, **files), served(api(pg)) as client:
        await client.post("/v1/sessions", json={"session_id": "s", "input": "gate c"})
        await wait_for_log(client, "s", lambda ev: "tool/call" in types(ev))
        later = await client.post(
            "/v1/sessions/s/messages",
            json={"mode": "followup", "content": "later", "message_id": "m-later"},
        )
        assert later.json()["cmd_seq"] == 2
        await wait_for_log(client, "s", lambda ev: splices_of(ev, "m-later"))
        cancel = await client.post("/v1/sessions/s/cancel", json={})
        assert cancel.json() == {"cmd_seq": 3}
        events = await wait_for_log(client, "s", lambda ev: turn_ends(ev) == 1)
        end = events[-1]
        assert end["type"] == "turn/end"
        assert end["data"]["reason"] == {"kind": "aborted", "reason": {"kind": "user"}}
        cleared = [
            e
            for e in events
            if e["type"] == "agent/inbox/spliced"
            and e["data"].get("outcome") == "canceled"
            and e["data"]["removed_count"] == 1
            and e["data"]["target"] == "next-turn"
        ]
        assert len(cleared) == 1
        rows = await pg.fetch(
            "SELECT cmd_seq, consumed_at IS NOT NULL, consumed_seq IS NULL "
            "FROM steerloop_commands ORDER BY cmd_seq"
        )
        assert [tuple(r) for r in rows] == [(1, True, False), (2, True, False), (3, True, True)]
        await until(lambda: _status(client, "s", "idle"), "the owner to report idle")
        # Nothing ran after the cancel: the followup was cleared, not started.
        assert turn_ends((await client.get("/v1/sessions/s/log")).json()["events"]) == 1
        assert [r["users"] for r in records(Path(files["STEERLOOP_TEST_RECORD"]))] == [["gate c"]]


async def test_an_approval_decided_on_the_api_node_is_applied_by_the_owner(
    pg: Pg, files: dict[str, str], tmp_path: Path
) -> None:
    """EVENTS.md §2.4a over two processes: the API node lists the pending call from the
    stored log, refuses an unknown call (404) with nothing written, stores the decision as an
    ``approval`` command; the owning worker applies it with ``decide_approval`` (by http)
    and the command's consumption rides on the ``tool/approval-decided`` event; deciding
    again is 409."""
    async with workers(tmp_path, pg.url, 1, **files), served(api(pg)) as client:
        await client.post("/v1/sessions", json={"session_id": "s", "input": "write f1"})
        events = await wait_for_log(client, "s", lambda ev: "tool/approval-requested" in types(ev))
        pending = (await client.get("/v1/sessions/s")).json()["pending_approvals"]
        assert pending == [
            {
                "call_id": "call-f1",
                "name": "write",
                "arguments": '{"path": "f1"}',
                "reason": "write changes files",
            }
        ]
        unknown = await client.post("/v1/sessions/s/approvals/nope", json={"decision": "allow"})
        assert unknown.status_code == 404
        assert await pg.val("SELECT count(*) FROM steerloop_commands") == 1
        decided = await client.post(
            "/v1/sessions/s/approvals/call-f1", json={"decision": "allow", "reason": "ok"}
        )
        assert decided.status_code == 202
        assert decided.json() == {"cmd_seq": 2}
        events = await wait_for_log(client, "s", lambda ev: turn_ends(ev) == 1)
        (decision,) = [e for e in events if e["type"] == "tool/approval-decided"]
        assert decision["data"]["call_id"] == "call-f1"
        assert decision["data"]["decision"] == "allow"
        assert decision["data"]["by"] == "http"
        (result,) = [e for e in events if e["type"] == "tool/result"]
        assert result["seq"] > decision["seq"]
        consumed = await until(
            lambda: pg.fetch(
                "SELECT consumed_seq FROM steerloop_commands WHERE kind = 'approval' "
                "AND consumed_at IS NOT NULL"
            ),
            "the approval consumed",
        )
        assert consumed[0][0] == decision["seq"]
        assert (await client.get("/v1/sessions/s")).json()["pending_approvals"] == []
        again = await client.post("/v1/sessions/s/approvals/call-f1", json={"decision": "deny"})
        assert again.status_code == 409
        assert await pg.val("SELECT count(*) FROM steerloop_commands") == 2


async def test_the_same_idempotency_key_applies_once(
    pg: Pg, files: dict[str, str], tmp_path: Path
) -> None:
    """A retried POST with the same idempotency key gets the same status and body, and the
    message is stored once as a command and spliced once into the log."""
    async with workers(tmp_path, pg.url, 1, **files), served(api(pg)) as client:
        assert (await client.post("/v1/sessions", json={"session_id": "s"})).status_code == 201
        body = {"mode": "followup", "content": "once", "idempotency_key": "k1"}
        first = await client.post("/v1/sessions/s/messages", json=body)
        second = await client.post("/v1/sessions/s/messages", json=body)
        assert first.status_code == second.status_code == 202
        assert first.json() == second.json()
        message_id = first.json()["message_id"]
        events = await wait_for_log(client, "s", lambda ev: turn_ends(ev) == 1)
        third = await client.post("/v1/sessions/s/messages", json=body)  # after it was applied
        assert third.status_code == 202 and third.json() == first.json()
        assert len(splices_of(events, message_id)) == 1
        rows = await pg.fetch("SELECT cmd_seq, idem_key, message_id FROM steerloop_commands")
        assert [tuple(r) for r in rows] == [(1, "k1", message_id)]
        events = (await client.get("/v1/sessions/s/log")).json()["events"]
        assert len(splices_of(events, message_id)) == 1
        assert turn_ends(events) == 1


async def test_idle_unload_then_reload_on_another_worker(
    pg: Pg, files: dict[str, str], tmp_path: Path
) -> None:
    """An idle session is unloaded (no live lease, status unloaded, owner null); its next
    message reloads it on any worker with capacity, here the other one, which resumes the
    whole history."""
    async with (
        workers(tmp_path, pg.url, 1, "--idle-unload", "0.5", **files) as (first,),
        served(api(pg)) as client,
    ):
        await client.post("/v1/sessions", json={"session_id": "s", "input": "hello"})
        await wait_for_log(client, "s", lambda ev: turn_ends(ev) == 1)
        await until(lambda: _status(client, "s", "unloaded"), "the idle session to unload")
        live = await pg.val(
            "SELECT count(*) FROM steerloop_leases WHERE lease_id IS NOT NULL "
            "AND expires_at > now()"
        )
        assert live == 0
        assert await pg.val("SELECT status FROM steerloop_specs") == "unloaded"
        first.kill()
        await asyncio.wait_for(first.proc.wait(), 15)
        async with workers(tmp_path, pg.url, 1, **files) as (second,):
            sent = await client.post(
                "/v1/sessions/s/messages", json={"mode": "followup", "content": "again"}
            )
            assert sent.status_code == 202
            events = await wait_for_log(client, "s", lambda ev: turn_ends(ev) == 2)
            assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
            info = (await client.get("/v1/sessions/s")).json()
            assert info["owner"]["pid"] == second.pid
        seen = records(Path(files["STEERLOOP_TEST_RECORD"]))
        assert [(r["pid"], r["users"]) for r in seen] == [
            (first.pid, ["hello"]),
            (second.pid, ["hello", "again"]),
        ]


async def test_a_fenced_out_batch_loses_the_consumption(pg: Pg, files: dict[str, str]) -> None:
    """The consumption of a command rides on the batch of its splice: when the owner's lease
    was revoked under it, that batch (splice and consumption) is refused; the command stays
    unconsumed and the session, loaded again, applies it once, under the new token."""
    from steerloop.session._postgres import PostgresStore

    app = create_app(pg.url, pgprofiles.profiles, "all")
    async with served(app) as client:
        await client.post("/v1/sessions", json={"session_id": "s", "input": "gate b"})
        await wait_for_log(client, "s", lambda ev: "tool/call" in types(ev))
        store = PostgresStore(pg.url)
        try:
            lease = await store.lease("s")
            assert lease is not None and lease.live
            old_token = lease.token
            # The revocation lands first; the command then finds no live lease and wakes the
            # session, which is still resident here: the stale owner applies it, and its
            # batch is refused by the fence.
            assert await store.revoke_lease("s")
            sent = await client.post(
                "/v1/sessions/s/messages",
                json={"mode": "steer", "content": "after", "message_id": "m-after"},
            )
            assert sent.status_code == 202
            row = await until(
                lambda: pg.fetch(
                    "SELECT consumed_seq FROM steerloop_commands "
                    "WHERE message_id = 'm-after' AND consumed_at IS NOT NULL"
                ),
                "the steer consumed by the reloaded session",
            )
            events = await wait_for_log(client, "s", lambda ev: splices_of(ev, "m-after"))
            (splice,) = splices_of(events, "m-after")
            assert row[0][0] == splice["seq"]
            lease = await store.lease("s")
            assert lease is not None and lease.token > old_token + 1
            assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
            # Resumed with repair before the steer was applied again: the held turn ended
            # interrupted (then the takeover followup may run a turn of its own).
            ended = [e for e in events if e["type"] == "turn/end" and e["seq"] < splice["seq"]]
            assert ended[0]["data"]["reason"]["kind"] == "interrupted"
        finally:
            await store.close()
        stored = json.loads(
            await pg.val("SELECT body FROM steerloop_commands WHERE message_id = 'm-after'")
        )
        assert stored["content"] == "after"
        assert await pg.val("SELECT count(*) FROM steerloop_commands") == 2


async def test_hostile_command_rows_are_consumed_and_the_next_one_applies(
    pg: Pg, files: dict[str, str]
) -> None:
    """Rows written behind the API's back (no NOTIFY: the owner's recheck finds them) with a
    body that is not an object, text that is not a string, no message id, or a kind the
    worker has nothing to do for are consumed without harm; the command after them
    applies, in order."""
    app = create_app(pg.url, pgprofiles.profiles, "all")
    async with served(app) as client:
        await client.post("/v1/sessions", json={"session_id": "s", "input": "first"})
        await wait_for_log(client, "s", lambda ev: turn_ends(ev) == 1)
        rows = [
            (2, "followup", "m-a", '"just a string"'),
            (3, "steer", "m-b", '{"content": 42}'),
            (4, "dispose", None, "{}"),
            (5, "approval", None, '{"call_id": ["x"]}'),
            (6, "followup", None, '{"content": "no id"}'),
            (7, "followup", "m-ok", '{"content": "ok"}'),
        ]
        for cmd_seq, kind, message_id, body in rows:
            await pg.fetch(
                "INSERT INTO steerloop_commands (session_id, cmd_seq, kind, message_id, body) "
                "VALUES ('s', $1, $2, $3, $4::json)",
                cmd_seq,
                kind,
                message_id,
                body,
            )
        await pg.fetch("UPDATE steerloop_specs SET cmd_seq = 7")
        events = await wait_for_log(client, "s", lambda ev: turn_ends(ev) == 3)
        unconsumed = "SELECT count(*) FROM steerloop_commands WHERE consumed_at IS NULL"
        await until(lambda: _is_zero(pg.val(unconsumed)), "every row consumed")
        assert await pg.val("SELECT count(*) FROM steerloop_commands") == 7
        assert splices_of(events, "m-a") == [] and splices_of(events, "m-b") == []
        assert len(splices_of(events, "m-ok")) == 1
        users = [r["users"] for r in records(Path(files["STEERLOOP_TEST_RECORD"]))]
        assert users == [["first"], ["first", "no id"], ["first", "no id", "ok"]]


async def _is_zero(value: Any) -> bool:
    return bool(await value == 0)


async def test_an_agui_run_through_the_api_node_and_a_worker(
    pg: Pg, files: dict[str, str], tmp_path: Path
) -> None:
    """``POST /v1/agui`` on an API node creates the thread's session, sends the message to
    the worker process that claims it, and streams the run from the stored log to
    ``RUN_FINISHED``."""
    from ag_ui.core import EventType

    from .aguisupport import agui_run, run_input, user

    async with workers(tmp_path, pg.url, 1, **files), served(api(pg)) as client:
        events = await agui_run(client, run_input("t1", "r1", user("u1", "hello")))
        assert events[0].type == EventType.RUN_STARTED
        assert events[-1].type == EventType.RUN_FINISHED
        text = "".join(e.delta for e in events if e.type == EventType.TEXT_MESSAGE_CONTENT)
        assert text == "reply to hello"
        assert [r["users"] for r in records(Path(files["STEERLOOP_TEST_RECORD"]))] == [["hello"]]


async def test_a_worker_claims_only_the_profiles_it_serves(
    pg: Pg, files: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SERVICE.md §3.3 (versioning): a session of a profile no running worker serves is
    accepted, says it is queued and stays untouched while another profile's session runs;
    a worker serving that profile, started later, claims and runs it."""
    monkeypatch.setenv("STEERLOOP_TEST_PROFILES", "default,other")  # what the API node knows
    async with workers(tmp_path, pg.url, 1, **files), served(api(pg)) as client:
        other = await client.post(
            "/v1/sessions", json={"session_id": "o", "profile": "other", "input": "for other"}
        )
        assert other.status_code == 201 and other.json()["queued"] is True
        mine = await client.post("/v1/sessions", json={"session_id": "d", "input": "for default"})
        assert "queued" not in mine.json()
        await wait_for_log(client, "d", lambda ev: turn_ends(ev) == 1)
        more = await client.post(
            "/v1/sessions/o/messages", json={"mode": "followup", "content": "still waiting"}
        )
        assert more.json()["queued"] is True
        assert (await client.get("/v1/sessions/o/log")).json()["events"] == []
        waiting = await pg.fetch(
            "SELECT w.claimed_by, count(c.*) FROM steerloop_wakeups w JOIN steerloop_commands c "
            "USING (session_id) WHERE w.session_id = 'o' AND c.consumed_at IS NULL "
            "GROUP BY w.claimed_by"
        )
        assert [tuple(r) for r in waiting] == [(None, 2)]
        async with workers(tmp_path, pg.url, 1, STEERLOOP_TEST_PROFILES="other", **files) as (
            serving,
        ):
            await wait_for_log(client, "o", lambda ev: turn_ends(ev) >= 1)
            info = (await client.get("/v1/sessions/o")).json()
            assert info["profile"] == "other" and info["owner"]["pid"] == serving.pid


async def test_a_full_worker_unloads_its_least_recent_idle_session_to_admit_a_new_one(
    pg: Pg, files: dict[str, str], tmp_path: Path
) -> None:
    """Fair capacity: ``--capacity 2`` filled by two idle sessions (the idle unload is 300 s
    away): a third session's message is served promptly by that worker, which unloads the
    least recently active idle session (its lease released, status unloaded) to admit it;
    the unloaded one's next message reloads it in turn."""
    async with (
        workers(tmp_path, pg.url, 1, "--capacity", "2", **files) as (worker,),
        served(api(pg)) as client,
    ):
        for sid in ("a", "b"):
            await client.post("/v1/sessions", json={"session_id": sid, "input": f"first {sid}"})
            await wait_for_log(client, sid, lambda ev: turn_ends(ev) == 1)
        # a is active again after b: b is the least recently active.
        await client.post("/v1/sessions/a/messages", json={"mode": "followup", "content": "a2"})
        await wait_for_log(client, "a", lambda ev: turn_ends(ev) == 2)
        started = time.monotonic()
        await client.post("/v1/sessions", json={"session_id": "c", "input": "first c"})
        await wait_for_log(client, "c", lambda ev: turn_ends(ev) == 1)  # bounded: 15 s
        print(f"\nmeasured under load: admitted in place of an idle session, turn ended in "
              f"{time.monotonic() - started:.2f} s")  # fmt: skip
        info = {sid: (await client.get(f"/v1/sessions/{sid}")).json() for sid in "abc"}
        assert info["c"]["owner"]["pid"] == worker.pid
        assert info["a"]["owner"]["pid"] == worker.pid
        assert (info["b"]["status"], info["b"]["owner"]) == ("unloaded", None)
        live = "SELECT count(*) FROM steerloop_leases WHERE lease_id IS NOT NULL"
        assert await pg.val(live) == 2
        # b comes back the same way (a, now the least recently active, makes room).
        await client.post("/v1/sessions/b/messages", json={"mode": "followup", "content": "b2"})
        await wait_for_log(client, "b", lambda ev: turn_ends(ev) == 2)
        assert (await client.get("/v1/sessions/b")).json()["owner"]["pid"] == worker.pid
        assert (await client.get("/v1/sessions/a")).json()["owner"] is None
        assert await pg.val(live) == 2


async def test_a_worker_whose_sessions_are_all_busy_leaves_a_new_one_queued(
    pg: Pg, files: dict[str, str], tmp_path: Path
) -> None:
    """Fair capacity: ``--capacity 2`` with both sessions running (each held in its tool):
    a third session is left for another worker, and ``GET /v1/sessions/{id}`` says
    ``queued`` with the reason; a worker started later claims and serves it, and the busy
    sessions go on where they were."""
    gates = Path(files["STEERLOOP_TEST_GATES"])
    async with (
        workers(tmp_path, pg.url, 1, "--capacity", "2", **files) as (full,),
        served(api(pg)) as client,
    ):
        for sid in ("a", "b"):
            await client.post("/v1/sessions", json={"session_id": sid, "input": f"gate g{sid}"})
        for sid in ("a", "b"):
            await wait_for_log(client, sid, lambda ev: "tool/call" in types(ev))
        await client.post("/v1/sessions", json={"session_id": "c", "input": "first c"})
        reason = (
            "every worker serving profile 'default' version 1 is at capacity and all its "
            "sessions are busy (1 worker)"
        )
        info = await until(lambda: _status(client, "c", "queued"), "c to be queued")
        assert info["queued_reason"] in (reason, "waiting for a worker to claim it")
        info = await until(
            lambda: _queued_for(client, "c", reason), "the reason to name the busy worker"
        )
        assert (info["owner"], info["last_seq"]) == (None, 0)
        async with workers(tmp_path, pg.url, 1, **files) as (spare,):
            await wait_for_log(client, "c", lambda ev: turn_ends(ev) == 1)
            assert (await client.get("/v1/sessions/c")).json()["owner"]["pid"] == spare.pid
            for sid in ("a", "b"):
                (gates / f"g{sid}").touch()
                await wait_for_log(client, sid, lambda ev: turn_ends(ev) == 1)
                assert (await client.get(f"/v1/sessions/{sid}")).json()["owner"]["pid"] == full.pid
        seen = records(Path(files["STEERLOOP_TEST_RECORD"]))
        assert (full.pid, ["first c"]) not in [(r["pid"], r["users"]) for r in seen]


async def _queued_for(client: Any, session_id: str, reason: str) -> dict[str, Any] | None:
    info = await _status(client, session_id, "queued")
    return info if info is not None and info.get("queued_reason") == reason else None
