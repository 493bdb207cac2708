"""MCP servers on the command line: [mcp.servers.NAME] in steerloop.toml, ``run`` with
their tools, a server that fails to start (a warning), and ``steerloop mcp ls``."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from steerloop.cli._mcp_table import build_server
from steerloop.cli._settings import load_settings
from steerloop.mcp import MCPOAuth
from tests.cli.helpers import (
    clean_env,
    run_cli,
    text_reply,
)
from tests.llm.openai_wire import (
    tool_call_events,
)
from tests.llm.sse_server import SSEServer, sse_reply
from tests.mcp.helpers import FAULT_SERVER, alive

pytestmark = pytest.mark.timeout(180)


def write_config(workspace: Path, state: Path, extra: str = "") -> None:
    (workspace / "steerloop.toml").write_text(
        f"""
approve = "auto"

[mcp.servers.f]
command = {json.dumps(sys.executable)}
args = [{json.dumps(str(FAULT_SERVER))}, {json.dumps(str(state))}]
env = {{ GIVEN = "1" }}
timeout = 60
{extra}
"""
    )


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    path = tmp_path / "ws"
    path.mkdir()
    (tmp_path / "state").mkdir()
    return path


def test_the_loader_reads_mcp_servers_and_refuses_bad_ones(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "none"))
    config = tmp_path / "steerloop.toml"
    config.write_text(
        '[mcp.servers.time]\ncommand = "mcp-server-time"\nargs = ["--local-timezone", "UTC"]\n'
        '[mcp.servers.docs]\nurl = "http://127.0.0.1:8931/mcp"\n'
        'headers = { Authorization = "Bearer x" }\n'
        '[mcp.servers.wiki]\nurl = "https://wiki.example.com/mcp"\noauth = true\n'
        '[mcp.servers.crm]\nurl = "https://crm.example.com/mcp"\n'
        '[mcp.servers.crm.oauth]\nclient_id = "steerloop"\nscope = "read"\n'
    )
    settings = load_settings(tmp_path)
    assert settings.mcp_servers == {
        "time": {"command": "mcp-server-time", "args": ["--local-timezone", "UTC"]},
        "docs": {"url": "http://127.0.0.1:8931/mcp", "headers": {"Authorization": "Bearer x"}},
        "wiki": {"url": "https://wiki.example.com/mcp", "oauth": True},
        "crm": {
            "url": "https://crm.example.com/mcp",
            "oauth": {"client_id": "steerloop", "scope": "read"},
        },
    }
    crm = build_server("crm", settings.mcp_servers["crm"])
    assert crm.oauth is not None and crm.oauth.authorize is None
    assert (crm.oauth.client_id, crm.oauth.scope) == ("steerloop", "read")
    assert build_server("wiki", settings.mcp_servers["wiki"]).oauth == MCPOAuth()
    bad = {
        '[mcp.servers.a]\ncommand = "x"\nurl = "http://h/mcp"\n': "exactly one of command",
        '[mcp.servers.a]\nargs = ["x"]\n': "exactly one of command",
        '[mcp.servers.a]\ncommand = "x"\nheaders = {}\n': "unknown key",
        '[mcp.servers.a]\ncommand = "x"\nargs = "one string"\n': "args must be a list",
        '[mcp.servers.a]\ncommand = "x"\nenv = { A = 1 }\n': "env must map strings",
        '[mcp.servers."a b"]\ncommand = "x"\n': "server name",
        '[mcp.servers.a]\nurl = "ftp://h"\n': "url must be",
        '[mcp.servers.a]\ncommand = "x"\noauth = true\n': "unknown key",
        '[mcp.servers.a]\nurl = "http://h/mcp"\noauth = "yes"\n': "oauth must be true",
        '[mcp.servers.a]\nurl = "http://h/mcp"\noauth = { token = "t" }\n': "unknown key.*token",
        '[mcp.servers.a]\nurl = "http://h/mcp"\noauth = { redirect_uri = "https://a/cb" }\n':
            "without authorize",
        '[mcp.servers.a]\nurl = "http://h/mcp"\nheaders = { Authorization = "x" }\n'
        'oauth = true\n': "Authorization header and oauth",
        '[mcp]\nother = 1\n': r"only \[mcp.servers.NAME\]",
    }  # fmt: skip
    for text, message in bad.items():
        config.write_text(text)
        with pytest.raises(ValueError, match=message):
            load_settings(tmp_path)


async def test_run_offers_and_calls_a_configured_mcp_tool(
    tmp_path: Path, server: SSEServer, workspace: Path
) -> None:
    """``run`` starts the configured server; the model sees ``f__echo`` and its result.
    A second server that cannot start is a warning on stderr, not a failure."""
    missing = tmp_path / "no-such-server"
    write_config(workspace, tmp_path / "state", f"[mcp.servers.broken]\ncommand = '{missing}'\n")
    server.add(
        sse_reply(tool_call_events("r1", "f__echo", {"text": "from mcp"})),
        text_reply("echoed"),
    )
    env = clean_env(tmp_path, server)
    code, _out, err = await run_cli(
        "run", "echo something", "--json", "--store", f"sqlite:///{tmp_path / 's.db'}",
        env=env, cwd=workspace, timeout=150,
    )  # fmt: skip
    assert code == 0, err
    assert "warning: MCP server 'broken' not started: MCP server 'broken' could not connect" in (
        " ".join(err.split())
    )
    offered = [t["function"]["name"] for t in server.requests[0].json()["tools"]]
    assert "f__echo" in offered and "f__grow" in offered
    assert server.requests[1].json()["messages"][-1] == {
        "role": "tool",
        "tool_call_id": "r1",
        "content": "from mcp",
    }
    # The server does not outlive the command.
    (pid,) = map(int, (tmp_path / "state" / "pid").read_text().split())
    assert not alive(pid)


async def test_mcp_ls_lists_servers_status_and_tools(tmp_path: Path, workspace: Path) -> None:
    write_config(workspace, tmp_path / "state", "[mcp.servers.broken]\ncommand = 'no-such-bin'\n")
    code, out, err = await run_cli(
        "mcp", "ls", env=clean_env(tmp_path, COLUMNS="200"), cwd=workspace, timeout=150
    )
    assert code == 0, err
    lines = [" ".join(line.replace("│", " ").split()) for line in out.splitlines()]
    assert "f stdio connected f__echo" in lines
    assert any(
        line.startswith("broken stdio failed: MCP server 'broken' could not") for line in lines
    )
    assert "f__grow" in out


async def test_serve_default_profile_installs_the_configured_mcp_servers(
    tmp_path: Path, workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``serve`` without ``--profiles`` builds what ``chat`` builds, MCP servers included: the
    configured server's tools are registered on the process's runtime, a server that cannot
    start is a warning, and ``rt.close()`` ends the server."""
    from steerloop import Runtime
    from steerloop.cli._serve import default_profiles

    missing = tmp_path / "no-such-server"
    (workspace / "steerloop.toml").write_text(
        f"""
model = "local/m"

[providers.local]
kind = "openai"
base_url = "http://127.0.0.1:9/v1"

[mcp.servers.f]
command = {json.dumps(sys.executable)}
args = [{json.dumps(str(FAULT_SERVER))}, {json.dumps(str(tmp_path / "state"))}]

[mcp.servers.broken]
command = {json.dumps(str(missing))}
"""
    )
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg-state"))
    monkeypatch.chdir(workspace)
    settings = load_settings(workspace)
    warnings: list[str] = []
    monkeypatch.setattr("steerloop.cli._serve.log.warning", warnings.append)
    rt = await Runtime.open()
    try:
        profiles = await default_profiles(settings)(rt)
        assert [p.name for p in profiles] == ["default"]
        names = {t.name for t in rt.tools.list()}
        assert {"f__echo", "f__count", "read_file"} <= names
        assert [w for w in warnings if "'broken' not started" in w], warnings
    finally:
        await rt.close(timeout=30)
    assert {t.name for t in rt.tools.list()}.isdisjoint({"f__echo", "f__count"})
