"""A 2xx is durable: ``steerloop serve`` on SQLite, SIGKILLed again and again under load
while clients retry (issue 24, "crash-exact SQLite serve"). Every acknowledged message is in
the log exactly once, a retried POST is recognised by its idempotency key (the same answer,
the server-minted message id included), and approval decisions and cancels answered 202
survive a kill right after the answer and are not applied twice."""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import signal
import socket
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

pytestmark = pytest.mark.timeout(300)
ROOT = Path(__file__).resolve().parents[2]
WAIT = 60.0


class Server:
    """One ``steerloop serve`` process at a time on a fixed port and SQLite file; ``kill``
    SIGKILLs it, ``start`` starts the next."""

    def __init__(self, tmp_path: Path) -> None:
        self.tmp_path = tmp_path
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = int(probe.getsockname()[1])
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0

    async def start(self) -> None:
        self.starts += 1
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT / "src"), str(ROOT)]))
        with (self.tmp_path / f"server-{self.starts}.log").open("wb") as out:
            self.proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "steerloop.cli",
                    "serve",
                    "--store",
                    f"sqlite:///{self.tmp_path / 'sessions.db'}",
                    "--port",
                    str(self.port),
                    "--profiles",
                    "tests.service.crashprofiles:profiles",
                ],
                cwd=self.tmp_path,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        async with httpx.AsyncClient(base_url=self.url, timeout=5) as client:
            async with asyncio.timeout(WAIT):
                while True:
                    with contextlib.suppress(httpx.TransportError):
                        if (await client.get("/healthz")).status_code == 200:
                            return
                    if self.proc.poll() is not None:
                        raise RuntimeError(f"serve exited {self.proc.returncode}")
                    await asyncio.sleep(0.05)

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(30)

    async def restart(self) -> None:
        self.kill()
        await self.start()


@contextlib.asynccontextmanager
async def serving(tmp_path: Path) -> AsyncIterator[tuple[Server, httpx.AsyncClient]]:
    """A started ``Server`` and a client of its port (which outlives each process)."""
    server = Server(tmp_path)
    await server.start()
    try:
        async with httpx.AsyncClient(base_url=server.url, timeout=10) as client:
            yield server, client
    finally:
        server.kill()


async def retried(client: httpx.AsyncClient, path: str, body: dict[str, Any]) -> httpx.Response:
    """POST until the server answers other than 5xx (it is being killed and restarted)."""
    async with asyncio.timeout(WAIT * 2):
        while True:
            try:
                answer = await client.post(path, json=body)
            except httpx.TransportError:
                answer = None
            if answer is not None and answer.status_code < 500:
                return answer
            await asyncio.sleep(0.05)


def inserted(events: list[dict[str, Any]]) -> list[tuple[str, str]]:
    return [
        (m["id"], m["content"][0]["text"])
        for e in events
        if e["type"] == "agent/inbox/spliced"
        for m in e["data"]["inserted"]
    ]


async def full_log(client: httpx.AsyncClient, session_id: str) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    while True:
        page = (await client.get(f"/v1/sessions/{session_id}/log?after={len(events)}")).json()
        events.extend(page["events"])
        if len(events) >= page["last_seq"]:
            return events


