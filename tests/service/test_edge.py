"""Who may talk to a served process (issue 23, API.md "The HTTP edge"): a ``Host`` that does
not name the server (DNS rebinding) and a browser request from a foreign origin (CSRF) are
403 with the JSON error on every route; requests without ``Origin`` keep working with any
content type; CORS headers only for configured origins; no answer may be framed. Real
uvicorn on 127.0.0.1:0; the browser's side of the same attacks is in ``test_edge_browser``."""

from __future__ import annotations

import asyncio
import socket
from typing import Any

import httpx
import pytest

from steerloop.service import create_app
from steerloop.testing import text_response, tool_call_response

from .served import served, wait_for_log
from .stores import store_url
from .test_approvals import Asking, asked

pytestmark = pytest.mark.timeout(120)
__all__ = ["store_url"]

FOREIGN = "attacker.example"


def routes(session_id: str = "s") -> list[tuple[str, str, dict[str, Any] | None]]:
    """``(method, path, json)`` of every route: the API, SSE, AG-UI, health, the page."""
    base = f"/v1/sessions/{session_id}"
    return [
        ("GET", "/healthz", None),
        ("GET", "/", None),
        ("GET", "/app.js", None),
        ("GET", "/v1/sessions", None),
        ("POST", "/v1/sessions", {"session_id": "new"}),
        ("GET", base, None),
        ("GET", f"{base}/log", None),
        ("GET", f"{base}/events", None),
        ("POST", f"{base}/messages", {"mode": "followup", "content": "hi"}),
        ("POST", f"{base}/cancel", {}),
        ("POST", f"{base}/approvals/c1", {"decision": "allow"}),
        ("POST", "/v1/agui", {"threadId": session_id, "runId": "r", "messages": []}),
    ]


async def answers(
    client: httpx.AsyncClient, headers: dict[str, str]
) -> list[tuple[str, int, str | None]]:
    """Each route's status and error code under ``headers`` (SSE: the head only)."""
    seen = []
    for method, path, body in routes():
        async with client.stream(method, path, json=body, headers=headers) as answer:
            code = None
            if answer.headers.get("content-type", "").startswith("application/json"):
                await answer.aread()
                code = answer.json().get("error", {}).get("code")
            seen.append((path, answer.status_code, code))
    return seen


async def approval_case(client: httpx.AsyncClient) -> list[dict[str, Any]]:
    await client.post("/v1/sessions", json={"session_id": "s", "input": "go"})
    return await wait_for_log(client, "s", asked)


async def test_a_foreign_host_is_refused_on_every_route(store_url: str) -> None:
    """``Host: attacker.example:PORT`` (a rebound name) → 403 ``host_not_allowed`` on every
    route, health, SSE, AG-UI and the page's assets included; nothing is read or changed:
    the pending call stays pending and no session is made. Loopback names, literals and
    allowed names pass (a ``*.domain`` one too); so does a client without a browser."""
    model = Asking(tool_call_response("c1", "write", {}), text_response("done"))
    app = create_app(store_url, model.profiles, allowed_hosts=["proxy.test", "*.corp.test"])
    async with served(app) as client:
        before = await approval_case(client)
        port = client.base_url.port
        for name in (FOREIGN, "127.0.0.1.attacker.example", "localhost.attacker.example"):
            for path, status, code in await answers(client, {"Host": f"{name}:{port}"}):
                assert (status, code) == (403, "host_not_allowed"), (name, path)
        for name in ("localhost", "127.0.0.1", "[::1]", "LOCALHOST.", "127.0.0.2", "proxy.test"):
            answer = await client.get("/v1/sessions", headers={"Host": f"{name}:{port}"})
            assert answer.status_code == 200, name
        assert (await client.get("/healthz", headers={"Host": "a.corp.test"})).status_code == 200
        assert (await client.get("/healthz", headers={"Host": "corp.test"})).status_code == 403
        assert model.ran == []
        assert (await client.get("/v1/sessions/s/log")).json()["events"] == before
        listed = (await client.get("/v1/sessions")).json()["sessions"]
        assert [s["session_id"] for s in listed] == ["s"]


def raw_request(port: int, request: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(request)
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks)


async def test_a_request_without_a_host_header_is_refused(store_url: str) -> None:
    """HTTP/1.0 allows leaving ``Host`` out: such a request names no server and is 403."""
    async with served(create_app(store_url, Asking().profiles)) as client:
        port = client.base_url.port
        assert port is not None
        head = await asyncio.to_thread(raw_request, port, b"GET /healthz HTTP/1.0\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 403 ")
        assert b'"host_not_allowed"' in head


