"""Input requests over HTTP (issue 30): an MCP server's ``elicitation/create`` during a call is
an ``input/requested`` event; ``GET /v1/sessions/{id}`` lists it, ``POST
/v1/sessions/{id}/inputs/{input_id}`` answers it as the session's next command (checked
against the requested schema first), and the SSE feed shows both events. Real uvicorn on
127.0.0.1:0 with the tests' hostile stdio MCP server, over a SQLite file and over
PostgreSQL (role ``all``: the answer goes through the commands table as kind ``input``)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from ag_ui.core import EventType

from steerloop import AgentOptions, Runtime
from steerloop.mcp import install_mcp
from steerloop.service import Profile, create_app
from steerloop.testing import ScriptedAdapter, text_response, tool_call_response

from ..mcp.helpers import hostile
from .aguisupport import agui_run, run_input, user, wire
from .pgworkers import Pg, pg_schema
from .served import read_sse, served, turn_ends, types, wait_for_log
from .test_agui_client import drive

pytestmark = pytest.mark.timeout(120)

ASKED_SCHEMA = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
    "required": ["name"],
}


class Asking:
    """A scripted model that calls the hostile server's ``ask`` tool (it elicits)."""

    def __init__(self, state: Path, *script: Any) -> None:
        self.state = state
        self.adapter = ScriptedAdapter(list(script))

    async def profiles(self, rt: Runtime) -> list[Profile]:
        rt.llm.register_adapter(["mock"], self.adapter)
        await install_mcp(rt, [hostile(self.state, timeout=60.0)])  # closed with rt
        return [Profile(name="default", options=AgentOptions(provider="mock", model="m"))]


def asking(tmp_path: Path) -> Asking:
    state = tmp_path / "server-state"
    state.mkdir()
    return Asking(
        state,
        tool_call_response("c1", "x__ask", {"text": "Who are you?"}),
        text_response("thanks"),
    )


@pytest.fixture
async def pg() -> AsyncIterator[Pg]:
    async with pg_schema() as found:
        yield found


def answers_of(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e["data"] for e in events if e["type"] == "input/answered"]


def requested(events: list[dict[str, Any]]) -> bool:
    return "input/requested" in types(events)


async def answer_over_http(client: httpx.AsyncClient) -> list[dict[str, Any]]:
    """The whole exchange on session ``s``; returns its final log."""
    await client.post("/v1/sessions", json={"session_id": "s", "input": "go"})
    events = await wait_for_log(client, "s", requested)
    (request,) = [e["data"] for e in events if e["type"] == "input/requested"]
    input_id = request["id"]
    pending = (await client.get("/v1/sessions/s")).json()["pending_inputs"]
    assert pending == [
        {
            "id": input_id,
            "server": "x",
            "message": "Who are you?",
            "schema": ASKED_SCHEMA,
            "url": None,
            "kind": "elicitation",
            "call_id": "c1",
        }
    ]
    base = "/v1/sessions/s/inputs"
    for path, body, status, code, message in [
        (
            f"{base}/{input_id}",
            {"action": "accept", "content": {"age": 3}},
            422,
            "invalid_answer",
            "the answer does not match the requested schema: content: "
            "'name' is a required property",
        ),
        (
            f"{base}/{input_id}",
            {"action": "accept", "content": {"name": 5}},
            422,
            "invalid_answer",
            "the answer does not match the requested schema: name: 5 is not of type 'string'",
        ),
        (
            f"{base}/{input_id}",
            {"action": "decline", "content": {"name": "x"}},
            422,
            "invalid_answer",
            "a 'decline' answer carries no content",
        ),
        (f"{base}/{input_id}", {"action": "maybe"}, 422, "invalid_body", None),
        (f"{base}/{input_id}", {"action": "accept", "by": "me"}, 422, "invalid_body", None),
        (f"{base}/{input_id}", {"action": "accept", "content": [1]}, 422, "invalid_body", None),
        (
            f"{base}/nope",
            {"action": "cancel"},
            404,
            "input_not_found",
            "session 's' has no pending input 'nope'",
        ),
        ("/v1/sessions/nope/inputs/x", {"action": "cancel"}, 404, "session_not_found", None),
    ]:
        answer = await client.post(path, json=body)
        error = answer.json()["error"]
        assert (answer.status_code, error["code"]) == (status, code), body
        if message is not None:
            assert error["message"] == message
    assert (await client.get("/v1/sessions/s/log")).json()["events"] == events  # nothing written
    answer = await client.post(
        f"{base}/{input_id}", json={"action": "accept", "content": {"name": "Ada", "age": 36}}
    )
    assert answer.status_code == 202
    assert set(answer.json()) == {"cmd_seq"}
    events = await wait_for_log(client, "s", lambda ev: turn_ends(ev) == 1)
    (answered,) = [e["data"] for e in events if e["type"] == "input/answered"]
    assert answered == {
        "id": input_id,
        "action": "accept",
        "content": {"name": "Ada", "age": 36},
        "by": "http",
    }
    (result,) = [e["data"] for e in events if e["type"] == "tool/result"]
    text = "".join(b["text"] for b in result["message"]["content"] if b["type"] == "text")
    assert json.loads(text) == {"action": "accept", "content": {"age": 36, "name": "Ada"}}
    order = [t for t in types(events) if t.startswith(("tool/", "input/"))]
    assert order == ["tool/call", "input/requested", "input/answered", "tool/result"]
    again = await client.post(f"{base}/{input_id}", json={"action": "decline"})
    assert (again.status_code, again.json()["error"]["code"]) == (409, "ALREADY_DECIDED")
    assert (await client.get("/v1/sessions/s")).json()["pending_inputs"] == []
    feed = await read_sse(client, "/v1/sessions/s/events", lambda e: e.event == "turn/end")
    shown = [e.event for e in feed if e.event.startswith("input/")]
    assert shown == ["input/requested", "input/answered"]
    assert json.loads(next(e.data for e in feed if e.event == "input/answered"))["data"] == (
        answered
    )
    return events