async def test_acknowledged_messages_survive_repeated_sigkills_exactly_once(
    tmp_path: Path,
) -> None:
    """8 clients × 30 messages over 4 sessions (followup and inject, half with a client
    message id, each with its own idempotency key), every client retrying a POST until it
    is answered, while the server is SIGKILLed and restarted 8 times: every message
    answered 2xx is in the log exactly once (0 lost, 0 applied twice), with the id its
    answer gave, and no retry was refused as a reused id (the key was recognised)."""
    rng = random.Random(23)
    sessions = ["s0", "s1", "s2", "s3"]
    acknowledged: dict[str, tuple[str, str]] = {}  # content -> (session, message id)
    refused: list[Any] = []
    async with serving(tmp_path) as (server, client):
        for session_id in sessions:
            created = await retried(client, "/v1/sessions", {"session_id": session_id})
            assert created.status_code == 201

        async def one_client(c: int) -> None:
            for i in range(30):
                session_id = sessions[(c + i) % len(sessions)]
                content = f"c{c}-{i}"
                body: dict[str, Any] = {
                    "mode": "followup" if i % 3 == 0 else "inject",
                    "content": content,
                    "idempotency_key": f"key-{content}",
                }
                if i % 2:
                    body["message_id"] = f"m-{content}"
                answer = await retried(client, f"/v1/sessions/{session_id}/messages", body)
                if answer.status_code != 202:
                    refused.append((content, answer.status_code, answer.text))
                    continue
                message_id = answer.json()["message_id"]
                assert message_id == body.get("message_id", message_id)
                acknowledged[content] = (session_id, message_id)

        async def killer() -> None:
            for _ in range(8):
                await asyncio.sleep(rng.uniform(0.2, 0.8))
                await asyncio.to_thread(server.kill)
                await server.start()

        await asyncio.gather(killer(), *[one_client(c) for c in range(8)])
        assert refused == []
        assert len(acknowledged) == 8 * 30
        logs = {s: inserted(await full_log(client, s)) for s in sessions}
    for session_id, messages in logs.items():
        ids = [message_id for message_id, _text in messages]
        assert len(ids) == len(set(ids)), f"{session_id}: an id applied twice"
    found = {text: (s, message_id) for s, messages in logs.items() for message_id, text in messages}
    assert len(found) == sum(len(m) for m in logs.values()), "a content applied twice"
    assert {k: found.get(k) for k in acknowledged} == acknowledged
    assert server.starts == 9


async def test_a_decision_and_a_cancel_answered_202_survive_a_kill_right_after(
    tmp_path: Path,
) -> None:
    """5 rounds each: a decision for a pending call is answered 202, the server is SIGKILLed
    at once and restarted: the log has the decision, and the retried decision is 409
    ``ALREADY_DECIDED``. A cancel (inbox not kept) of a hung turn with a followup queued
    behind it is answered 202 and the server killed at once: after the restart the queued
    message is not pending (the clear is in the log) and a retried cancel is a no-op 202."""
    async with serving(tmp_path) as (server, client):
        for n in range(5):
            session_id = f"a{n}"
            first = {"session_id": session_id, "input": f"call:c{n}"}
            assert (await retried(client, "/v1/sessions", first)).status_code == 201
            async with asyncio.timeout(WAIT):
                while not (await client.get(f"/v1/sessions/{session_id}")).json()[
                    "pending_approvals"
                ]:
                    await asyncio.sleep(0.05)
            path = f"/v1/sessions/{session_id}/approvals/c{n}"
            decided = await client.post(path, json={"decision": "allow"})
            assert decided.status_code == 202
            await server.restart()
            events = await full_log(client, session_id)
            decisions = [e for e in events if e["type"] == "tool/approval-decided"]
            assert [d["data"]["call_id"] for d in decisions] == [f"c{n}"]
            again = await retried(client, path, {"decision": "allow"})
            assert (again.status_code, again.json()["error"]["code"]) == (
                409,
                "ALREADY_DECIDED",
            )
        for n in range(5):
            session_id = f"h{n}"
            await retried(client, "/v1/sessions", {"session_id": session_id, "input": "hang"})
            queued = await retried(
                client,
                f"/v1/sessions/{session_id}/messages",
                {"mode": "followup", "content": "later", "message_id": f"q{n}"},
            )
            assert queued.status_code == 202
            cancelled = await client.post(f"/v1/sessions/{session_id}/cancel", json={})
            assert cancelled.status_code == 202
            await server.restart()
            events = await full_log(client, session_id)
            splices = [e["data"] for e in events if e["type"] == "agent/inbox/spliced"]
            assert any(
                s.get("outcome") == "canceled" and s["removed_count"] >= 1 for s in splices
            ), splices
            retry = await retried(client, f"/v1/sessions/{session_id}/cancel", {})
            assert retry.status_code == 202
            after = await full_log(client, session_id)
            assert [m for m, _t in inserted(after)].count(f"q{n}") == 1
