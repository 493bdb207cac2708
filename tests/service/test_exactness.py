"""Exactly once at the HTTP edge (issue 23, API.md "The HTTP edge"): a reused idempotency key
with another body, a reused message id and a second decision are refused 409; hostile text,
digits and ids are a clear 4xx, never a 500 or a stored log that cannot be served. Real
uvicorn on 127.0.0.1:0, on SQLite and on PostgreSQL."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import httpx
import pytest

from steerloop.service import create_app
from steerloop.testing import text_response, tool_call_response

from .served import served, turn_ends, wait_for_log
from .stores import store_url
from .test_approvals import Asking, asked
from .test_service import Model

pytestmark = pytest.mark.timeout(120)
__all__ = ["store_url"]


def inserted(events: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """``(message id, text)`` of every message the log's splices inserted, in order."""
    return [
        (m["id"], m["content"][0]["text"])
        for e in events
        if e["type"] == "agent/inbox/spliced"
        for m in e["data"]["inserted"]
    ]


async def post(client: httpx.AsyncClient, session_id: str, body: dict[str, Any]) -> Any:
    return await client.post(f"/v1/sessions/{session_id}/messages", json=body)


async def test_a_reused_idempotency_key_with_another_body_is_409(store_url: str) -> None:
    """The same key and body again → the first answer, applied once; the same key with
    another content, mode or message id (given or left out) → 409
    ``IDEMPOTENCY_KEY_REUSED`` and nothing new in the log (was: 202 with the first answer,
    the new content silently dropped, on both stores)."""
    model = Model(text_response("one"))
    async with served(create_app(store_url, model.profiles())) as client:
        await client.post("/v1/sessions", json={"session_id": "s"})
        body = {"mode": "followup", "content": "hi", "idempotency_key": "k1"}
        first = await post(client, "s", body)
        assert first.status_code == 202
        again = await post(client, "s", body)
        assert (again.status_code, again.json()) == (202, first.json())
        message_id = first.json()["message_id"]
        for other in (
            {"content": "other"},
            {"mode": "steer"},
            {"message_id": message_id},  # the id the server minted, now given
            {"message_id": "m-other"},
        ):
            answer = await post(client, "s", body | other)
            assert answer.status_code == 409, other
            assert answer.json()["error"]["code"] == "IDEMPOTENCY_KEY_REUSED"
        keyed = {"mode": "inject", "content": "x", "message_id": "m1", "idempotency_key": "k2"}
        assert (await post(client, "s", keyed)).status_code == 202
        without_id = {k: v for k, v in keyed.items() if k != "message_id"}
        refused = await post(client, "s", without_id)
        assert refused.json()["error"]["code"] == "IDEMPOTENCY_KEY_REUSED"
        events = await wait_for_log(
            client, "s", lambda ev: turn_ends(ev) == 1 and len(inserted(ev)) >= 2
        )
        assert sorted(inserted(events)) == sorted([(message_id, "hi"), ("m1", "x")])


async def test_a_reused_message_id_is_409_on_both_stores(store_url: str) -> None:
    """A client message id the session already holds → 409 ``MESSAGE_ID_REUSED`` (SQLite
    applied it twice: two messages with one id; PostgreSQL dropped it after a 202), also
    under another key, another mode, and after a restart of the server."""
    model = Model(text_response("one"), text_response("two"))
    async with served(create_app(store_url, model.profiles())) as client:
        await client.post("/v1/sessions", json={"session_id": "s"})
        sent = await post(client, "s", {"mode": "followup", "content": "a", "message_id": "m"})
        assert sent.status_code == 202
        for body in (
            {"mode": "followup", "content": "b", "message_id": "m"},
            {"mode": "inject", "content": "a", "message_id": "m", "idempotency_key": "k"},
        ):
            answer = await post(client, "s", body)
            assert (answer.status_code, answer.json()["error"]["code"]) == (
                409,
                "MESSAGE_ID_REUSED",
            )
        await wait_for_log(client, "s", lambda ev: turn_ends(ev) == 1)
    async with served(create_app(store_url, model.profiles())) as client:
        again = await post(client, "s", {"mode": "followup", "content": "c", "message_id": "m"})
        assert (again.status_code, again.json()["error"]["code"]) == (409, "MESSAGE_ID_REUSED")
        events = (await client.get("/v1/sessions/s/log")).json()["events"]
        assert inserted(events) == [("m", "a")]


