"""``GET /openapi.json`` (issue 26, API.md "Service": "the service's OpenAPI 3.1 document"):
a valid document, equal to the app's routes both ways, every error answer the ``Error``
schema, and 405 answers whose ``Allow`` names the methods the document gives the path."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, Literal

import httpx
import jsonschema
import pytest
from openapi_spec_validator import validate
from starlette.applications import Starlette
from starlette.routing import Route

from steerloop.service import create_app
from tests.service.profiles import profiles

from .served import served

pytestmark = pytest.mark.timeout(60)

WEB_CHAT = {"/", "/_web/{name}"}
"""The web chat's static assets: routes, but not the API (``_openapi``'s docstring)."""
ERROR_REF = "#/components/schemas/Error"


@pytest.fixture
async def client(tmp_path: Path) -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(f"sqlite:///{tmp_path / 'sessions.db'}", profiles, body_limit=1000)
    async with served(app) as client:
        yield client


async def document(client: httpx.AsyncClient) -> dict[str, Any]:
    answer = await client.get("/openapi.json")
    assert answer.status_code == 200
    doc: dict[str, Any] = answer.json()
    return doc


def route_operations(app: Starlette) -> set[tuple[str, str]]:
    """``(method, path)`` of every route of ``app`` as OpenAPI writes paths (HEAD, which
    Starlette adds to every GET route, is not an operation of its own)."""
    found = set()
    for route in app.routes:
        assert isinstance(route, Route)
        path = re.sub(r"\{(\w+):\w+\}", r"{\1}", route.path)
        found |= {(m, path) for m in route.methods or () if m != "HEAD"}
    return found


def doc_operations(doc: dict[str, Any]) -> set[tuple[str, str]]:
    return {(method.upper(), path) for path, item in doc["paths"].items() for method in item}


async def test_the_document_is_valid_openapi_3_1(client: httpx.AsyncClient) -> None:
    """Issue 26: OpenAPI 3.1, valid by the spec's schema; behind the edge like every route."""
    doc = await document(client)
    assert doc["openapi"].startswith("3.1")
    validate(doc)
    foreign = await client.get("/openapi.json", headers={"Host": "attacker.test"})
    assert foreign.status_code == 403


async def test_the_document_needs_no_token_the_api_does(tmp_path: Path) -> None:
    """Issue 26: ``/openapi.json`` holds no secret and is open like ``/healthz``; with a
    token the document says each API operation needs ``bearerAuth`` and the server agrees."""
    app = create_app(f"sqlite:///{tmp_path / 'a.db'}", profiles, token="secret")
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as c:
        answer = await c.get("/openapi.json")
        refused = await c.get("/v1/sessions")
    assert answer.status_code == 200
    assert refused.status_code == 401
    doc = answer.json()
    assert doc["security"] == [{"bearerAuth": []}]
    assert "security" not in doc["paths"]["/v1/sessions"]["get"]  # the document's default
    assert doc["paths"]["/openapi.json"]["get"]["security"] == []


async def test_the_document_names_exactly_the_apps_routes(tmp_path: Path) -> None:
    """Issue 26: "a test keeps it equal to the routes", both ways, for each role: the web
    chat's static assets are the only routes left out; a worker serves only /healthz."""
    roles: tuple[tuple[Literal["all", "worker"], str], ...] = (
        ("all", f"sqlite:///{tmp_path / 'a.db'}"),
        ("worker", "postgresql://x"),
    )
    for role, store in roles:
        app = create_app(store, profiles, role=role)
        routes = {(m, p) for m, p in route_operations(app) if p not in WEB_CHAT}
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as c:
            answer = await c.get("/openapi.json")
        if role == "worker":
            assert routes == {("GET", "/healthz")}
            assert answer.status_code == 404
            continue
        doc = answer.json()
        assert doc_operations(doc) == routes
        assert {p for _, p in route_operations(app)} - {p for _, p in routes} == WEB_CHAT
        assert ("GET", "/openapi.json") in routes


