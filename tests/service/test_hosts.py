"""The service's behaviour on both hosts (``hosts.HOSTS``): the in-process host on SQLite
and an API node on PostgreSQL with a worker process. One test per behaviour, parametrised,
where the two hosts promise the same."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import httpx
import pytest

from .hosts import HOSTS, open_host
from .pgworkers import until
from .served import WAIT, turn_ends, types, wait_for_log

pytestmark = pytest.mark.timeout(120)

HOSTILE_IDS = [
    "a/b",
    "/",
    "trailing/",
    ".",
    "..",
    "nul\x00",
    "tab\there",
    "new\nline",
    "\x7f",
    "x" * 129,
]
"""Session ids no route could address (a ``/`` ends the path segment, clients collapse dot
segments, control characters, over ``MAX_SESSION_ID``)."""

AGUI_BODY = {
    "runId": "r1",
    "state": {},
    "messages": [{"id": "m1", "role": "user", "content": "hi"}],
    "tools": [],
    "context": [],
    "forwardedProps": {},
}


@pytest.mark.parametrize("kind", HOSTS)
async def test_bad_input_is_refused_and_writes_nothing(
    kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An unknown session is 404, an unknown profile, mode or body 422, bad JSON 400, a
    body over the limit 413, an existing id 409: each a clear error, and nothing is written
    by any of them (no session, event, spec or command)."""
    async with open_host(kind, tmp_path, monkeypatch, body_limit=1000) as host:
        client = host.client
        cases = [
            (
                client.post("/v1/sessions/nope/messages", json={"mode": "steer", "content": "x"}),
                404,
                "session_not_found",
            ),
            (client.post("/v1/sessions/nope/cancel", json={}), 404, "session_not_found"),
            (client.get("/v1/sessions/nope"), 404, "session_not_found"),
            (client.get("/v1/sessions/nope/log"), 404, "session_not_found"),
            (client.get("/v1/sessions/nope/events"), 404, "session_not_found"),
            (client.post("/v1/sessions", json={"profile": "other"}), 422, "unknown_profile"),
            (client.post("/v1/sessions", content=b"{not json"), 400, "invalid_json"),
            (client.post("/v1/sessions", json=[1]), 422, "invalid_body"),
            (
                client.post("/v1/sessions", json={"session_id": "a", "color": 1}),
                422,
                "invalid_body",
            ),
            (
                client.post("/v1/sessions", json={"session_id": "a", "input": 5}),
                422,
                "invalid_body",
            ),
            (
                client.post("/v1/sessions", json={"session_id": "a", "input": "x" * 2000}),
                413,
                "body_too_large",
            ),
            (client.get("/v1/nothing"), 404, "not_found"),
        ]
        for request, status, code in cases:
            answer = await request
            assert (answer.status_code, answer.json()["error"]["code"]) == (status, code)
            assert answer.json()["error"]["message"]
        assert (await client.get("/v1/sessions")).json() == {"sessions": []}
        assert (await client.post("/v1/sessions", json={"session_id": "s"})).status_code == 201
        await host.loaded("s")
        before = await host.written()
        assert set(before["sessions"]) == {"s"}
        if kind == "postgresql":
            assert (before["specs"], before["commands"], before["wakeups"]) == (1, 0, 0)
        for body, code in [
            ({"mode": "shout", "content": "x"}, "invalid_mode"),
            ({"mode": "steer", "content": 3}, "invalid_body"),
            ({"mode": "steer", "content": "x", "message_id": ""}, "invalid_body"),
        ]:
            answer = await client.post("/v1/sessions/s/messages", json=body)
            assert (answer.status_code, answer.json()["error"]["code"]) == (422, code)
        again = await client.post("/v1/sessions", json={"session_id": "s", "input": "hi"})
        assert (again.status_code, again.json()["error"]["code"]) == (409, "session_exists")
        bad = await client.get("/v1/sessions/s/events", headers={"Last-Event-ID": "x:1"})
        assert bad.status_code == 422
        assert (await client.get("/v1/sessions/s/log")).json() == {"events": [], "last_seq": 0}
        assert await host.written() == before
        assert host.requests() == []