async def test_an_input_is_listed_checked_and_answered_over_http_on_sqlite(
    tmp_path: Path,
) -> None:
    """GET lists the pending input (server, message, schema, call); answers the schema
    refuses are 422 naming where, an unknown input 404, nothing written; accept → 202 and
    ``input/answered`` by http before the call's result; a second answer → 409."""
    model = asking(tmp_path)
    app = create_app(f"sqlite:///{tmp_path / 'sessions.db'}", model.profiles)
    async with served(app) as client:
        await answer_over_http(client)


async def test_two_answers_racing_on_sqlite_apply_exactly_one(tmp_path: Path) -> None:
    """Two answers posted at once for one input: one is 202 and written, the other 409
    ``ALREADY_DECIDED`` (refused by the check before queueing, or, when both passed it, where
    the session's commands meet in order)."""
    model = asking(tmp_path)
    app = create_app(f"sqlite:///{tmp_path / 'sessions.db'}", model.profiles)
    async with served(app) as client:
        await client.post("/v1/sessions", json={"session_id": "s", "input": "go"})
        events = await wait_for_log(client, "s", requested)
        (request,) = [e["data"] for e in events if e["type"] == "input/requested"]
        path = f"/v1/sessions/s/inputs/{request['id']}"
        first, second = await asyncio.gather(
            client.post(path, json={"action": "accept", "content": {"name": "A"}}),
            client.post(path, json={"action": "decline"}),
        )
        statuses = sorted([first.status_code, second.status_code])
        assert statuses == [202, 409]
        loser = first if first.status_code == 409 else second
        assert loser.json()["error"]["code"] == "ALREADY_DECIDED"
        events = await wait_for_log(client, "s", lambda ev: turn_ends(ev) == 1)
        assert len(answers_of(events)) == 1


async def test_an_input_answered_on_postgresql_goes_through_the_commands_table(
    tmp_path: Path, pg: Pg
) -> None:
    """The same exchange on PostgreSQL: the answer is an ``input`` command (the v5 kind)
    consumed by the owner with its ``input/answered``; a second answer is refused under the
    session's row lock with nothing stored."""
    model = asking(tmp_path)
    async with served(create_app(pg.url, model.profiles, "all")) as client:
        events = await answer_over_http(client)
    (answered,) = [e for e in events if e["type"] == "input/answered"]
    rows = await pg.fetch(
        "SELECT kind, body::text, consumed_seq FROM steerloop_commands WHERE kind = 'input'"
    )
    assert [(r["kind"], json.loads(r["body"]), r["consumed_seq"]) for r in rows] == [
        (
            "input",
            {
                "id": answered["data"]["id"],
                "action": "accept",
                "content": {"name": "Ada", "age": 36},
            },
            answered["seq"],
        )
    ]


