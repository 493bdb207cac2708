"""The ``steerloop`` command as a subprocess: demo, sessions, run (exit codes), errors."""

from __future__ import annotations

import asyncio
import json
import signal
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from steerloop.cli import app
from tests.cli.helpers import (
    CLI,
    clean_env,
    run_cli,
    text_reply,
    wait_for,
)
from tests.llm.openai_wire import (
    text_events,
    tool_call_events,
)
from tests.llm.sse_server import SSEServer, json_reply, sse_reply

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    path = tmp_path / "ws"
    path.mkdir()
    (path / "notes.txt").write_text("alpha\nbeta\n")
    return path


def json_lines(text: str) -> list[dict[str, Any]]:
    """The session events among JSON lines (live stream frames carry no ``seq``)."""
    lines = [json.loads(line) for line in text.splitlines() if line.strip()]
    return [line for line in lines if "seq" in line]


def assert_seqs(events: list[dict[str, Any]]) -> None:
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))


async def test_demo_then_sessions_on_the_default_store(tmp_path: Path, workspace: Path) -> None:
    env = clean_env(tmp_path)
    code, out, err = await run_cli("demo", env=env, cwd=workspace)
    assert code == 0, err
    db = Path(env["XDG_DATA_HOME"]) / "steerloop" / "sessions.db"
    assert db.is_file()
    assert f"stored in sqlite:///{db}" in out.replace("\n", "")

    code, out, err = await run_cli("sessions", "ls", env=env, cwd=workspace)
    assert code == 0, err
    (session_id,) = [w for line in out.splitlines() for w in line.split() if w.startswith("demo-")]

    code, out, err = await run_cli("sessions", "show", session_id, env=env, cwd=workspace)
    assert code == 0, err
    assert "you ❯ What's the weather in Paris, Oslo and Lima?" in out
    assert "✓ weather #c1" in out
    assert "turn 2 aborted (user)" in out

    code, out, err = await run_cli(
        "sessions", "export", session_id, "--format", "jsonl", env=env, cwd=workspace
    )
    assert code == 0, err
    events = json_lines(out)
    assert_seqs(events)
    ends = [e["data"]["reason"]["kind"] for e in events if e["type"] == "turn/end"]
    assert ends == ["completed", "aborted", "completed"]

    code, out, err = await run_cli(
        "sessions", "export", session_id, "--format", "markdown", env=env, cwd=workspace
    )
    assert code == 0, err
    assert out.startswith(f"# Session {session_id}\n")
    assert "**user**\n\nWhat's the weather in Paris, Oslo and Lima?" in out
    assert '`weather({"city": "Paris"})`' in out

    code, out, _err = await run_cli("sessions", "show", "nope", env=env, cwd=workspace)
    assert code == 1
    assert "error:" in out and "nope" in out


async def test_a_store_url_under_the_home_directory(tmp_path: Path, workspace: Path) -> None:
    """``--store sqlite:///~/...`` means the user's home, for the CLI (which creates the
    directory) and for the store alike; the session lists from there."""
    env = clean_env(tmp_path)
    store = "sqlite:///~/steerloop-sessions/s.db"
    code, out, err = await run_cli("demo", "--store", store, env=env, cwd=workspace)
    assert code == 0, err
    db = Path(env["HOME"]) / "steerloop-sessions" / "s.db"
    assert db.is_file()
    code, out, err = await run_cli("sessions", "ls", "--store", store, env=env, cwd=workspace)
    assert code == 0, err
    assert "demo-" in out
    assert not (workspace / "~").exists()