@pytest.mark.parametrize("kind", HOSTS)
async def test_a_session_id_the_routes_cannot_address_is_refused(
    kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each hostile id is 422 ``invalid_session_id`` with a message naming the problem, by
    POST /v1/sessions and by an AG-UI threadId, and nothing is written (no session, event,
    spec, command, model request); 128 characters and a dot inside an id are fine and
    addressable."""
    async with open_host(kind, tmp_path, monkeypatch) as host:
        client = host.client
        for session_id in HOSTILE_IDS:
            answer = await client.post(
                "/v1/sessions", json={"session_id": session_id, "input": "hi"}
            )
            assert answer.status_code == 422, session_id
            error = answer.json()["error"]
            assert error["code"] == "invalid_session_id"
            assert error["message"].startswith("session id ")
        agui = await client.post("/v1/agui", json={"threadId": "t/1", **AGUI_BODY})
        assert agui.status_code == 422
        assert agui.json()["error"]["code"] == "invalid_session_id"
        assert (await client.get("/v1/sessions")).json() == {"sessions": []}
        nothing: dict[str, object] = {"sessions": {}}
        if host.pg is not None:
            nothing |= {"specs": 0, "commands": 0, "wakeups": 0}
        assert await host.written() == nothing
        assert host.requests() == []
        for session_id in ["x" * 128, "a.b"]:
            created = await client.post("/v1/sessions", json={"session_id": session_id})
            assert created.status_code == 201
            await host.loaded(session_id)
        written = await host.written()
        assert sorted(written["sessions"]) == sorted(["x" * 128, "a.b"])
        if host.pg is not None:
            assert (written["specs"], written["commands"], written["wakeups"]) == (2, 0, 0)


@pytest.mark.parametrize("kind", HOSTS)
async def test_the_same_idempotency_key_applies_once(
    kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A retried POST with the same idempotency key gets the same status and body, before
    and after the message was applied; the message is spliced once, the model asked once,
    and on PostgreSQL stored once as a command."""
    async with open_host(kind, tmp_path, monkeypatch) as host:
        client = host.client
        assert (await client.post("/v1/sessions", json={"session_id": "s"})).status_code == 201
        body = {"mode": "followup", "content": "once", "idempotency_key": "k1"}
        first = await client.post("/v1/sessions/s/messages", json=body)
        second = await client.post("/v1/sessions/s/messages", json=body)
        assert first.status_code == second.status_code == 202
        assert first.json() == second.json()
        message_id = first.json()["message_id"]
        await wait_for_log(client, "s", lambda ev: turn_ends(ev) == 1)
        third = await client.post("/v1/sessions/s/messages", json=body)  # after it was applied
        assert third.status_code == 202 and third.json() == first.json()
        events = (await client.get("/v1/sessions/s/log")).json()["events"]
        inserted = [
            m["id"]
            for e in events
            if e["type"] == "agent/inbox/spliced"
            for m in e["data"]["inserted"]
        ]
        assert inserted == [message_id]
        assert turn_ends(events) == 1
        assert [r["users"] for r in host.requests()] == [["once"]]
        if host.pg is not None:
            rows = await host.pg.fetch(
                "SELECT cmd_seq, idem_key, message_id FROM steerloop_commands"
            )
            assert [tuple(r) for r in rows] == [(1, "k1", message_id)]


def splices_of(events: list[dict[str, Any]], message_id: str) -> list[dict[str, Any]]:
    return [
        e
        for e in events
        if e["type"] == "agent/inbox/spliced"
        and any(m.get("id") == message_id for m in e["data"].get("inserted", ()))
    ]


async def status_is(client: httpx.AsyncClient, session_id: str, wanted: str) -> dict[str, Any]:
    """Until ``GET /v1/sessions/{id}`` says ``wanted``; its body."""
    async with asyncio.timeout(WAIT):
        while (info := (await client.get(f"/v1/sessions/{session_id}")).json())["status"] != wanted:
            await asyncio.sleep(0.02)
    result: dict[str, Any] = info
    return result


@pytest.mark.parametrize("kind", HOSTS)
async def test_a_steer_is_seen_by_the_next_step(
    kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SERVICE.md §3.4 "Steer a session owned by another worker": a steer accepted while a
    tool runs reaches the session's owner (on PostgreSQL a worker process, notified by the
    API node), is spliced while the step is held (on PostgreSQL its consumption commits
    with that splice), and the next step's request has it, with the client's message id as
    the ``UserMessage`` id."""
    async with open_host(kind, tmp_path, monkeypatch) as host:
        client = host.client
        if host.worker is not None:
            health = (await client.get(f"{host.worker.base_url}/healthz")).json()
            assert health["ok"] is True and health["role"] == "worker"
            assert (await client.get(f"{host.worker.base_url}/v1/sessions")).status_code == 404
        created = await client.post("/v1/sessions", json={"session_id": "s", "input": "gate a"})
        assert created.status_code == 201
        assert "queued" not in created.json()
        await wait_for_log(client, "s", lambda ev: "tool/call" in types(ev))
        info = await status_is(client, "s", "running")
        assert info["owner"]["pid"] == host.owner_pid
        sent = await client.post(
            "/v1/sessions/s/messages",
            json={"mode": "steer", "content": "steered", "message_id": "m-steer"},
        )
        assert sent.status_code == 202
        assert sent.json() == {"cmd_seq": 2, "message_id": "m-steer"}  # the input was 1
        # spliced while the tool still runs
        events = await wait_for_log(client, "s", lambda ev: splices_of(ev, "m-steer"))
        (splice,) = splices_of(events, "m-steer")
        assert splice["data"]["target"] == "next-step"
        if host.pg is not None:
            consumed = await until(
                lambda: host.pg.fetch(
                    "SELECT cmd_seq, consumed_seq FROM steerloop_commands "
                    "WHERE consumed_at IS NOT NULL ORDER BY cmd_seq"
                ),
                "both commands consumed",
            )
            first = splices_of(events, events[0]["data"]["inserted"][0]["id"])[0]
            assert [tuple(r) for r in consumed] == [(1, first["seq"]), (2, splice["seq"])]
        host.open_gate("a")
        events = await wait_for_log(client, "s", lambda ev: turn_ends(ev) == 1)
        assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
        requests = host.requests()
        assert [r["users"] for r in requests] == [["gate a"], ["gate a", "steered"]]
        assert requests[1]["last_id"] == "m-steer"
        assert {r["pid"] for r in requests} == {host.owner_pid}
        info = await status_is(client, "s", "idle")
        assert info["owner"]["pid"] == host.owner_pid
