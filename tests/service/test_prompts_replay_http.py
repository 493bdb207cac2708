"""MCP prompts and replays over HTTP (issues 30 and 29, the web chat's server side):
``GET/POST /v1/sessions/{id}/prompts`` list and expand a server's prompts into the session's
next message (its source records the prompt), on SQLite and on PostgreSQL (the worker keeps
the source); ``GET /v1/profiles`` and ``POST /v1/sessions/{id}/replays`` run
``steerloop.evals.replay`` and answer its report. Hostile bodies are refused with nothing
written. Real uvicorn on 127.0.0.1:0, the tests' hostile stdio MCP server, scripted models."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from steerloop import AgentOptions, Runtime
from steerloop.mcp import install_mcp
from steerloop.service import Profile, create_app
from steerloop.testing import ScriptedAdapter, text_response, tool_call_response

from ..mcp.helpers import hostile
from .pgworkers import Pg, pg_schema
from .served import served, turn_ends, wait_for_log

pytestmark = pytest.mark.timeout(120)


class Prompting:
    """Profiles ``default`` (scripted) and ``alt`` (another scripted model), and the hostile
    MCP server (prompt ``greet``: ``name`` required, ``tone`` optional)."""

    def __init__(self, state: Path, *script: Any, alt: list[Any] | None = None) -> None:
        self.state = state
        self.adapter = ScriptedAdapter(list(script))
        self.alt = ScriptedAdapter(list(alt or []))

    async def profiles(self, rt: Runtime) -> list[Profile]:
        rt.llm.register_adapter(["mock"], self.adapter)
        rt.llm.register_adapter(["other"], self.alt)
        await install_mcp(rt, [hostile(self.state, timeout=60.0)])
        return [
            Profile(name="default", options=AgentOptions(provider="mock", model="m")),
            Profile(name="alt", options=AgentOptions(provider="other", model="o")),
            Profile(name="none", options=AgentOptions()),
        ]


def prompting(tmp_path: Path, *script: Any, alt: list[Any] | None = None) -> Prompting:
    state = tmp_path / "server-state"
    state.mkdir()
    return Prompting(state, *script, alt=alt)


@pytest.fixture
async def pg() -> AsyncIterator[Pg]:
    async with pg_schema() as found:
        yield found


GREET = {
    "server": "x",
    "name": "greet",
    "command": "/x:greet",
    "description": "Greets someone.",
    "arguments": [
        {"name": "name", "description": "", "required": True},
        {"name": "tone", "description": "", "required": False},
    ],
}


async def prompt_exchange(client: httpx.AsyncClient) -> dict[str, Any]:
    """List, refuse, then send ``/x:greet``; returns the logged user message."""
    await client.post("/v1/sessions", json={"session_id": "s"})
    listed = await client.get("/v1/sessions/s/prompts")
    assert listed.json() == {"prompts": [GREET], "unavailable": []}
    missing = await client.get("/v1/sessions/nope/prompts")
    assert (missing.status_code, missing.json()["error"]["code"]) == (404, "session_not_found")
    path = "/v1/sessions/s/prompts"
    for body, status, code, message in [
        ({"command": "/x:greet"}, 422, "invalid_prompt", "prompt 'greet' needs name"),
        ({"command": "/x:nope a"}, 422, "invalid_prompt", "MCP server 'x' has no prompt 'nope'"),
        ({"command": "/y:greet Ada"}, 404, "prompt_not_found", "no MCP server 'y' is open here"),
        (
            {"command": "greet Ada"},
            422,
            "invalid_prompt",
            "command must be /server:prompt [arguments]",
        ),
        ({"command": "/x:greet 'Ada"}, 422, "invalid_prompt", None),  # unbalanced quote
        ({"command": "/x:greet Ada\x00"}, 422, "invalid_text", None),
        ({"command": "/x:greet Ada", "mode": "shout"}, 422, "invalid_body", None),
        ({"command": "/x:greet " + "a" * 20000}, 422, "invalid_body", None),
    ]:
        answer = await client.post(path, json=body)
        error = answer.json()["error"]
        assert (answer.status_code, error["code"]) == (status, code), body
        if message is not None:
            assert error["message"] == message
    assert turn_ends((await client.get("/v1/sessions/s/log")).json()["events"]) == 0
    sent = await client.post(path, json={"command": "/x:greet Ada tone=warm", "message_id": "m1"})
    assert sent.status_code == 202
    assert sent.json()["message_id"] == "m1"
    events = await wait_for_log(client, "s", lambda ev: turn_ends(ev) == 1)
    (message,) = [e["data"] for e in events if e["type"] == "user/message"]
    assert message["id"] == "m1"
    assert message["content"] == [{"type": "text", "text": "Greet Ada (warm)."}]
    assert message["source"]["mcp_prompt"] == {
        "server": "x",
        "name": "greet",
        "arguments": {"name": "Ada", "tone": "warm"},
    }
    return dict(message)


async def test_a_prompt_is_listed_expanded_and_sent_with_its_source_on_sqlite(
    tmp_path: Path,
) -> None:
    """GET lists the open servers' prompts; POST expands one (positional and key=value
    arguments) into the next message, its source naming the prompt; a missing argument, an
    unknown prompt or server, a malformed command or text are refused with nothing sent."""
    model = prompting(tmp_path, text_response("hi Ada"))
    app = create_app(f"sqlite:///{tmp_path / 'sessions.db'}", model.profiles)
    async with served(app) as client:
        await prompt_exchange(client)


async def test_a_prompt_sent_on_postgresql_keeps_its_source_through_the_worker(
    tmp_path: Path, pg: Pg
) -> None:
    """On PostgreSQL the expanded message is a followup command whose body carries the
    source; the worker logs the message with it."""
    model = prompting(tmp_path, text_response("hi Ada"))
    async with served(create_app(pg.url, model.profiles, "all")) as client:
        await prompt_exchange(client)


async def test_a_replay_over_http_answers_its_report_and_refuses_what_cannot_run(
    tmp_path: Path,
) -> None:
    """GET /v1/profiles lists the profiles with a model; a replay from turn 2 with ``alt``
    and a system prompt runs as a new session (the tool call answered from the recording:
    no tool runs) and answers the report; a turn the session has not
    closed, an unknown profile, one with no model, or a bad body are refused and nothing
    is created."""
    model = prompting(
        tmp_path,
        text_response("first"),
        tool_call_response("c1", "x__echo", {"text": "hi"}),
        text_response("second"),
        alt=[tool_call_response("c9", "x__echo", {"text": "hi"}), text_response("other")],
    )
    app = create_app(f"sqlite:///{tmp_path / 'sessions.db'}", model.profiles)
    async with served(app) as client:
        profiles = (await client.get("/v1/profiles")).json()["profiles"]
        assert profiles == [
            {"name": "default", "provider": "mock", "model": "m"},
            {"name": "alt", "provider": "other", "model": "o"},
        ]
        await client.post("/v1/sessions", json={"session_id": "s", "input": "one"})
        await wait_for_log(client, "s", lambda ev: turn_ends(ev) == 1)
        await client.post("/v1/sessions/s/messages", json={"mode": "followup", "content": "two"})
        recorded = await wait_for_log(client, "s", lambda ev: turn_ends(ev) == 2)
        path = "/v1/sessions/s/replays"
        for body, status, code in [
            ({"from_turn": 3, "profile": "alt"}, 422, "invalid_replay"),
            ({"from_turn": 0, "profile": "alt"}, 422, "invalid_body"),
            ({"from_turn": "2", "profile": "alt"}, 422, "invalid_body"),
            ({"from_turn": 2, "profile": "nope"}, 422, "unknown_profile"),
            ({"from_turn": 2, "profile": "none"}, 422, "invalid_replay"),
            ({"from_turn": 2, "profile": "alt", "system_prompt": "a\x00"}, 422, "invalid_text"),
            ({"from_turn": 2, "profile": "alt", "tools": "all"}, 422, "invalid_body"),
        ]:
            answer = await client.post(path, json=body)
            assert (answer.status_code, answer.json()["error"]["code"]) == (status, code), body
        missing = await client.post("/v1/sessions/nope/replays", json={"profile": "alt"})
        assert (missing.status_code, missing.json()["error"]["code"]) == (404, "session_not_found")
        assert [s["session_id"] for s in (await client.get("/v1/sessions")).json()["sessions"]] == [
            "s"
        ]
        answer = await client.post(
            path, json={"from_turn": 2, "profile": "alt", "system_prompt": "Be brief."}
        )
        assert answer.status_code == 201
        body = answer.json()
        report = body["report"]
        assert body["session_id"] == report["replay_session_id"] != "s"
        assert (report["session_id"], report["from_turn"], report["model"]) == ("s", 2, "other/o")
        assert report["system_prompt"] == "Be brief."
        (turn,) = report["turns"]
        assert (turn["recorded"]["text"], turn["new"]["text"]) == ("second", "other")
        assert [c["status"] for c in turn["calls"]] == ["matched"]
        assert report["totals"]["tool_executions"] == 0
        assert report["diverged_at"]["turn"] == 2
        assert body["markdown"].startswith("#")
        assert (await client.get("/v1/sessions/s/log")).json()["events"] == recorded
        replayed = (await client.get(f"/v1/sessions/{body['session_id']}/log")).json()["events"]
        assert turn_ends(replayed) == 2


async def test_a_replay_on_postgresql_forks_into_a_new_stored_session(
    tmp_path: Path, pg: Pg
) -> None:
    """On PostgreSQL (role ``all``) the replay reads the shared log and writes its new
    session to the same store; the recorded session is not written."""
    model = prompting(tmp_path, text_response("first"), alt=[text_response("other first")])
    async with served(create_app(pg.url, model.profiles, "all")) as client:
        await client.post("/v1/sessions", json={"session_id": "s", "input": "one"})
        recorded = await wait_for_log(client, "s", lambda ev: turn_ends(ev) == 1)
        answer = await client.post("/v1/sessions/s/replays", json={"profile": "alt"})
        assert answer.status_code == 201, answer.text
        report = answer.json()["report"]
        ((recorded_text, new_text),) = [
            (t["recorded"]["text"], t["new"]["text"]) for t in report["turns"]
        ]
        assert (recorded_text, new_text) == ("first", "other first")
        assert (await client.get("/v1/sessions/s/log")).json()["events"] == recorded
    stored = await pg.val(
        "SELECT count(*) FROM steerloop_events WHERE session_id = $1",
        answer.json()["session_id"],
    )
    assert stored > 0
