"""``steerloop serve`` without ``--profiles`` (API.md "Service"; issue 28): its ``default``
profile is the agent ``steerloop chat`` builds, by the same recipe, so every key of
``steerloop.toml`` reaches a served agent's requests; with no model it answers 503
``NO_MODEL`` saying what to configure, instead of queuing; ``--model P/M`` picks one.

The served process talks to a loopback OpenAI-compatible server that records each request.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

from steerloop import AgentOptions, Runtime
from steerloop.cli._serve import default_profiles
from steerloop.cli._settings import load_settings
from steerloop.service import Profile, create_app
from steerloop.testing import ScriptedAdapter, text_response
from tests.cli.helpers import text_reply
from tests.llm import openai_wire as wire
from tests.llm.sse_server import SSEServer, sse_reply
from tests.mcp.helpers import FAULT_SERVER

from .pgworkers import SERVE, env_for
from .served import WAIT, served, wait_for_log
from .test_serve_cli import serve

pytestmark = pytest.mark.timeout(120)

_PROVIDER_VARS = ("DEEPSEEK_API_KEY", "OPENAI_API_KEY", "ANTHROPIC_API_KEY", "OPENAI_BASE_URL")
PERSONA = "You are Testy, the persona of this steerloop.toml."


def no_keys() -> dict[str, str]:
    """Provider variables emptied: the served process sees only what the test configures."""
    return dict.fromkeys(_PROVIDER_VARS, "")


def config(server: SSEServer, state: Path, *, model: bool = True) -> str:
    """A steerloop.toml setting every key (``state``: the MCP fault server's notes)."""
    state.mkdir(exist_ok=True)
    return f"""
{'model = "loop/m1"' if model else ""}
store = "served.db"
persona = "{PERSONA}"
max_tokens = 321
max_parallel_tool_calls = 1
approve = "read-only"

[request]
temperature = 0.3

[providers.loop]
kind = "openai"
base_url = "{server.url}/v1"
api_key_env = "LOOP_KEY"
[providers.loop.request]
seed = 5
[providers.loop.models."m1"]
context_window = 8000
request = {{ top_p = 0.6 }}

[mcp.servers.f]
command = {json.dumps(sys.executable)}
args = [{json.dumps(str(FAULT_SERVER))}, {json.dumps(str(state))}]
"""


def write_call(call_id: str) -> Any:
    args = json.dumps({"path": "out.txt", "content": "hi"})
    return sse_reply(
        [
            wire.tool_delta(0, id=call_id, name="write_file", arguments=args),
            wire.chunk({}, "tool_calls"),
            wire.usage(20, 9),
            wire.DONE,
        ]
    )


async def test_every_steerloop_toml_key_reaches_a_served_agents_request(
    tmp_path: Path, server: SSEServer
) -> None:
    """model, max_tokens, persona, [request] and the provider's and model's request tables
    are in each request; the MCP server's tools and the workspace tools are offered; approve
    = "read-only" denies the write; the session lives in the file ``store`` names."""
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "steerloop.toml").write_text(config(server, tmp_path / "state"))
    server.add(write_call("c1"), text_reply("done"))
    env = {**no_keys(), "LOOP_KEY": "k-1"}
    with serve(ws, **env) as url:
        async with httpx.AsyncClient(base_url=url, timeout=WAIT) as client:
            created = await client.post("/v1/sessions", json={"session_id": "s", "input": "go"})
            assert created.status_code == 201, created.text
            await wait_for_log(client, "s", lambda ev: [e for e in ev if e["type"] == "turn/end"])
    first, second = (r.json() for r in server.requests)
    for body in (first, second):
        assert body["model"] == "m1"
        assert body["max_tokens"] == 321
        assert body["messages"][0]["role"] == "system"
        assert body["messages"][0]["content"].startswith(PERSONA)
        assert (body["temperature"], body["seed"], body["top_p"]) == (0.3, 5, 0.6)
        names = {t["function"]["name"] for t in body["tools"]}
        assert {"f__echo", "write_file", "read_file"} <= names
    assert server.requests[0].headers["authorization"] == "Bearer k-1"
    denied = second["messages"][-1]
    assert denied["role"] == "tool" and "read-only" in denied["content"]
    assert not (ws / "out.txt").exists()
    assert (ws / "served.db").is_file()