async def test_concurrent_decisions_on_one_call_get_one_202(store_url: str) -> None:
    """20 decisions posted at once for one pending call: exactly one 202, every other 409
    ``ALREADY_DECIDED``, one ``tool/approval-decided`` in the log (PostgreSQL gave 5 to 20
    202s: the check and the insert were separate statements)."""
    model = Asking(tool_call_response("c1", "write", {}), text_response("done"))
    async with served(create_app(store_url, model.profiles)) as client:
        await client.post("/v1/sessions", json={"session_id": "s", "input": "go"})
        await wait_for_log(client, "s", asked)
        path = "/v1/sessions/s/approvals/c1"
        answers = await asyncio.gather(
            *[client.post(path, json={"decision": "allow" if n % 2 else "deny"}) for n in range(20)]
        )
        statuses = sorted(a.status_code for a in answers)
        assert statuses == [202] + [409] * 19
        assert {a.json()["error"]["code"] for a in answers if a.status_code == 409} == {
            "ALREADY_DECIDED"
        }
        events = await wait_for_log(client, "s", lambda ev: turn_ends(ev) == 1)
        assert [e["type"] for e in events].count("tool/approval-decided") == 1


async def test_integers_are_ascii_digits_only(store_url: str) -> None:
    """``?after=²``, ``?limit=³``, ``Last-Event-ID: ²`` and ``1:²`` are 422 (``str.isdigit``
    accepts digits ``int`` refuses: they were 500s)."""
    async with served(create_app(store_url, Model().profiles())) as client:
        await client.post("/v1/sessions", json={"session_id": "s"})
        cases: list[tuple[str, dict[str, Any], str]] = [
            ("/v1/sessions/s/log?after=²", {}, "invalid_query"),
            ("/v1/sessions/s/log?limit=³", {}, "invalid_query"),
            ("/v1/sessions/s/log?after=١", {}, "invalid_query"),
            ("/v1/sessions/s/events?after=²", {}, "invalid_query"),
            # a latin-1 byte: Starlette decodes header bytes as latin-1, \xb2 is '²'
            ("/v1/sessions/s/events", {"Last-Event-ID": b"\xb2"}, "invalid_last_event_id"),
            ("/v1/sessions/s/events", {"Last-Event-ID": b"1:\xb2"}, "invalid_last_event_id"),
        ]
        for path, headers, code in cases:
            answer = await client.get(path, headers=headers)
            assert (answer.status_code, answer.json()["error"]["code"]) == (422, code), path


HOSTILE_TEXTS = ["nul\x00here", "lone \ud800 surrogate", "\udfff"]


def raw(body: dict[str, Any]) -> bytes:
    """``body`` as JSON text with every non-ASCII character escaped (a lone surrogate can
    only travel as a ``\\uXXXX`` escape)."""
    import json

    return json.dumps(body).encode()


