"""Issue 11, command-line items: each test failed against the code before its fix."""

from __future__ import annotations

import asyncio
import io
import json
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from steerloop.cli._demo import run_demo
from tests.cli.helpers import clean_env, run_cli, text_reply
from tests.llm.sse_server import SSEServer, json_reply

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


@pytest.fixture
async def server() -> AsyncIterator[SSEServer]:
    srv = await SSEServer.start()
    try:
        yield srv
    finally:
        await srv.stop()


def _events(text: str) -> list[dict[str, Any]]:
    lines = [json.loads(line) for line in text.splitlines() if line.strip()]
    return [line for line in lines if "seq" in line]


def _request_with(server: SSEServer, prompt: str) -> dict[str, Any]:
    """The one request whose last message is the user's ``prompt``."""
    (body,) = [r.json() for r in server.requests if r.json()["messages"][-1]["content"] == prompt]
    return body


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
    types = [e["type"] for e in _events(out)]
    assert types.count("assistant/attempt") == 1
    assert types.index("assistant/attempt") < types.index("assistant/message")
    assert len(server.requests) == 2

    server.add(json_reply(503, overloaded))
    code, out, err = await run_cli(
        "run", "hi", "--json", "--no-retry", "--store", "memory://", env=env, cwd=ws
    )
    assert code == 1, err
    end = _events(out)[-1]
    assert end["type"] == "turn/end" and end["data"]["reason"]["kind"] == "error"
    assert len(server.requests) == 3
