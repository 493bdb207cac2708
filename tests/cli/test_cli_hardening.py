"""Issue 11, command-line items: each test failed against the code before its fix."""

from __future__ import annotations

import asyncio
import io
import json
import re
import sys
import time
from pathlib import Path
from typing import Any, cast

import pytest
from rich.console import Console
from typer.testing import CliRunner

from steerloop.cli import app
from steerloop.cli._demo import run_demo
from tests.cli.helpers import (
    CLI,
    clean_env,
    run_cli,
    text_reply,
    wait_for,
)
from tests.llm.openai_wire import (
    DONE,
    chunk,
    text_events,
    usage,
)
from tests.llm.sse_server import SSEServer, json_reply, sse_reply

pytestmark = pytest.mark.timeout(300)


async def test_two_demos_started_in_the_same_second_get_their_own_sessions(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Generated session ids carry randomness: with the clock frozen on one second, two
    demos on one store both run (before: the second failed, its id already existed)."""
    frozen = time.localtime(1_790_000_000)
    real = time.strftime
    monkeypatch.setattr(time, "strftime", lambda fmt, t=None: real(fmt, frozen))
    store = f"sqlite:///{tmp_path / 's.db'}"
    console = Console(file=io.StringIO())
    first = await run_demo(store, console)
    second = await run_demo(store, console)
    stamp = real("%Y%m%d-%H%M%S", frozen)
    assert first.startswith(f"demo-{stamp}") and second.startswith(f"demo-{stamp}")
    assert first != second


def _events(text: str) -> list[dict[str, Any]]:
    lines = [json.loads(line) for line in text.splitlines() if line.strip()]
    return [line for line in lines if "seq" in line]


def _request_with(server: SSEServer, prompt: str) -> dict[str, Any]:
    """The one request whose last message is the user's ``prompt``."""
    (body,) = [r.json() for r in server.requests if r.json()["messages"][-1]["content"] == prompt]
    return cast(dict[str, Any], body)


async def test_output_cap_from_flag_config_file_and_model(
    tmp_path: Path, server: SSEServer
) -> None:
    """``--max-tokens N`` caps each request; else ``max_tokens`` of steerloop.toml; a model's
    ``max_output_tokens`` is sent when nothing else caps it and bounds a larger cap. Before:
    the flag and the setting were unknown (usage errors) and the model's figure was not sent."""
    env = clean_env(tmp_path, server)
    model_table = '[providers.local.models."m"]\nmax_output_tokens = 50\n'
    cases = {
        # prompt: (steerloop.toml, extra args, expected max_tokens)
        "p-flag": ("max_tokens = 300\n", ["--max-tokens", "64"], 64),
        "p-file": ("max_tokens = 300\n", [], 300),
        "p-model": (model_table, [], 50),
        "p-bounded": ("max_tokens = 300\n" + model_table, ["--max-tokens", "80"], 50),
        "p-none": ("", [], None),
    }
    server.add(*(text_reply("ok") for _ in cases))

    async def one(prompt: str, toml: str, args: list[str]) -> None:
        ws = tmp_path / prompt
        ws.mkdir()
        (ws / "steerloop.toml").write_text(toml)
        code, _out, err = await run_cli(
            "run", prompt, "--store", "memory://", *args, env=env, cwd=ws, timeout=240
        )
        assert code == 0, err

    await asyncio.gather(*(one(p, toml, args) for p, (toml, args, _) in cases.items()))
    for prompt, (_toml, _args, expected) in cases.items():
        assert _request_with(server, prompt).get("max_tokens") == expected, prompt

    # Hostile values are one-line errors.
    ws = tmp_path / "bad"
    ws.mkdir()
    code, out, err = await run_cli("run", "x", "--max-tokens", "0", env=env, cwd=ws)
    assert code == 2 and "--max-tokens must be a positive integer" in " ".join(err.split())
    (ws / "steerloop.toml").write_text('max_tokens = "many"\n')
    code, out, err = await run_cli("run", "x", env=env, cwd=ws)
    assert code == 2 and "max_tokens must be a positive integer" in " ".join(err.split())
    assert "Traceback" not in out + err


async def test_no_tools_sends_no_tool_definitions(tmp_path: Path, server: SSEServer) -> None:
    """``--no-tools`` registers no workspace tools: the request carries no ``tools`` (before:
    the option did not exist and every workspace tool was always sent)."""
    env = clean_env(tmp_path, server)
    ws = tmp_path / "ws"
    ws.mkdir()
    server.add(text_reply("a"), text_reply("b"))
    code, _out, err = await run_cli("run", "with", "--store", "memory://", env=env, cwd=ws)
    assert code == 0, err
    code, _out, err = await run_cli(
        "run", "without", "--no-tools", "--store", "memory://", env=env, cwd=ws
    )
    assert code == 0, err
    names = {t["function"]["name"] for t in _request_with(server, "with")["tools"]}
    assert {"read_file", "write_file", "shell"} <= names
    assert not _request_with(server, "without").get("tools")


async def test_retry_is_on_by_default_and_no_retry_turns_it_off(
    tmp_path: Path, server: SSEServer
) -> None:
    """A retryable failure is retried by default and stays in the log as an
    ``assistant/attempt``; ``--no-retry`` ends the turn with the error (before: no such
    option, a usage error)."""
    env = clean_env(tmp_path, server)
    ws = tmp_path / "ws"
    ws.mkdir()
    overloaded = {"error": {"message": "server busy", "type": "server_error"}}
    server.add(json_reply(503, overloaded), text_reply("second time lucky"))
    code, out, err = await run_cli("run", "hi", "--json", "--store", "memory://", env=env, cwd=ws)
    assert code == 0, err
    events = _events(out)
    types = [e["type"] for e in events]
    assert types.count("assistant/attempt") == 1
    assert types.index("assistant/attempt") < types.index("assistant/message")
    (attempt,) = [e for e in events if e["type"] == "assistant/attempt"]
    assert attempt["data"]["finish"]["reason"]["failure"]["code"] == "SERVER"
    assert len(server.requests) == 2

    server.add(json_reply(503, overloaded))
    code, out, err = await run_cli(
        "run", "hi", "--no-retry", "--store", "memory://", env=env, cwd=ws
    )
    assert code == 1, err
    assert "⚠ request failed SERVER: HTTP 503: server busy" in out
    assert "turn 1 error" in out
    assert re.search(r"session run-\d{8}-\d{6}-[0-9a-f]{6} ", out), out  # generated id
    assert len(server.requests) == 3


async def test_run_json_is_live_and_leaves_stream_records_out_unless_full(
    tmp_path: Path, server: SSEServer
) -> None:
    """``run --json`` writes each live frame as it arrives (before: nothing until the
    message settled) and an ``assistant/message`` line without its raw stream records,
    which ``--full`` keeps."""
    env = clean_env(tmp_path, server)
    ws = tmp_path / "ws"
    ws.mkdir()
    release = asyncio.Event()
    finish = [chunk({}, "stop"), usage(11, 7), DONE]
    server.add(
        sse_reply([*text_events("partial ", "answer"), *finish], gates={2: release}),
        text_reply("full ", "answer"),
    )
    proc = await asyncio.create_subprocess_exec(
        *CLI, "run", "hi", "--json", "--store", "memory://",
        env=env, cwd=ws, stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    lines: list[dict[str, Any]] = []

    async def read() -> None:
        assert proc.stdout is not None
        async for raw in proc.stdout:
            lines.append(json.loads(raw))

    reader = asyncio.create_task(read())
    try:
        # While the server holds the rest of the answer back, the first text is out already.
        await wait_for(
            lambda: any(line.get("frame", {}).get("chunk", {}).get("text") for line in lines),
            "a live text frame",
            timeout=120,
        )
        assert not release.is_set()
        assert "assistant/message" not in [line["type"] for line in lines]
        (text,) = [
            line["frame"]["chunk"]["text"]
            for line in lines
            if line["type"] == "agent/assistant-stream" and "chunk" in line["frame"]
            if line["frame"]["chunk"]["kind"] == "text-delta"
        ]
        assert text == "partial "
        release.set()
        await asyncio.wait_for(reader, 120)
        assert await asyncio.wait_for(proc.wait(), 120) == 0
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    frames = [line["frame"] for line in lines if line["type"] == "agent/assistant-stream"]
    assert frames[0]["kind"] == "start" and frames[-1]["kind"] == "end"
    (message,) = [line for line in lines if line["type"] == "assistant/message"]
    assert "stream" not in message["data"]
    assert message["data"]["stream_records"] == sum(f["kind"] == "chunk" for f in frames)
    assert frames[-1]["outcome"] == {
        "kind": "committed", "event_type": "assistant/message", "seq": message["seq"]
    }  # fmt: skip

    code, out, err = await run_cli(
        "run", "again", "--json", "--full", "--store", "memory://", env=env, cwd=ws, timeout=120
    )
    assert code == 0, err
    (message,) = [e for e in _events(out) if e["type"] == "assistant/message"]
    kinds = [record["chunk"]["kind"] for record in message["data"]["stream"]]
    assert "text-delta" in kinds and "stream_records" not in message["data"]


async def test_a_bare_store_path_is_sqlite_and_reading_commands_never_create_it(
    tmp_path: Path,
) -> None:
    """``--store x.db`` (no scheme) is an SQLite file (before: a traceback from ``demo`` and
    ``sessions``); ``sessions ls/show`` on a missing file say so and create nothing (before:
    ``ls`` created the database)."""
    env = clean_env(tmp_path)
    ws = tmp_path / "ws"
    ws.mkdir()
    missing = tmp_path / "nowhere" / "none.db"
    code, out, err = await run_cli("sessions", "ls", "--store", str(missing), env=env, cwd=ws)
    assert code == 0, err
    assert f"no session store at {missing}" in " ".join(out.split())
    code, out, err = await run_cli(
        "sessions", "show", "x", "--store", str(missing), env=env, cwd=ws
    )
    assert code == 1 and "error: no session store at" in out
    assert not missing.parent.exists()
    code, out, err = await run_cli(
        "sessions", "ls", "--store", f"sqlite:///{missing}", env=env, cwd=ws
    )
    assert code == 0 and not missing.parent.exists()

    code, out, err = await run_cli("demo", "--store", "rel.db", env=env, cwd=ws, timeout=120)
    assert code == 0, err
    assert (ws / "rel.db").is_file()
    assert "steerloop sessions ls --store rel.db" in " ".join(out.split())
    code, out, err = await run_cli("sessions", "ls", "--store", "rel.db", env=env, cwd=ws)
    assert code == 0, err
    assert "demo-" in out

    code, out, err = await run_cli("sessions", "ls", "--store", "nosuch://x", env=env, cwd=ws)
    assert code == 1 and "error: cannot open store 'nosuch://x'" in " ".join(out.split())
    assert "Traceback" not in out + err


async def test_demo_on_memory_does_not_suggest_listing_sessions(tmp_path: Path) -> None:
    """A ``memory://`` demo leaves nothing to list: no ``sessions ls`` hint (before: one)."""
    env = clean_env(tmp_path)
    code, out, err = await run_cli(
        "demo", "--store", "memory://", env=env, cwd=tmp_path, timeout=120
    )
    assert code == 0, err
    assert "lived in memory and is gone" in out
    assert "sessions ls" not in out and "sessions show" not in out


def test_version_and_help_without_type_placeholders() -> None:
    """``steerloop --version`` prints the version; no help shows ``<bool>`` (before: no
    ``--version``, and every flag was labelled ``<bool>``)."""
    result = CliRunner().invoke(app, ["--version"])
    assert result.exit_code == 0
    assert result.output.startswith("steerloop ")
    commands = [[], ["demo"], ["run"], ["chat"], ["sessions"]]
    commands += [["sessions", name] for name in ("ls", "show", "export", "replay")]
    for command in commands:
        result = CliRunner().invoke(app, [*command, "--help"])
        assert result.exit_code == 0, result.output
        assert "<bool>" not in result.output, command
    help_run = CliRunner().invoke(app, ["run", "--help"]).output
    for option in ("--max-tokens N", "--no-tools", "--no-retry", "--full"):
        assert option in help_run


async def test_sessions_replay_renders_the_log_in_order(tmp_path: Path) -> None:
    """``sessions replay`` prints what ``sessions show`` prints (sped up); an unknown session
    or a non-positive speed is an error."""
    env = clean_env(tmp_path)
    store = f"sqlite:///{tmp_path / 's.db'}"
    code, out, err = await run_cli("demo", "--store", store, env=env, cwd=tmp_path, timeout=120)
    assert code == 0, err
    (session_id,) = {w for w in out.split() if w.startswith("demo-")}
    code, shown, err = await run_cli(
        "sessions", "show", session_id, "--store", store, env=env, cwd=tmp_path
    )
    assert code == 0, err
    code, replayed, err = await run_cli(
        "sessions", "replay", session_id, "--speed", "1000", "--store", store,
        env=env, cwd=tmp_path, timeout=120,
    )  # fmt: skip
    assert code == 0, err
    assert replayed == shown
    assert "you ❯ What's the weather in Paris, Oslo and Lima?" in replayed
    assert "turn 3 completed" in replayed
    code, out, _err = await run_cli(
        "sessions", "replay", "nope", "--store", store, env=env, cwd=tmp_path
    )
    assert code == 1 and "nope" in out
    code, _out, err = await run_cli(
        "sessions", "replay", session_id, "--speed", "0", "--store", store, env=env, cwd=tmp_path
    )
    assert code == 2 and "--speed must be positive" in " ".join(err.split())


def test_the_turn_footer_counts_cached_input_and_reasoning_output() -> None:
    """The footer's totals include cached input and reasoning output, named apart (before:
    both were left out, as ``TokenUsage`` counts them apart)."""
    from steerloop.cli._render import EventRenderer
    from steerloop.llm._types import TokenUsage
    from steerloop.messages import AssistantMessage, TextBlock
    from steerloop.session._events import (
        AssistantMessageEvent,
        SessionEvent,
        TurnEnd,
        TurnEndReason,
    )

    out = io.StringIO()
    renderer = EventRenderer(Console(file=out, width=200), markdown=False)
    usage = TokenUsage(input_tokens=10, output_tokens=4, cache_read_tokens=90, reasoning_tokens=6)
    message = AssistantMessage(id="m1", content=(TextBlock(text="hi"),))
    data = AssistantMessageEvent(turn=1, step=1, message=message, usage=usage, stream=())
    renderer.render(SessionEvent(seq=3, time=0, type="assistant/message", data=data))
    end = TurnEnd(turn=1, reason=TurnEndReason(kind="completed"))
    renderer.render(SessionEvent(seq=4, time=0, type="turn/end", data=end))
    assert "turn 1 completed · tokens in 100 (90 cached) / out 10 (6 reasoning)" in out.getvalue()


_REPO = Path(__file__).resolve().parents[2]
_SHARED_SPEC = _REPO.parent / "shared" / "spec" / "CONTRACTS.md"


def test_the_pinned_contracts_md_is_the_shared_one() -> None:
    """``tests/data/CONTRACTS.md`` is the team's spec whenever that is beside the checkout."""
    pinned = (_REPO / "tests" / "data" / "CONTRACTS.md").read_text(encoding="utf-8")
    if _SHARED_SPEC.is_file():
        assert pinned == _SHARED_SPEC.read_text(encoding="utf-8"), (
            "tests/data/CONTRACTS.md is stale: copy ../shared/spec/CONTRACTS.md over it"
        )
    assert "**C7.8-4**" in pinned


async def test_contract_coverage_runs_in_a_clone(tmp_path: Path) -> None:
    """In a clone without ``../shared`` the script reads the pinned spec (before: a
    ``FileNotFoundError`` traceback); with no spec at all it says what to pass."""
    clone = tmp_path / "clone"
    (clone / "scripts").mkdir(parents=True)
    (clone / "tests" / "data").mkdir(parents=True)
    script = clone / "scripts" / "contract_coverage.py"
    script.write_text((_REPO / "scripts" / "contract_coverage.py").read_text())
    (clone / "tests" / "test_one.py").write_text('def test_x():\n    """C7.8-4"""\n')
    (clone / "tests" / "data" / "CONTRACTS.md").write_text(
        "**C7.8-4** keep.\n\n**C7.8-5** claimed.\n"
    )

    async def coverage() -> tuple[int, str]:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, str(script), cwd=clone,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
        )  # fmt: skip
        out, _ = await asyncio.wait_for(proc.communicate(), 60)
        assert proc.returncode is not None
        return proc.returncode, out.decode()

    code, out = await coverage()
    assert code == 0, out
    assert f"spec: {clone / 'tests' / 'data' / 'CONTRACTS.md'}" in out
    assert "1/2 contract ids are named by a test docstring" in out
    assert "no test names: C7.8-5" in out
    (clone / "tests" / "data" / "CONTRACTS.md").unlink()
    code, out = await coverage()
    assert code == 2 and "pass --spec PATH" in out and "Traceback" not in out


def test_store_urls_are_shown_without_their_password() -> None:
    """What ``demo`` prints about its store (and the hint to list it) hides a password."""
    from steerloop.cli._app import _without_password

    assert _without_password("postgresql://u:hunter2@db:5432/x") == "postgresql://u:***@db:5432/x"
    assert _without_password("postgresql://u@db/x") == "postgresql://u@db/x"
    assert _without_password("sqlite:////tmp/s.db") == "sqlite:////tmp/s.db"
