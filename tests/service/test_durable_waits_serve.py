"""A frontend tool's call survives ``steerloop serve`` being SIGKILLed (issue 26, "the turn
waits durably"): the real server on a SQLite file, the AG-UI client's runs over HTTP. After a
restart the call still waits (the turn is taken up when the session loads), and the client's
next run — its tool message and ``resume`` — completes that same call: its ``tool/result``
carries the call's id, the turn continues and the model receives the result."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from .aguisupport import (
    PICK,
    agui_run,
    assert_client_result_run,
    client_result,
    run_input,
    user,
    wire,
)
from .test_crash_exact import full_log, serving

pytestmark = pytest.mark.timeout(300)

PROFILES = "tests.service.waitprofiles:profiles"


def requests_of(path: Path, session: str) -> list[dict[str, Any]]:
    lines = path.read_text().splitlines() if path.exists() else []
    return [r for r in map(json.loads, lines) if r["session"] == session]


def types_from(events: list[dict[str, Any]], first: str) -> list[str]:
    kinds = [e["type"] for e in events]
    return kinds[kinds.index(first) :]


async def waiting(client: httpx.AsyncClient, thread: str, name: str) -> None:
    """A run on ``thread`` whose model calls the client tool: it ends with the interrupt
    naming ``pick-NAME`` (once the call's ``tool/deferred`` is durable: the run's feed
    serves durable events only)."""
    events = await agui_run(
        client, run_input(thread, "r1", user("u1", f"pick {name}"), tools=[PICK])
    )
    end = wire(events[-1])
    assert end["outcome"]["type"] == "interrupt", end
    assert [i["id"] for i in end["outcome"]["interrupts"]] == [f"pick-{name}"]


async def ended(client: httpx.AsyncClient, thread: str) -> list[dict[str, Any]]:
    """The log of ``thread`` once it ends with a ``turn/end`` (bounded)."""
    async with asyncio.timeout(60):
        while (log := await full_log(client, thread))[-1]["type"] != "turn/end":
            await asyncio.sleep(0.05)
    return log


def answer(thread: str, run: str, name: str, result: str) -> dict[str, Any]:
    return client_result(thread, run, f"pick {name}", f"pick-{name}", result)


async def test_a_client_call_waiting_when_serve_is_killed_is_completed_after_restarts(
    tmp_path: Path,
) -> None:
    """SIGKILL while ``pick-a`` waits; restart: the session is unloaded, its log still lists
    the call as pending. A run that brings nothing new loads it (the turn is taken up, the
    call waits again: the run ends with the same interrupt); SIGKILL again, restart; the
    client's result completes ``pick-a``. Exact log from the crash on: ``tool/deferred`` ·
    ``session/end-seed`` (once, inside the open turn) · ``tool/result(pick-a)`` citing its
    ``tool/call`` · ``step/end`` · the next step · ``turn/end{completed}``: one turn, opened
    and closed once. The model's last request ends with the call's result."""
    record = tmp_path / "requests.jsonl"
    async with serving(tmp_path, PROFILES, STEERLOOP_TEST_RECORD=str(record)) as (server, client):
        await waiting(client, "t1", "a")
        server.kill()
        await server.start()
        described = (await client.get("/v1/sessions/t1")).json()
        assert described["status"] == "unloaded"
        assert described["pending_client_calls"] == [
            {"call_id": "pick-a", "name": "pick_color", "arguments": '{"hint": "a"}'}
        ]
        # nothing new: the run loads the session and reports the wait again
        again = await agui_run(client, run_input("t1", "r2", user("u1", "pick a"), tools=[PICK]))
        assert wire(again[-1])["outcome"]["interrupts"][0]["id"] == "pick-a"
        assert (await client.get("/v1/sessions/t1")).json()["status"] == "running"
        server.kill()
        await server.start()
        done = await agui_run(client, answer("t1", "r3", "a", "red"))
        assert_client_result_run(done, "pick-a", "red")
        log = await full_log(client, "t1")
        described = (await client.get("/v1/sessions/t1")).json()
    assert described["pending_client_calls"] == []
    assert types_from(log, "tool/call") == [
        "tool/call", "tool/deferred", "session/end-seed", "tool/result", "step/end",
        "step/start", "request/header", "assistant/message", "step/end", "turn/end",
    ]  # fmt: skip
    assert [e["type"] for e in log].count("turn/start") == 1
    call = next(e for e in log if e["type"] == "tool/call")
    result = next(e for e in log if e["type"] == "tool/result")
    assert result["data"]["message"]["call_id"] == "pick-a"
    assert result["source_event_seqs"] == [call["seq"]]
    assert result["data"]["message"]["content"] == [{"type": "text", "text": "red"}]
    assert "error" not in result["data"]
    assert log[-1]["data"]["reason"]["kind"] == "completed"
    last = requests_of(record, "t1")[-1]["messages"][-1]
    assert (last["role"], last["call_id"]) == ("tool", "pick-a")
    assert last["content"] == [{"type": "text", "text": "red"}]
    assert server.starts == 3


async def test_a_cancel_after_a_restart_answers_the_wait(tmp_path: Path) -> None:
    """SIGKILL while ``pick-b`` waits; after the restart a cancel (which loads the session)
    answers the taken-up call ``ABORTED`` and ends the turn ``aborted``; a later client result
    for it reaches the model as a message, not as a second result."""
    async with serving(tmp_path, PROFILES) as (server, client):
        await waiting(client, "t2", "b")
        server.kill()
        await server.start()
        assert (await client.post("/v1/sessions/t2/cancel", json={})).status_code == 202
        log = await ended(client, "t2")
        assert types_from(log, "tool/deferred") == [
            "tool/deferred", "session/end-seed", "tool/result", "step/end", "turn/end",
        ]  # fmt: skip
        result = log[-3]["data"]
        assert (result["message"]["call_id"], result["error"]["code"]) == ("pick-b", "ABORTED")
        assert log[-1]["data"]["reason"]["kind"] == "aborted"
        late = await agui_run(client, answer("t2", "r2", "b", "blue"))
        assert wire(late[-1])["outcome"] == {"type": "success"}
        after = await full_log(client, "t2")
    assert [e["data"]["message"]["call_id"] for e in after if e["type"] == "tool/result"] == [
        "pick-b"
    ]
    assert any(
        e["type"] == "user/message" and "blue" in e["data"]["content"][0]["text"] for e in after
    )