async def test_a_foreign_origin_is_refused_and_no_origin_is_served(store_url: str) -> None:
    """A request carrying a foreign ``Origin`` (another port is another origin; ``null``
    too) → 403 ``origin_not_allowed`` on every route, the pending call untouched; so is
    ``Sec-Fetch-Site: cross-site`` without ``Origin`` (a no-cors GET), but for a top-level
    navigation to the page. The server's own origin (as the request addressed it) passes,
    and a request without ``Origin`` works whatever its content type (curl)."""
    model = Asking(tool_call_response("c1", "write", {}), text_response("done"))
    async with served(create_app(store_url, model.profiles)) as client:
        before = await approval_case(client)
        port = client.base_url.port
        assert port is not None
        for origin in (
            f"http://{FOREIGN}:{port}",
            f"http://127.0.0.1:{port + 1}",
            f"https://127.0.0.1:{port}",
            "null",
        ):
            for path, status, code in await answers(client, {"Origin": origin}):
                assert (status, code) == (403, "origin_not_allowed"), (origin, path)
        for path, status, code in await answers(client, {"Sec-Fetch-Site": "cross-site"}):
            assert (status, code) == (403, "origin_not_allowed"), path
        navigation = {
            "Sec-Fetch-Site": "cross-site",
            "Sec-Fetch-Mode": "navigate",
            "Sec-Fetch-Dest": "document",
        }
        assert (await client.get("/", headers=navigation)).status_code == 200
        framed = navigation | {"Sec-Fetch-Dest": "iframe"}
        assert (await client.get("/", headers=framed)).status_code == 403
        assert model.ran == []
        assert (await client.get("/v1/sessions/s/log")).json()["events"] == before
        for host, origin in (
            (f"127.0.0.1:{port}", f"http://127.0.0.1:{port}"),
            (f"localhost:{port}", f"http://localhost:{port}"),
        ):
            own = await client.get("/v1/sessions", headers={"Host": host, "Origin": origin})
            assert own.status_code == 200
            assert "access-control-allow-origin" not in own.headers
        plain = await client.post(
            "/v1/sessions",
            content=b'{"session_id": "t"}',
            headers={"content-type": "text/plain"},
        )
        assert plain.status_code == 201
        allowed = await client.post(
            "/v1/sessions/s/approvals/c1",
            json={"decision": "allow"},
            headers={"Origin": f"http://127.0.0.1:{port}", "Sec-Fetch-Site": "same-origin"},
        )
        assert allowed.status_code == 202


async def test_an_allowed_origin_gets_cors_and_others_do_not(store_url: str) -> None:
    """With ``allowed_origins``, that origin's requests and preflights are answered with
    CORS headers (``Retry-After`` exposed); any other origin is still 403 and its preflight
    too; without the setting no answer carries a CORS header."""
    allowed = "http://app.test:3000"
    app = create_app(store_url, Asking().profiles, allowed_origins=[allowed])
    async with served(app) as client:
        answer = await client.post(
            "/v1/sessions", json={"session_id": "c"}, headers={"Origin": allowed}
        )
        assert answer.status_code == 201
        assert answer.headers["access-control-allow-origin"] == allowed
        assert "retry-after" in answer.headers["access-control-expose-headers"].lower()
        preflight = await client.options(
            "/v1/sessions/c/messages",
            headers={
                "Origin": allowed,
                "Access-Control-Request-Method": "POST",
                "Access-Control-Request-Headers": "content-type, authorization",
            },
        )
        assert preflight.status_code == 200
        assert preflight.headers["access-control-allow-origin"] == allowed
        other = await client.options(
            "/v1/sessions/c/messages",
            headers={"Origin": "http://evil.test", "Access-Control-Request-Method": "POST"},
        )
        assert (other.status_code, other.json()["error"]["code"]) == (403, "origin_not_allowed")
        assert "access-control-allow-origin" not in other.headers
        health = await client.get("/healthz")
        assert health.headers["content-security-policy"] == f"frame-ancestors 'self' {allowed}"
    async with served(create_app(store_url, Asking().profiles)) as client:
        answer = await client.get("/v1/sessions", headers={"Origin": str(client.base_url)})
        assert not [h for h in answer.headers if h.startswith("access-control-")]
        for path in ("/healthz", "/v1/sessions", "/"):
            answer = await client.get(path)
            assert "frame-ancestors 'none'" in answer.headers["content-security-policy"], path
            assert answer.headers["x-frame-options"] == "DENY"


def test_bad_edge_settings_are_refused() -> None:
    """An empty or ``*`` allowed host and an origin that is not ``scheme://host[:port]`` are
    refused when the app is built, not at the first request."""
    for hosts in (["*"], [""], ["*."]):
        with pytest.raises(ValueError):
            create_app("sqlite:///unused.db", (), allowed_hosts=hosts)
    for origins in (["evil.test"], ["http://a.test/path"], ["ftp://a.test"], ["null"]):
        with pytest.raises(ValueError):
            create_app("sqlite:///unused.db", (), allowed_origins=origins)