async def test_every_error_answer_is_the_error_schema(client: httpx.AsyncClient) -> None:
    """Issue 26: one error shape, ``{"error": {"code", "message"}}``, for every 4xx/5xx;
    429 and 503 say ``Retry-After``; the feed reads ``Last-Event-ID`` and ``after``."""
    doc = await document(client)
    for path, item in doc["paths"].items():
        for method, operation in item.items():
            for status, answer in operation["responses"].items():
                if int(status) >= 400:
                    schema = answer["content"]["application/json"]["schema"]
                    assert schema == {"$ref": ERROR_REF}, (method, path, status)
                if int(status) in (429, 503):
                    assert "Retry-After" in answer["headers"], (method, path, status)
    assert doc["components"]["schemas"]["Error"]["required"] == ["error"]
    feed = doc["paths"]["/v1/sessions/{session_id}/events"]["get"]
    assert {(p["in"], p["name"]) for p in feed["parameters"]} >= {
        ("header", "Last-Event-ID"),
        ("query", "after"),
    }
    assert "text/event-stream" in feed["responses"]["200"]["content"]
    assert doc["components"]["securitySchemes"]["bearerAuth"]["scheme"] == "bearer"
    assert doc["paths"]["/healthz"]["get"]["security"] == []


async def test_405_allows_the_methods_the_document_gives_the_path(
    client: httpx.AsyncClient,
) -> None:
    """Issue 26: "405 answers carry Allow": every method of the path, HEAD wherever GET is
    (Starlette answers it), as an ``Error`` body; checked with a real request per path."""
    doc = await document(client)
    for path, item in doc["paths"].items():
        methods = {m.upper() for m in item}
        expected = sorted(methods | ({"HEAD"} if "GET" in methods else set()))
        url = re.sub(r"\{\w+\}", "x", path)
        answer = await client.request("DELETE", url)
        assert answer.status_code == 405, path
        assert answer.headers["allow"] == ", ".join(expected), path
        assert answer.json()["error"]["code"] == "method_not_allowed"
    sessions = await client.request("PUT", "/v1/sessions")
    assert sessions.headers["allow"] == "GET, HEAD, POST"


def answer_schema(doc: dict[str, Any], path: str, method: str, status: int) -> dict[str, Any]:
    """The schema of one documented JSON answer, resolvable against the document."""
    answer = doc["paths"][path][method]["responses"][str(status)]
    schema = answer["content"]["application/json"]["schema"]
    return {**schema, "components": doc["components"]}


async def test_error_and_success_answers_validate_against_their_schemas(
    client: httpx.AsyncClient,
) -> None:
    """Issue 26: real 413, 422, 400 and 404 answers, and the 201/202/200 ones, are valid
    against the schemas the document gives them. (No endpoint answers 415: a body is read
    as JSON whatever its ``Content-Type``, and ``test_edge`` keeps that.)"""
    doc = await document(client)
    big = await client.post("/v1/sessions", json={"meta": {"x": "y" * 2000}})
    bad = await client.post("/v1/sessions", json={"session_id": ".."})
    broken = await client.post("/v1/sessions", content=b"{", headers={"content-type": "x/y"})
    missing = await client.get("/v1/sessions/nobody")
    for answer, status in ((big, 413), (bad, 422), (broken, 400), (missing, 404)):
        assert answer.status_code == status
        path = "/v1/sessions" if status != 404 else "/v1/sessions/{session_id}"
        method = "post" if status != 404 else "get"
        jsonschema.validate(answer.json(), answer_schema(doc, path, method, status))
    created = await client.post("/v1/sessions", json={"session_id": "s"})
    sent = await client.post("/v1/sessions/s/messages", json={"mode": "followup", "content": "hi"})
    info = await client.get("/v1/sessions/s")
    for answer, path, method, status in (
        (created, "/v1/sessions", "post", 201),
        (sent, "/v1/sessions/{session_id}/messages", "post", 202),
        (info, "/v1/sessions/{session_id}", "get", 200),
    ):
        assert answer.status_code == status, answer.text
        jsonschema.validate(answer.json(), answer_schema(doc, path, method, status))