async def test_ag_ui_ends_a_run_with_the_input_interrupt_and_a_resume_answers_it(
    tmp_path: Path,
) -> None:
    """AG-UI 1.0 (read off the raw bytes with the Python models, strictly): a pending input
    ends the run with ``outcome interrupt`` naming the input (its message, the call it holds,
    a ``responseSchema`` around the requested schema); a resume the schema refuses is 422
    with nothing written; a valid resume answers it through the HTTP answer's path (one
    ``input/answered``, by http) and the next run follows the turn to its end."""
    model = asking(tmp_path)
    app = create_app(f"sqlite:///{tmp_path / 'sessions.db'}", model.profiles)
    async with served(app) as client:
        first = await agui_run(client, run_input("t1", "r1", user("u1", "start")))
        assert first[-1].type == EventType.RUN_FINISHED
        (interrupt,) = wire(first[-1])["outcome"]["interrupts"]
        log = (await client.get("/v1/sessions/t1/log")).json()["events"]
        (request,) = [e["data"] for e in log if e["type"] == "input/requested"]
        assert interrupt == {
            "id": request["id"],
            "reason": "input_request",
            "message": "Who are you?",
            "toolCallId": "c1",
            "responseSchema": {
                "type": "object",
                "properties": {
                    "action": {"enum": ["accept", "decline", "cancel"]},
                    "content": ASKED_SCHEMA,
                },
                "required": ["action"],
                "additionalProperties": False,
            },
            "metadata": {"server": "x", "kind": "elicitation"},
        }

        def resume(payload: Any) -> dict[str, Any]:
            entry = {"interruptId": request["id"], "status": "resolved", "payload": payload}
            return run_input("t1", "r2", user("u1", "start"), resume=[entry])

        for payload, code in [
            ({"action": "accept", "content": {"age": 1}}, "invalid_answer"),
            ({"action": "maybe"}, "invalid_resume"),
            ({"decision": "allow"}, "invalid_resume"),
        ]:
            refused = await client.post("/v1/agui", json=resume(payload))
            assert (refused.status_code, refused.json()["error"]["code"]) == (422, code)
        assert (await client.get("/v1/sessions/t1/log")).json()["events"] == log
        second = await agui_run(client, resume({"action": "accept", "content": {"name": "Ada"}}))
        assert wire(second[-1])["outcome"] == {"type": "success"}
        results = [e for e in second if e.type == EventType.TOOL_CALL_RESULT]
        assert [json.loads(e.content) for e in results] == [
            {"action": "accept", "content": {"name": "Ada"}}
        ]
        log = (await client.get("/v1/sessions/t1/log")).json()["events"]
        assert [e["data"] for e in log if e["type"] == "input/answered"] == [
            {"id": request["id"], "action": "accept", "content": {"name": "Ada"}, "by": "http"}
        ]
        # the same resume again answers nothing more
        third = await agui_run(client, resume({"action": "decline"}))
        assert wire(third[-1])["outcome"] == {"type": "success"}
        log = (await client.get("/v1/sessions/t1/log")).json()["events"]
        assert [e["type"] for e in log].count("input/answered") == 1


async def test_the_official_ag_ui_client_resumes_an_input_interrupt(tmp_path: Path) -> None:
    """``@ag-ui/client``'s ``HttpAgent`` (its schemas and enforcement stage) reads the input
    interrupt and resumes it with the answer; the next run succeeds with the server's result
    and the log has one ``input/answered`` by http."""
    model = asking(tmp_path)
    app = create_app(f"sqlite:///{tmp_path / 'sessions.db'}", model.profiles)
    async with served(app) as client:
        answer = {"action": "accept", "content": {"name": "Ada", "age": 7}}
        d = await drive(client, "t1", {"user": "go"}, {"answerInput": answer})
        first, second = await d.line(), await d.line()
        await d.finish()
        assert first["error"] is None and first["outcome"] == "interrupt"
        (interrupt,) = first["interrupts"]
        assert (interrupt["reason"], interrupt["message"]) == ("input_request", "Who are you?")
        assert interrupt["responseSchema"]["properties"]["content"] == ASKED_SCHEMA
        assert second["error"] is None and second["outcome"] == "success"
        assert "TOOL_CALL_RESULT" in second["events"]
        log = (await client.get("/v1/sessions/t1/log")).json()["events"]
        assert answers_of(log) == [
            {"id": interrupt["id"], "action": "accept", "content": answer["content"], "by": "http"}
        ]
