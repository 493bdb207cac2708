"""MCP servers in ``steerloop chat`` (tmux): a server's question answered in the terminal
(``input/answered`` by ``terminal``), ``/server:prompt`` expanded into the message sent,
``@server:uri`` attaching a resource; and the ``sampling``/``limits`` keys of
``[mcp.servers.NAME]``."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from steerloop.cli._mcp_table import build_server
from steerloop.cli._settings import load_settings
from steerloop.session._events import SessionEvent
from steerloop.session.store import open_store
from tests.cli.helpers import CLI, Tmux, clean_env, request_text, run_cli, text_reply
from tests.llm.openai_wire import tool_call_events
from tests.llm.sse_server import SSEServer, sse_reply
from tests.mcp.helpers import HOSTILE_SERVER

pytestmark = pytest.mark.timeout(180)


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    path = tmp_path / "ws"
    path.mkdir()
    state = tmp_path / "state"
    state.mkdir()
    (path / "steerloop.toml").write_text(
        f"""
approve = "auto"

[mcp.servers.x]
command = {json.dumps(sys.executable)}
args = [{json.dumps(str(HOSTILE_SERVER))}, {json.dumps(str(state))}]
sampling = "ask"

[mcp.servers.x.limits]
max_blocks = 16
"""
    )
    return path


def test_the_config_reads_sampling_and_limits(tmp_path: Path, workspace: Path) -> None:
    settings = load_settings(workspace)
    server = build_server("x", settings.mcp_servers["x"])
    assert server.sampling == "ask" and server.limits.max_blocks == 16
    config = workspace / "steerloop.toml"
    for text, message in {
        '[mcp.servers.a]\ncommand = "x"\nsampling = "maybe"\n': "sampling must be",
        '[mcp.servers.a]\ncommand = "x"\nlimits = { max_tools = 0 }\n': "positive integer",
        '[mcp.servers.a]\ncommand = "x"\nlimits = { max_things = 1 }\n': "max_things",
    }.items():
        config.write_text(text)
        with pytest.raises(ValueError, match=message):
            load_settings(workspace)


async def test_chat_answers_a_servers_question_and_sends_prompts_and_resources(
    tmp_path: Path, server: SSEServer, tmux: Tmux, workspace: Path
) -> None:
    store = f"sqlite:///{tmp_path / 's.db'}"
    env = clean_env(tmp_path, server)
    server.add(
        sse_reply(tool_call_events("a1", "x__ask", {"text": "Your name, please"})),
        text_reply("Thanks, Ada."),
        text_reply("Greeted."),
        text_reply("Read it."),
    )
    await tmux.start([*CLI, "chat", "--session", "M1", "--store", store], env=env, cwd=workspace)
    await tmux.wait_screen("session M1 (new)")

    # The server asks during the call: the question, its fields, a form answer.
    await tmux.type("who am I?")
    await tmux.wait_screen(
        "MCP server 'x' asks: Your name, please", "name (string, required)", "answer ❯"
    )
    await tmux.type("age=old")
    await tmux.wait_screen("error: invalid literal for int()")
    await tmux.type("name=Ada age=36")
    await tmux.wait_screen("Thanks, Ada.", "turn 1 completed")
    result = [m for m in server.requests[1].json()["messages"] if m["role"] == "tool"]
    assert json.loads(result[0]["content"]) == {
        "action": "accept",
        "content": {"age": 36, "name": "Ada"},
    }

    # /x:greet expands the server's prompt into the message the model gets.
    await tmux.type("/x:greet Grace tone=warm")
    await tmux.wait_screen("Greeted.", "turn 2 completed")
    assert "Greet Grace (warm)." in request_text(server, 2)

    # @x:uri attaches the resource to the typed message.
    await tmux.type("summarise @x:hostile://doc please")
    await tmux.wait_screen("Read it.", "turn 3 completed")
    sent = request_text(server, 3)
    assert "summarise @x:hostile://doc please" in sent and "the doc" in sent
    await tmux.type("/quit")
    await tmux.wait_screen("bye")

    events = await _stored(tmp_path / "s.db", "M1")
    answered = [e.data for e in events if e.type == "input/answered"]
    assert [(a.action, a.by) for a in answered] == [("accept", "terminal")]
    users = [e.data for e in events if e.type == "user/message"]
    assert users[1].source.extra == {
        "mcp_prompt": {
            "server": "x",
            "name": "greet",
            "arguments": {"name": "Grace", "tone": "warm"},
        }
    }
    assert users[2].source.extra == {"mcp_resources": [{"server": "x", "uri": "hostile://doc"}]}


async def _stored(path: Path, session_id: str) -> tuple[SessionEvent, ...]:
    store = open_store(f"sqlite:///{path}")
    try:
        return tuple(await store.load(session_id))
    finally:
        await store.close()


async def test_run_without_a_terminal_answers_a_question_cancel(
    tmp_path: Path, server: SSEServer, workspace: Path
) -> None:
    """``steerloop run`` with no terminal on stdin: nobody can answer, so the request is
    answered cancel at once (the call does not hang) and stderr says so."""
    server.add(
        sse_reply(tool_call_events("a1", "x__ask", {"text": "Your name, please"})),
        text_reply("No name given."),
    )
    code, _out, err = await run_cli(
        "run", "who am I?", "--store", f"sqlite:///{tmp_path / 's.db'}",
        env=clean_env(tmp_path, server), cwd=workspace, timeout=150,
    )  # fmt: skip
    assert code == 0, err
    assert "MCP server 'x' asks: Your name, please" in err
    assert "(no terminal: answered cancel)" in err
    result = [m for m in server.requests[1].json()["messages"] if m["role"] == "tool"]
    assert json.loads(result[0]["content"]) == {"action": "cancel"}
