"""``steerloop eval replay`` and ``steerloop sessions export --format bundle`` as processes:
the demo's session replayed against an OpenAI-compatible loopback server."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from steerloop import Runtime
from steerloop.evals import load_bundle
from tests.cli.helpers import clean_env, request_text, run_cli, text_reply
from tests.llm.openai_wire import tool_call_events
from tests.llm.sse_server import SSEServer, sse_reply

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    path = tmp_path / "ws"
    path.mkdir()
    return path


async def demo_session(env: dict[str, str], store: str, workspace: Path) -> str:
    """Run ``steerloop demo`` on ``store``; its session id."""
    code, out, err = await run_cli("demo", "--store", store, env=env, cwd=workspace)
    assert code == 0, err
    (session_id,) = {w for w in out.split() if w.startswith("demo-")}
    return session_id


def replies(server: SSEServer) -> None:
    """The candidate model: one city at a time in turn 1, then short answers."""
    server.add(
        sse_reply(tool_call_events("k1", "weather", {"city": "Paris"})),
        text_reply("Paris 21 °C clear."),
        text_reply("A short report: mild in Paris."),
        text_reply("Any time."),
    )


async def test_eval_replay_writes_the_report_and_exits_zero(
    tmp_path: Path, server: SSEServer, workspace: Path
) -> None:
    """The demo (parallel calls, a steer at step 2, a cancel mid-answer, a resume) replayed
    with another model: exit 0, the report names the first divergence; the steer reached
    the model at step 2; the cancel was replayed; no tool ran."""
    store = f"sqlite:///{tmp_path / 's.db'}"
    env = clean_env(tmp_path, server)
    session_id = await demo_session(env, store, workspace)
    replies(server)
    report_path = tmp_path / "report.md"
    code, out, err = await run_cli(
        "eval", "replay", session_id, "--model", "local/m", "--store", store,
        "--out", str(report_path), env=env, cwd=workspace,
    )  # fmt: skip
    assert code == 0, err
    assert out == ""
    assert "report written to" in err
    assert "first divergence: turn 1, step 1: the recording called" in " ".join(err.split())
    report = report_path.read_text(encoding="utf-8")
    assert report.startswith(f"# Replay of session `{session_id}`\n")
    assert "| model | scripted/demo | local/m |" in report
    assert "- cancel by the user: recorded after step 1, replayed after step 1" in report
    assert len(server.requests) == 4
    # The steer recorded at step 2 reached the candidate's second request.
    assert "Keep the answer to one line." in request_text(server, 1)
    assert "Keep the answer to one line." not in request_text(server, 0)


async def test_eval_replay_json_and_bundle_export(
    tmp_path: Path, server: SSEServer, workspace: Path
) -> None:
    """``--json`` on stdout is the report's JSON; the bundle export imports into another
    store with the same events."""
    store = f"sqlite:///{tmp_path / 's.db'}"
    env = clean_env(tmp_path, server)
    session_id = await demo_session(env, store, workspace)
    replies(server)
    code, out, err = await run_cli(
        "eval", "replay", session_id, "--json", "--store", store, env=env, cwd=workspace
    )
    assert code == 0, err
    data: dict[str, Any] = json.loads(out)
    assert data["session_id"] == session_id
    assert data["model"] == "local/m"
    assert [t["turn"] for t in data["turns"]] == [1, 2, 3]
    first = data["turns"][0]
    assert [(c["status"], json.loads(c["arguments"])["city"]) for c in first["calls"]] == [
        ("matched", "Paris"),
        ("missing", "Oslo"),
        ("missing", "Lima"),
    ]
    assert [(i["recorded_step"], i["delivered_step"]) for i in first["inputs"]] == [(1, 1), (2, 2)]
    assert data["turns"][1]["new"]["end"] == "aborted"
    assert data["totals"]["tool_executions"] == 0

    code, bundle, err = await run_cli(
        "sessions", "export", session_id, "--format", "bundle", "--store", store,
        env=env, cwd=workspace,
    )  # fmt: skip
    assert code == 0, err
    path = tmp_path / "demo.bundle"
    path.write_text(bundle, encoding="utf-8")
    async with Runtime.open(store=store) as rt:
        stored = rt.sessions.persistence
        assert stored is not None
        original = await stored.load(session_id)
    async with Runtime.open(store="memory://") as rt:
        assert await load_bundle(path, rt) == session_id
        assert await rt.sessions.persistence.load(session_id) == original  # type: ignore[union-attr]


async def test_eval_replay_errors(tmp_path: Path, server: SSEServer, workspace: Path) -> None:
    """An unknown session is an error (exit 1, nothing written); a bad flag is a usage
    error (exit 2)."""
    store = f"sqlite:///{tmp_path / 's.db'}"
    env = clean_env(tmp_path, server)
    await demo_session(env, store, workspace)
    code, out, err = await run_cli(
        "eval", "replay", "nope", "--store", store, env=env, cwd=workspace
    )
    assert code == 1
    assert "error:" in err and "nope" in err
    assert out == ""
    code, _out, err = await run_cli(
        "eval", "replay", "nope", "--tools", "all", "--store", store, env=env, cwd=workspace
    )
    assert code == 2
    assert "--tools must be recorded or live" in " ".join(err.split())
    code, _out, err = await run_cli(
        "eval", "replay", "nope", "--store", str(tmp_path / "missing.db"), env=env, cwd=workspace
    )
    assert code == 1
    assert "no session store at" in " ".join(err.split())
    assert server.requests == []
