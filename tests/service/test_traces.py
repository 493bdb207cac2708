"""A caller's trace continued into the turns its messages cause (issue 25), on both stores:
``POST /v1/sessions/{id}/messages`` with ``traceparent`` makes the turn the message causes
a *child* of the caller's span (its ``invoke_agent`` span in the caller's trace, named after
the profile, with ``gen_ai.provider.name``); a later, untraced turn keeps a link to it.

SQLite: the in-process host (``--role all``), spans read from the OTel SDK's in-memory
exporter. PostgreSQL: an API node here and a real worker process (``steerloop serve --role
worker``) whose SDK exporter appends each span to a file the test reads
(``otel_profiles.py``): the traceparent travels in the stored command."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from steerloop import Runtime
from steerloop.service import Profile, create_app
from steerloop.telemetry import install_otel

from . import pgprofiles
from .otel_profiles import span_json
from .pgworkers import pg_schema, until, workers
from .profiles import profiles as scripted_profiles
from .served import served, turn_ends, wait_for_log

pytestmark = pytest.mark.timeout(120)

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
CALLER = "00f067aa0ba902b7"
TRACEPARENT = f"00-{TRACE_ID}-{CALLER}-01"


async def traced_then_untraced(client: httpx.AsyncClient, sid: str) -> None:
    """Create ``sid``; one followup with ``traceparent`` (turn 1), then one without (turn 2)."""
    assert (await client.post("/v1/sessions", json={"session_id": sid})).status_code == 201
    traced = {"mode": "followup", "content": "traced"}
    headers = {"traceparent": TRACEPARENT, "tracestate": "vendor=1"}
    sent = await client.post(f"/v1/sessions/{sid}/messages", json=traced, headers=headers)
    assert sent.status_code == 202, sent.text
    await wait_for_log(client, sid, lambda ev: turn_ends(ev) == 1)
    plain = {"mode": "followup", "content": "untraced"}
    assert (await client.post(f"/v1/sessions/{sid}/messages", json=plain)).status_code == 202
    await wait_for_log(client, sid, lambda ev: turn_ends(ev) == 2)


def check_turns(spans: list[dict[str, Any]], sid: str) -> None:
    """Two turns of ``sid``: the first a child of the caller (remote parent, the caller's
    trace, the chat span under it), the second a root of its own trace linking back."""
    turns = [s for s in spans if s["name"].startswith("invoke_agent")]
    assert [s["name"] for s in turns] == ["invoke_agent default", "invoke_agent default"]
    first, second = turns
    assert (first["trace_id"], first["parent"], first["parent_remote"]) == (TRACE_ID, CALLER, True)
    assert first["links"] == []
    assert first["attributes"] == {
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.conversation.id": sid,
        "gen_ai.agent.id": sid,
        "gen_ai.agent.name": "default",
        "gen_ai.provider.name": "mock",
    }
    chats = [s for s in spans if s["name"] == "chat m" and s["trace_id"] == TRACE_ID]
    assert [c["parent"] for c in chats] == [first["span_id"]]
    assert second["trace_id"] != TRACE_ID and second["parent"] is None
    assert second["links"] == [[TRACE_ID, CALLER]]


async def test_sqlite_the_caused_turn_is_a_child_of_the_callers_span(tmp_path: Path) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))

    def profiles(rt: Runtime) -> list[Profile]:
        install_otel(rt, tracer_provider=provider)
        return scripted_profiles(rt)

    app = create_app(f"sqlite:///{tmp_path / 'sessions.db'}", profiles)
    async with served(app) as client:
        await traced_then_untraced(client, "t1")
    spans = sorted(exporter.get_finished_spans(), key=lambda s: s.start_time or 0)
    check_turns([span_json(s) for s in spans], "t1")


async def test_postgres_the_caused_turn_is_a_child_through_a_worker_process(
    tmp_path: Path,
) -> None:
    spans_file = tmp_path / "spans.jsonl"
    env = {"STEERLOOP_TEST_SPANS": str(spans_file), "STEERLOOP_TEST_GATES": str(tmp_path)}
    async with (
        pg_schema() as pg,
        workers(tmp_path, pg.url, 1, "--profiles", "tests.service.otel_profiles:profiles", **env),
        served(create_app(pg.url, pgprofiles.profiles, "api")) as client,
    ):
        await traced_then_untraced(client, "p1")

        def spans() -> list[dict[str, Any]]:
            if not spans_file.exists():
                return []
            lines = spans_file.read_text().splitlines()
            return [json.loads(line) for line in lines if line.strip()]

        found = await until(
            lambda: [s for s in spans() if s["name"].startswith("invoke_agent")][1:],
            "both turn spans exported",
        )
        assert found
    check_turns(spans(), "p1")