async def test_nul_and_lone_surrogates_are_422_in_every_text_field(store_url: str) -> None:
    """NUL or a lone surrogate in content, a message id, a key, a reason, a profile name,
    the first input, the meta (a value, a nested one, a key) or a path id → 422
    ``invalid_text`` (``invalid_session_id`` for a session id) and nothing stored (on
    PostgreSQL a NUL in an id or key and a surrogate in meta were 500s; a surrogate in a
    message made the session's log answer 500 on both stores)."""
    model = Asking(tool_call_response("c1", "write", {}), text_response("done"))
    async with served(create_app(store_url, model.profiles)) as client:
        await client.post("/v1/sessions", json={"session_id": "s", "input": "go"})
        events = await wait_for_log(client, "s", asked)
        last = len(events)
        for text in HOSTILE_TEXTS:
            cases: list[tuple[str, dict[str, Any], str]] = [
                ("/v1/sessions/s/messages", {"mode": "steer", "content": text}, "invalid_text"),
                (
                    "/v1/sessions/s/messages",
                    {"mode": "steer", "content": "x", "message_id": text},
                    "invalid_text",
                ),
                (
                    "/v1/sessions/s/messages",
                    {"mode": "steer", "content": "x", "idempotency_key": text},
                    "invalid_text",
                ),
                (
                    "/v1/sessions/s/approvals/c1",
                    {"decision": "allow", "reason": text},
                    "invalid_text",
                ),
                ("/v1/sessions", {"session_id": "n", "profile": text}, "invalid_text"),
                ("/v1/sessions", {"session_id": "n", "input": text}, "invalid_text"),
                ("/v1/sessions", {"session_id": "n", "meta": {"a": text}}, "invalid_text"),
                ("/v1/sessions", {"session_id": "n", "meta": {"a": [{"b": text}]}}, "invalid_text"),
                ("/v1/sessions", {"session_id": "n", "meta": {text: 1}}, "invalid_text"),
                ("/v1/sessions", {"session_id": text}, "invalid_session_id"),
            ]
            for path, body, code in cases:
                answer = await client.post(
                    path, content=raw(body), headers={"content-type": "application/json"}
                )
                assert (answer.status_code, answer.json()["error"]["code"]) == (422, code), (
                    path,
                    body,
                )
        for path in ("/v1/sessions/s%00", "/v1/sessions/s%00/log", "/v1/sessions/s/approvals/c%00"):
            method = "POST" if "approvals" in path else "GET"
            answer = await client.request(method, path, json={"decision": "allow"})
            assert (answer.status_code, answer.json()["error"]["code"]) == (422, "invalid_text")
        log = await client.get("/v1/sessions/s/log")
        assert log.status_code == 200
        assert len(log.json()["events"]) == last
        assert [s["session_id"] for s in (await client.get("/v1/sessions")).json()["sessions"]] == [
            "s"
        ]
        assert (await client.get("/v1/sessions/s")).json()["pending_approvals"][0]["call_id"] == (
            "c1"
        )


async def test_returned_urls_percent_encode_the_id(store_url: str) -> None:
    """``events_url`` of a session whose id holds ``?``, ``#``, ``%``, a space and non-ASCII
    is percent-encoded, so a client that follows it reaches that session's feed."""
    async with served(create_app(store_url, Model().profiles())) as client:
        session_id = "a?b#c%2Fd é"
        created = await client.post("/v1/sessions", json={"session_id": session_id})
        assert created.status_code == 201
        url = created.json()["events_url"]
        assert url == "/v1/sessions/a%3Fb%23c%252Fd%20%C3%A9/events"
        async with client.stream("GET", httpx.URL(url)) as feed:
            assert feed.status_code == 200
            assert feed.headers["content-type"].startswith("text/event-stream")
        info = await client.get(url.removesuffix("/events"))
        assert info.json()["session_id"] == session_id


async def test_the_first_answer_is_given_for_a_key_after_a_restart(tmp_path: Path) -> None:
    """SQLite: the key, the request it stood for and the answer are in the log (the
    message's ``source.http``), so another process on the same file answers a retry with
    the first answer and applies nothing, and refuses the key for another request."""
    url = f"sqlite:///{tmp_path / 'sessions.db'}"
    model = Model(text_response("one"))
    body = {"mode": "followup", "content": "hi", "idempotency_key": "k"}
    async with served(create_app(url, model.profiles())) as client:
        await client.post("/v1/sessions", json={"session_id": "s"})
        first = (await post(client, "s", body)).json()
        await wait_for_log(client, "s", lambda ev: turn_ends(ev) == 1)
    async with served(create_app(url, Model().profiles())) as client:
        retried = await post(client, "s", body)
        assert (retried.status_code, retried.json()) == (202, first)
        other = await post(client, "s", body | {"content": "changed"})
        assert other.json()["error"]["code"] == "IDEMPOTENCY_KEY_REUSED"
        following = await post(client, "s", {"mode": "inject", "content": "next"})
        assert following.json()["cmd_seq"] == first["cmd_seq"] + 1
        events = (await client.get("/v1/sessions/s/log")).json()["events"]
        assert [text for _id, text in inserted(events)] == ["hi", "next"]
        source = next(
            m["source"]
            for e in events
            if e["type"] == "agent/inbox/spliced"
            for m in e["data"]["inserted"]
        )
        assert source["kind"] == "user"
        assert source["http"]["idempotency_key"] == "k"
        assert source["http"]["cmd_seq"] == first["cmd_seq"]
