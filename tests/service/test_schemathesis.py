"""The server against its own OpenAPI document (issue 26): schemathesis generates requests
for every operation of ``GET /openapi.json`` (bounded, derandomized) and checks each answer:
no 5xx, a documented status, a body valid against the documented schema.

A real uvicorn on loopback, a SQLite file store, the scripted ``mock`` model (no network).
The SSE operations stream until the client leaves, so they are left out of the fuzzing
(``test_openapi.py`` checks their documents). Under ``CI=true`` a missing schemathesis is
a failure, not a skip."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import pytest

from steerloop.service import create_app
from tests.service.profiles import profiles

from .served import served, types, wait_for_log

pytestmark = pytest.mark.timeout(120)

MAX_EXAMPLES = 30
STREAMING = ("/v1/sessions/{session_id}/events", "/v1/agui")


def _schemathesis() -> Any:
    try:
        import schemathesis
    except ImportError as exc:
        if os.environ.get("CI") == "true":
            pytest.fail(f"schemathesis is required under CI=true: {exc}")
        pytest.skip(f"schemathesis is not installed: {exc}")
    return schemathesis


def fuzz(base_url: str, session_id: str) -> list[str]:
    """Every non-streaming operation, ``MAX_EXAMPLES`` cases each, and again with the path's
    session ``session_id`` (a session with a turn in its log: answers past the 404); the
    failures found."""
    schemathesis = _schemathesis()
    from schemathesis.checks import not_a_server_error
    from schemathesis.specs.openapi.checks import (
        response_schema_conformance,
        status_code_conformance,
    )

    config = schemathesis.Config()
    schema = schemathesis.openapi.from_url(f"{base_url}/openapi.json", config=config)
    schema = schema.exclude(path=list(STREAMING))
    checks = [not_a_server_error, response_schema_conformance, status_code_conformance]
    failures: list[str] = []
    operations = [result.ok() for result in schema.get_all_operations()]
    for operation in operations:
        fixed = {"session_id": session_id} if "{session_id}" in operation.path else None
        for path_parameters in (None, fixed) if fixed else (None,):
            failures += _fuzz_one(operation, base_url, checks, path_parameters)
    return failures


def _fuzz_one(
    operation: Any, base_url: str, checks: list[Any], path_parameters: dict[str, str] | None
) -> list[str]:
    from hypothesis import HealthCheck, given, settings

    @given(case=operation.as_strategy(path_parameters=path_parameters))
    @settings(
        max_examples=MAX_EXAMPLES,
        derandomize=True,
        database=None,
        deadline=None,
        suppress_health_check=list(HealthCheck),
    )
    def check(case: Any) -> None:
        response = case.call(base_url=base_url, timeout=10)
        case.validate_response(response, checks=checks)

    try:
        check()
    except Exception as exc:  # one operation's failure must not hide another's
        return [f"{operation.label} {path_parameters or ''}: {exc}"]
    return []


async def test_the_server_conforms_to_its_openapi_document(tmp_path: Path) -> None:
    """Issue 26: in CI, schemathesis against /openapi.json: no 5xx, every answer's status
    and body as the document says."""
    _schemathesis()
    app = create_app(f"sqlite:///{tmp_path / 'sessions.db'}", profiles)
    async with served(app) as client:
        created = await client.post("/v1/sessions", json={"input": "hello"})
        session_id = created.json()["session_id"]
        await wait_for_log(client, session_id, lambda events: "turn/end" in types(events))
        base_url = str(client.base_url).rstrip("/")
        failures = await asyncio.to_thread(fuzz, base_url, session_id)
    assert failures == []