async def test_run_json_streams_the_events_of_a_tool_turn(
    tmp_path: Path, server: SSEServer, workspace: Path
) -> None:
    store = f"sqlite:///{tmp_path / 's.db'}"
    env = clean_env(tmp_path, server)
    server.add(
        sse_reply(tool_call_events("r1", "read_file", {"path": "notes.txt"})),
        text_reply("The notes say alpha and beta."),
    )
    code, out, err = await run_cli(
        "run", "what is in notes.txt?", "--json", "--session", "R1", "--store", store,
        env=env, cwd=workspace,
    )  # fmt: skip
    assert code == 0, err
    events = json_lines(out)
    assert_seqs(events)
    types = [e["type"] for e in events]
    assert types[:4] == ["agent/inbox/spliced", "turn/start", "agent/inbox/spliced", "step/start"]
    assert types.count("turn/start") == types.count("turn/end") == 1
    assert types.count("step/start") == types.count("step/end") == 2
    (call,) = [e for e in events if e["type"] == "tool/call"]
    assert call["data"]["name"] == "read_file"
    (result,) = [e for e in events if e["type"] == "tool/result"]
    assert "alpha" in json.dumps(result["data"]["message"]["content"])
    assert events[-1]["type"] == "turn/end"
    assert events[-1]["data"]["reason"]["kind"] == "completed"
    # The second request carried the tool result back to the model.
    assert server.requests[1].json()["messages"][-1]["role"] == "tool"

    # The same session continues on the next run, rendered for people this time.
    server.add(text_reply("Still alpha and beta."))
    code, out, err = await run_cli(
        "run", "again?", "--session", "R1", "--store", store, env=env, cwd=workspace
    )
    assert code == 0, err
    assert "you ❯ again?" in out
    assert "Still alpha and beta." in out
    assert "turn 2 completed" in out
    assert "what is in notes.txt?" in json.dumps(server.requests[2].json()["messages"])


async def test_run_exit_code_follows_an_error_turn(
    tmp_path: Path, server: SSEServer, workspace: Path
) -> None:
    env = clean_env(tmp_path, server)
    server.add(json_reply(400, {"error": {"message": "model m is unknown", "type": "bad"}}))
    code, out, err = await run_cli(
        "run", "hi", "--json", "--store", "memory://", env=env, cwd=workspace
    )
    assert code == 1, err
    end = json_lines(out)[-1]
    assert end["type"] == "turn/end"
    assert end["data"]["reason"]["kind"] == "error"
    assert "model m is unknown" in json.dumps(end["data"]["reason"])
    assert len(server.requests) == 1  # a 400 is not retried


async def test_run_ctrl_c_aborts_the_turn_with_exit_130(
    tmp_path: Path, server: SSEServer, workspace: Path
) -> None:
    env = clean_env(tmp_path, server)
    server.add(sse_reply(text_events("partial answer"), hang_after=2))
    proc = await asyncio.create_subprocess_exec(
        *CLI, "run", "hi", "--json", "--store", "memory://",
        env=env, cwd=workspace, stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        # The request is sent after the SIGINT handler is installed.
        await wait_for(lambda: server.requests, "the request")
        proc.send_signal(signal.SIGINT)
        out, err = await asyncio.wait_for(proc.communicate(), 30)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    assert proc.returncode == 130, err.decode()
    assert server.requests[0].client_closed.is_set()
    end = json_lines(out.decode())[-1]
    assert end["data"]["reason"]["kind"] == "aborted"


@pytest.mark.parametrize(
    ("command", "needle"),
    [
        (["run", "hi"], "set DEEPSEEK_API_KEY"),
        (["run", "hi", "--model", "deepseek/deepseek-chat"], "set DEEPSEEK_API_KEY"),
        (["run", "hi", "--model", "anthropic/claude-x"], "set ANTHROPIC_API_KEY"),
        (["chat"], "set DEEPSEEK_API_KEY"),
    ],
)
async def test_missing_provider_is_exit_2_naming_what_to_set(
    tmp_path: Path, workspace: Path, command: list[str], needle: str
) -> None:
    env = clean_env(tmp_path)
    code, out, err = await run_cli(*command, "--store", "memory://", env=env, cwd=workspace)
    assert code == 2
    text = " ".join((out + err).split())
    assert needle in text
    assert "Traceback" not in out + err


def test_invalid_approve_is_a_usage_error(
    tmp_path: Path, workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for key, value in clean_env(tmp_path).items():
        monkeypatch.setenv(key, value)
    monkeypatch.chdir(workspace)
    for command in (["run", "hi"], ["chat"]):
        result = CliRunner().invoke(app, [*command, "--approve", "sometimes"])
        assert result.exit_code == 2, result.output
        assert "--approve must be ask, auto or read-only" in " ".join(result.output.split())


def test_export_rejects_an_unknown_format(
    tmp_path: Path, workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for key, value in clean_env(tmp_path).items():
        monkeypatch.setenv(key, value)
    monkeypatch.chdir(workspace)
    result = CliRunner().invoke(app, ["sessions", "export", "x", "--format", "xml"])
    assert result.exit_code == 2
    assert "--format must be jsonl, markdown or bundle" in " ".join(result.output.split())