async def test_the_profile_runtime_has_the_persona_and_tool_pool_of_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What is not in a request: the runtime the profile callable equips."""
    server = await SSEServer.start()
    try:
        (tmp_path / "steerloop.toml").write_text(config(server, tmp_path / "state"))
        monkeypatch.chdir(tmp_path)
        monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg-state"))
        monkeypatch.setenv("LOOP_KEY", "k-1")
        settings = load_settings(tmp_path)
        async with await Runtime.open() as rt:
            (profile,) = await default_profiles(settings)(rt)
            assert rt.max_parallel_tool_calls == 1
            assert rt.system_prompt.persona == PERSONA
            assert profile.options == AgentOptions(
                provider="loop",
                model="m1",
                max_tokens=321,
                call={"temperature": 0.3, "seed": 5, "top_p": 0.6},
            )
    finally:
        await server.stop()


async def test_serve_model_flag_picks_the_default_profiles_model(
    tmp_path: Path, server: SSEServer
) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "steerloop.toml").write_text(config(server, tmp_path / "state", model=False))
    server.add(text_reply("hello"))
    env = {**no_keys(), "LOOP_KEY": "k-1"}
    with serve(ws, "--model", "loop/m2", "--set", "seed=9", **env) as url:
        async with httpx.AsyncClient(base_url=url, timeout=WAIT) as client:
            created = await client.post("/v1/sessions", json={"session_id": "s", "input": "hi"})
            assert created.status_code == 201, created.text
            await wait_for_log(client, "s", lambda ev: [e for e in ev if e["type"] == "turn/end"])
    (body,) = (r.json() for r in server.requests)
    assert body["model"] == "m2"
    assert body["seed"] == 9  # --set over the provider's table
    assert "top_p" not in body  # m1's table is m1's


def test_serve_model_flag_naming_a_provider_without_key_is_refused(tmp_path: Path) -> None:
    proc = subprocess.run(
        [*SERVE, "--port", "0", "--model", "deepseek/deepseek-chat"],
        cwd=tmp_path,
        env=env_for(tmp_path, **no_keys()),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    said = " ".join(proc.stdout.split())
    assert "provider 'deepseek' has no API key: set DEEPSEEK_API_KEY" in said
    assert "Traceback" not in proc.stdout + proc.stderr


async def test_no_model_is_503_no_model_saying_what_to_configure(tmp_path: Path) -> None:
    """No provider, no --model: the server starts, its log says why sessions are refused (no
    traceback), and creating a session answers 503 NO_MODEL naming the three ways."""
    home = tmp_path / "home"
    with serve(home, **no_keys()) as url:
        async with httpx.AsyncClient(base_url=url, timeout=WAIT) as client:
            answer = await client.post("/v1/sessions", json={"input": "hi"})
            assert answer.status_code == 503
            error = answer.json()["error"]
            assert error["code"] == "NO_MODEL"
            for way in ("DEEPSEEK_API_KEY", "steerloop.toml", "steerloop serve --model"):
                assert way in error["message"]
            assert (await client.get("/v1/sessions")).json() == {"sessions": []}


async def test_a_message_to_a_session_whose_profile_has_no_model_is_refused_not_queued(
    tmp_path: Path,
) -> None:
    """A session made while a model was configured; served again without one: its message
    is 503 NO_MODEL and nothing is written (before: 202, queued forever, status idle)."""
    url = f"sqlite:///{tmp_path / 's.db'}"

    def with_model(rt: Runtime) -> list[Profile]:
        rt.llm.register_adapter(["mock"], ScriptedAdapter([text_response("one")]))
        return [Profile(name="default", options=AgentOptions(provider="mock", model="m"))]

    async with served(create_app(url, with_model)) as client:
        assert (
            await client.post("/v1/sessions", json={"session_id": "s", "input": "a"})
        ).is_success
        before = await wait_for_log(client, "s", lambda ev: ev and ev[-1]["type"] == "turn/end")
    no_model = [Profile(name="default", options=AgentOptions())]
    async with served(create_app(url, no_model)) as client:
        answer = await client.post(
            "/v1/sessions/s/messages", json={"mode": "followup", "content": "b"}
        )
        assert answer.status_code == 503
        assert answer.json()["error"]["code"] == "NO_MODEL"
        after = (await client.get("/v1/sessions/s/log")).json()["events"]
        assert after == before
        cancel = await client.post("/v1/sessions/s/cancel", json={})
        assert cancel.status_code == 202  # what needs no model still works
