"""The HTTP + SSE service in one ``--role all`` process (API.md "Service: HTTP + SSE"):
uvicorn on 127.0.0.1:0 in this process, a scripted model, SQLite and PostgreSQL stores."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from steerloop import AgentOptions, Runtime, define_tool
from steerloop.service import Profile, create_app
from steerloop.testing import ScriptedAdapter, hang_after, text_response
from steerloop.testing._scripted import _text
from tests.session.backends import POSTGRES_URL, drop_schema, require_postgres

from .served import read_sse, served, turn_ends, types, wait_for_log

pytestmark = pytest.mark.timeout(90)


class Model:
    """A scripted model plus a gate tool whose calls wait for ``release``."""

    def __init__(self, *script: Any) -> None:
        self.adapter = ScriptedAdapter(list(script))
        self.entered = asyncio.Event()
        self.release = asyncio.Event()

    def profiles(self, name: str = "default", version: int = 1) -> Any:
        def build(rt: Runtime) -> list[Profile]:
            rt.llm.register_adapter(["mock"], self.adapter)

            async def run_gate(args: Any, exec: Any) -> str:
                self.entered.set()
                released = asyncio.ensure_future(self.release.wait())
                aborted = asyncio.ensure_future(exec.signal.wait())
                await asyncio.wait({released, aborted}, return_when=asyncio.FIRST_COMPLETED)
                for waiter in (released, aborted):
                    waiter.cancel()  # the test's own waiters
                return "gate open"

            rt.tools.register(
                define_tool(
                    name="gate",
                    description="waits",
                    parameters={"type": "object", "properties": {}},
                    execute=run_gate,
                )
            )
            return [
                Profile(
                    name=name, options=AgentOptions(provider="mock", model="m"), version=version
                )
            ]

        return build


def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'sessions.db'}"


@pytest.fixture
async def pg_url() -> AsyncIterator[str]:
    require_postgres()
    schema = f"steerloop_service_{uuid.uuid4().hex[:12]}"
    yield f"{POSTGRES_URL}?schema={schema}"
    await drop_schema(schema)


def user_texts(request: Any) -> list[str]:
    return [
        block.text
        for message in request.messages
        if message.role == "user"
        for block in message.content
    ]


async def test_create_with_input_runs_a_turn_and_the_log_pages_it(tmp_path: Path) -> None:
    model = Model(text_response("hello"))
    app = create_app(sqlite_url(tmp_path), model.profiles())
    async with served(app) as client:
        answer = await client.post("/v1/sessions", json={"session_id": "s1", "input": "hi"})
        assert answer.status_code == 201
        assert answer.json() == {"session_id": "s1", "events_url": "/v1/sessions/s1/events"}
        events = await wait_for_log(client, "s1", lambda ev: turn_ends(ev) == 1)
        assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
        assert types(events)[:2] == ["agent/inbox/spliced", "turn/start"]
        assert events[-1]["type"] == "turn/end"
        assert user_texts(model.adapter.requests[0]) == ["hi"]
        page = (await client.get("/v1/sessions/s1/log?after=2&limit=3")).json()
        assert [e["seq"] for e in page["events"]] == [3, 4, 5]
        assert page["last_seq"] == len(events)
        info = (await client.get("/v1/sessions/s1")).json()
        assert info["session_id"] == "s1"
        assert info["profile"] == "default"
        assert info["status"] == "idle"
        assert info["last_seq"] == len(events)
        assert info["pending_approvals"] == []
        assert info["owner"]["pid"] > 0
        listing = (await client.get("/v1/sessions")).json()["sessions"]
        assert [(s["session_id"], s["status"]) for s in listing] == [("s1", "idle")]
        again = await client.post("/v1/sessions", json={"session_id": "s1"})
        assert again.status_code == 409
        assert again.json()["error"]["code"] == "session_exists"


async def test_postgresql_store_serves_the_same_flow(pg_url: str) -> None:
    model = Model(text_response("one"), text_response("two"))
    async with served(create_app(pg_url, model.profiles())) as client:
        assert (await client.post("/v1/sessions", json={"session_id": "p1"})).status_code == 201
        sent = await client.post(
            "/v1/sessions/p1/messages", json={"mode": "followup", "content": "first"}
        )
        assert sent.status_code == 202
        await wait_for_log(client, "p1", lambda ev: turn_ends(ev) == 1)
        await client.post("/v1/sessions/p1/messages", json={"mode": "followup", "content": "2nd"})
        await wait_for_log(client, "p1", lambda ev: turn_ends(ev) == 2)
        assert [user_texts(r) for r in model.adapter.requests] == [["first"], ["first", "2nd"]]


async def test_a_command_for_an_unserved_profile_is_refused_not_queued(
    tmp_path: Path,
) -> None:
    """A session made with profile version 1, served by a process that has only version 2:
    on SQLite nothing else could ever apply a command for it, and one kept in memory would
    be lost by a restart, so it is refused (503 ``profile_not_served``) and nothing is
    written; the PostgreSQL host stores it for a worker that serves the version."""
    url = sqlite_url(tmp_path)
    async with served(create_app(url, Model().profiles())) as client:
        await client.post("/v1/sessions", json={"session_id": "s"})
        last = (await client.get("/v1/sessions/s")).json()["last_seq"]
    async with served(create_app(url, Model().profiles(version=2))) as client:
        for _ in range(2):
            answer = await client.post(
                "/v1/sessions/s/messages", json={"mode": "followup", "content": "m"}
            )
            assert (answer.status_code, answer.json()["error"]["code"]) == (
                503,
                "profile_not_served",
            )
        info = (await client.get("/v1/sessions/s")).json()
        assert (info["status"], info["last_seq"], info["profile"]) == ("unloaded", last, "default")


async def test_commands_waiting_for_their_session_are_bounded_then_applied_in_order(
    tmp_path: Path,
) -> None:
    """While a session loads (its profile's setup waits), its commands queue in order; past
    ``max_unconsumed`` the next gets 429 + Retry-After; once loaded the queued ones are
    applied, each answered 202 with its ``cmd_seq`` once durable."""
    url = sqlite_url(tmp_path)
    async with served(create_app(url, Model().profiles())) as client:
        await client.post("/v1/sessions", json={"session_id": "s"})
    opened = asyncio.Event()
    loading = asyncio.Event()

    async def setup(scope: Any) -> None:
        loading.set()
        await opened.wait()

    model = Model(text_response("one"), text_response("two"))

    def profiles(rt: Runtime) -> list[Profile]:
        (built,) = model.profiles()(rt)
        return [Profile(name="default", options=built.options, setup=setup)]

    async with served(create_app(url, profiles, max_unconsumed=2)) as client:
        sends = [
            asyncio.ensure_future(
                client.post("/v1/sessions/s/messages", json={"mode": "followup", "content": m})
            )
            for m in ("m1", "m2")
        ]
        await asyncio.wait_for(loading.wait(), 15)
        refused = await client.post(
            "/v1/sessions/s/messages", json={"mode": "followup", "content": "m3"}
        )
        assert refused.status_code == 429
        assert refused.headers["retry-after"] == "1"
        assert refused.json()["error"]["code"] == "too_many_commands"
        opened.set()
        answers = [await send for send in sends]
        assert [a.status_code for a in answers] == [202, 202]
        assert sorted(a.json()["cmd_seq"] for a in answers) == [1, 2]
        events = await wait_for_log(client, "s", lambda ev: turn_ends(ev) >= 1)
        texts = [
            m["content"][0]["text"]
            for e in events
            if e["type"] == "agent/inbox/spliced"
            for m in e["data"]["inserted"]
        ]
        assert sorted(texts) == ["m1", "m2"]


async def test_sse_resumes_exactly_with_last_event_id_and_streams_live_frames(
    tmp_path: Path,
) -> None:
    """Durable events carry ``id: seq``; live chunks of the open step come as ``event:
    stream`` with ``id: seq:n``; a reconnect with ``Last-Event-ID`` continues exactly after
    it (a durable seq, or a live frame); cancel ends the turn ``aborted`` by the user."""
    chunks = [*_text(0, "a"), *[c for c in _text(0, "b")[1:2]], *[c for c in _text(0, "c")[1:2]]]
    model = Model(hang_after(chunks))
    async with served(create_app(sqlite_url(tmp_path), model.profiles())) as client:
        await client.post("/v1/sessions", json={"session_id": "s", "input": "go"})
        seen = await read_sse(
            client,
            "/v1/sessions/s/events",
            lambda e: (
                e.event == "stream"
                and '"chunk"' in e.data
                and "TextDelta" not in e.data
                and e.id.endswith(":4")
            ),
        )
        durable = [e for e in seen if e.event != "stream"]
        assert [int(e.id) for e in durable] == list(range(1, len(durable) + 1))
        last_seq = len(durable)
        frames = [e.id for e in seen if e.event == "stream"]
        assert frames == [f"{last_seq}:{n}" for n in range(1, 5)]
        # resume inside the step: the frames after 2, then nothing durable is repeated
        resumed = await read_sse(
            client,
            "/v1/sessions/s/events",
            lambda e: e.id == f"{last_seq}:4",
            headers={"Last-Event-ID": f"{last_seq}:2"},
        )
        assert [e.id for e in resumed] == [f"{last_seq}:3", f"{last_seq}:4"]
        # resume after a durable seq: exactly the next one first
        again = await read_sse(
            client, "/v1/sessions/s/events", lambda e: True, headers={"Last-Event-ID": "2"}
        )
        assert again[0].id == "3"
        assert (await client.post("/v1/sessions/s/cancel", json={})).status_code == 202
        events = await wait_for_log(client, "s", lambda ev: turn_ends(ev) == 1)
        end = events[-1]["data"]
        assert end["reason"]["kind"] == "aborted"
        tail = await read_sse(
            client,
            "/v1/sessions/s/events",
            lambda e: e.event == "turn/end",
            headers={"Last-Event-ID": str(last_seq)},
        )
        ids = [e.id for e in tail]
        assert ids == [str(s) for s in range(last_seq + 1, events[-1]["seq"] + 1)]


async def test_auth_needs_the_bearer_token_except_for_healthz(tmp_path: Path) -> None:
    app = create_app(sqlite_url(tmp_path), Model().profiles(), token="s3cret")
    async with served(app) as client:
        assert (await client.get("/healthz")).json()["ok"] is True
        refused = await client.get("/v1/sessions")
        assert refused.status_code == 401
        assert refused.json()["error"]["code"] == "unauthorized"
        wrong = await client.get("/v1/sessions", headers={"Authorization": "Bearer nope"})
        assert wrong.status_code == 401
        created = await client.post(
            "/v1/sessions", json={}, headers={"Authorization": "Bearer s3cret"}
        )
        assert created.status_code == 201
        assert "s3cret" not in created.text


async def test_idle_session_is_unloaded_and_reloaded_by_its_next_message(
    tmp_path: Path,
) -> None:
    model = Model(text_response("one"), text_response("two"))
    app = create_app(sqlite_url(tmp_path), model.profiles(), idle_unload=0.2)
    async with served(app) as client:
        await client.post("/v1/sessions", json={"session_id": "s", "input": "first"})
        await wait_for_log(client, "s", lambda ev: turn_ends(ev) == 1)
        async with asyncio.timeout(15):
            while (await client.get("/v1/sessions/s")).json()["status"] != "unloaded":
                await asyncio.sleep(0.05)
        assert (await client.get("/v1/sessions/s")).json()["owner"] is None
        await client.post("/v1/sessions/s/messages", json={"mode": "followup", "content": "2nd"})
        events = await wait_for_log(client, "s", lambda ev: turn_ends(ev) == 2)
        assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
        assert user_texts(model.adapter.requests[1]) == ["first", "2nd"]


async def test_the_feed_pings_with_a_comment_while_nothing_happens(tmp_path: Path) -> None:
    app = create_app(sqlite_url(tmp_path), Model().profiles(), ping_seconds=0.2)
    async with served(app) as client:
        await client.post("/v1/sessions", json={"session_id": "s"})
        async with (
            asyncio.timeout(15),
            client.stream("GET", "/v1/sessions/s/events") as answer,
        ):
            assert answer.headers["content-type"].startswith("text/event-stream")
            async for line in answer.aiter_lines():
                if line:
                    assert line.startswith(":"), line  # nothing durable yet: only pings
                    break
