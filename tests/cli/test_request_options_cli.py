"""Request options on the command line (API.md "Request options"): ``[request]`` of
``steerloop.toml``, a provider's and a model's ``request`` tables, ``--temperature`` and
``--set KEY=VALUE`` on ``run`` and ``chat`` (``serve``: ``tests/service/test_serve_default``);
each request body carries them, the nearer setting winning."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.cli.helpers import CLI, Tmux, clean_env, run_cli, text_reply, wait_for
from tests.llm.sse_server import SSEServer

pytestmark = pytest.mark.timeout(120)

TOML = """
[request]
top_p = 0.5
temperature = 0.1
seed = 1

[providers.local.request]
parallel_tool_calls = false
seed = 2

[providers.local.models."m"]
request = { temperature = 0.9, tool_choice = "auto" }
"""


async def test_run_sends_the_files_request_options_under_the_flags(
    tmp_path: Path, server: SSEServer
) -> None:
    """Precedence: ``--set``/``--temperature`` over the model's table over the provider's over
    ``[request]``; values of ``--set`` are JSON, else strings."""
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "steerloop.toml").write_text(TOML)
    env = clean_env(tmp_path, server)
    server.add(text_reply("ok"), text_reply("ok"))
    code, _out, err = await run_cli("run", "one", "--store", "memory://", env=env, cwd=ws)
    assert code == 0, err
    args = ["--temperature", "0.25", "--set", "tool_choice=required", "--set", 'stop=["END"]']
    code, _out, err = await run_cli("run", "two", "--store", "memory://", *args, env=env, cwd=ws)
    assert code == 0, err
    first, second = (r.json() for r in server.requests)
    picked = ("temperature", "top_p", "seed", "parallel_tool_calls", "tool_choice", "stop")
    assert {k: first.get(k) for k in picked} == {
        "temperature": 0.9,
        "top_p": 0.5,
        "seed": 2,
        "parallel_tool_calls": False,
        "tool_choice": "auto",
        "stop": None,
    }
    assert {k: second.get(k) for k in picked} == {
        "temperature": 0.25,
        "top_p": 0.5,
        "seed": 2,
        "parallel_tool_calls": False,
        "tool_choice": "required",
        "stop": ["END"],
    }


@pytest.mark.parametrize(
    ("toml", "args", "message"),
    [
        ("", ["--set", "temperature"], "--set takes KEY=VALUE"),
        ("", ["--temperature", "7"], "request.temperature must be a number from 0 to 2"),
        ("", ["--set", "max_tokens=5"], "set max_tokens as an option of its own"),
        ("[request]\ntop_p = 3\n", [], "request.top_p must be a number from 0 to 1"),
        ('request = "hot"\n', [], "request must be a table"),
        (
            '[providers.local.models."m"]\nrequest = { tool_choice = "maybe" }\n',
            [],
            "providers.local.models.m.request.tool_choice must be",
        ),
    ],
)
async def test_bad_request_options_are_one_line_errors(
    tmp_path: Path, toml: str, args: list[str], message: str
) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "steerloop.toml").write_text(toml)
    env = clean_env(tmp_path, STEERLOOP_OPENAI_BASE_URL="http://127.0.0.1:9/v1")
    env["STEERLOOP_OPENAI_MODEL"] = "m"
    code, out, err = await run_cli("run", "x", "--store", "memory://", *args, env=env, cwd=ws)
    assert code == 2
    assert message in " ".join((out + err).split())
    assert "Traceback" not in out + err


async def test_chat_sends_its_flags_request_options(
    tmp_path: Path, server: SSEServer, tmux: Tmux
) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    server.add(text_reply("hello there"))
    env = clean_env(tmp_path, server)
    await tmux.start(
        [*CLI, "chat", "--store", "memory://", "--temperature", "0.4", "--set", "top_p=0.7"],
        env=env,
        cwd=ws,
    )
    await tmux.wait_screen("steerloop chat")
    await tmux.type("hi")
    await tmux.wait_screen("hello there", "turn 1 completed")
    await wait_for(lambda: server.requests, "the request")
    body = server.requests[0].json()
    assert (body["temperature"], body["top_p"]) == (0.4, 0.7)
    await tmux.send("C-d")
