"""MCP tools against real servers no one here wrote, from the package registries:
mcp-server-time and mcp-server-git (PyPI, the test extra) over stdio, and
@modelcontextprotocol/server-everything (npm, scripts/install_test_servers.sh) over stdio
and streamable HTTP on 127.0.0.1."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import socket
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path
from typing import TextIO

import pytest

from steerloop import CancelCause, user_message
from steerloop.mcp import MCPServer, install_mcp
from steerloop.messages import ImageBlock, TextBlock, ToolResultMessage
from steerloop.testing import text_response, tool_call_response, tool_calls_response
from steerloop.tools import ToolHookPayload

from ..conftest import Harness, compact, events_of, settle
from .helpers import START, eventually, everything_bin

pytestmark = pytest.mark.timeout(180)


def results(h: Harness, request: int) -> dict[str, ToolResultMessage]:
    return {
        m.call_id: m
        for m in h.adapter.requests[request].messages
        if isinstance(m, ToolResultMessage)
    }


def texts(message: ToolResultMessage) -> list[str]:
    return [b.text for b in message.content if isinstance(b, TextBlock)]


def tool_on_path(name: str) -> str:
    found = shutil.which(name)
    if found is None:
        raise AssertionError(f"{name} is not installed: pip install -e '.[test]'")
    return found


async def test_time_server_over_stdio(h: Harness, errlog: TextIO) -> None:
    """mcp-server-time: its tools, read-only marks, a call, and a schema violation."""
    server = MCPServer.stdio(
        "time", command=tool_on_path("mcp-server-time"), args=["--local-timezone", "UTC"]
    )
    installed = await install_mcp(h.rt, [server], errlog=errlog)
    assert installed.tools("time") == ("time__get_current_time", "time__convert_time")
    current = h.rt.tools.get("time__get_current_time")
    assert current is not None
    assert current.parameters["required"] == ["timezone"]
    agent = await h.agent(
        tool_calls_response(
            [
                ("c1", "time__get_current_time", {"timezone": "UTC"}),
                ("c2", "time__convert_time", {"source_timezone": "UTC"}),
            ]
        ),
        text_response("done"),
    )
    agent.followup(user_message("u1"))
    await settle(agent, START)
    assert compact(agent.session, only=("result(",)) == ["result(c1)", "result(c2,INVALID_ARGS)"]
    (body,) = texts(results(h, 1)["c1"])
    assert json.loads(body)["timezone"] == "UTC"
    meta = events_of(agent.session, "tool/result")[0].data.meta
    assert meta["structured_content"]["timezone"] == "UTC"
    await installed.close()


def git(repo: Path, *args: str) -> None:
    subprocess.run(
        ["git", "-C", str(repo), *args],
        check=True,
        capture_output=True,
        timeout=30,
        env={**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com",
             "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.com"},
    )  # fmt: skip


async def test_git_server_over_stdio_against_a_repository_of_the_test(
    h: Harness, tmp_path: Path, errlog: TextIO
) -> None:
    """mcp-server-git reads the log and status of a repository this test made."""
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    (repo / "a.txt").write_text("one\n")
    git(repo, "add", "a.txt")
    git(repo, "commit", "-q", "-m", "first commit")
    (repo / "b.txt").write_text("untracked\n")
    server = MCPServer.stdio(
        "git", command=tool_on_path("mcp-server-git"), args=["--repository", str(repo)]
    )
    installed = await install_mcp(h.rt, [server], errlog=errlog)
    names = installed.tools("git")
    assert {"git__git_status", "git__git_log"} <= set(names)
    agent = await h.agent(
        tool_calls_response(
            [
                ("c1", "git__git_status", {"repo_path": str(repo)}),
                ("c2", "git__git_log", {"repo_path": str(repo)}),
            ]
        ),
        text_response("done"),
    )
    agent.followup(user_message("u1"))
    await settle(agent, START)
    assert compact(agent.session, only=("result(",)) == ["result(c1)", "result(c2)"]
    status = "\n".join(texts(results(h, 1)["c1"]))
    assert "On branch main" in status and "b.txt" in status
    assert "first commit" in "\n".join(texts(results(h, 1)["c2"]))
    await installed.close()


def everything(name: str = "ev") -> MCPServer:
    return MCPServer.stdio(name, command=everything_bin(), args=["stdio"])


async def test_everything_over_stdio_results_errors_and_capabilities(
    h: Harness, errlog: TextIO
) -> None:
    """server-everything: text, an image as an ImageBlock, structuredContent in meta, a
    schema violation refused here; no tool that needs a client capability not configured
    (sampling, roots) is offered; elicitation is always declared, so its tools are."""
    installed = await install_mcp(h.rt, [everything()], errlog=errlog)
    names = installed.tools("ev")
    assert {"ev__echo", "ev__get-sum", "ev__get-tiny-image"} <= set(names)
    assert not {"ev__get-roots-list", "ev__trigger-sampling-request"} & set(names)
    assert "ev__trigger-elicitation-request" in names
    agent = await h.agent(
        tool_calls_response(
            [
                ("c1", "ev__get-sum", {"a": 1, "b": 2}),
                ("c2", "ev__get-tiny-image", {}),
                ("c3", "ev__get-structured-content", {"location": "New York"}),
                ("c4", "ev__get-sum", {"a": "one", "b": 2}),
            ]
        ),
        text_response("done"),
    )
    agent.followup(user_message("u1"))
    await settle(agent, START)
    assert compact(agent.session, only=("result(",)) == [
        "result(c1)", "result(c2)", "result(c3)", "result(c4,INVALID_ARGS)",
    ]  # fmt: skip
    got = results(h, 1)
    assert texts(got["c1"]) == ["The sum of 1 and 2 is 3."]
    [image] = [b for b in got["c2"].content if isinstance(b, ImageBlock)]
    assert image.media_type == "image/png" and image.data is not None and image.size
    metas = {e.data.message.call_id: e.data.meta for e in events_of(agent.session, "tool/result")}
    assert set(metas["c3"]["structured_content"]) == {"temperature", "conditions", "humidity"}
    await installed.close()


async def test_everything_long_running_call_is_cancelled_by_the_turn(
    h: Harness, errlog: TextIO
) -> None:
    """A 60 s operation is cut short by the turn's cancel: ABORTED, and the connection
    stays usable for the next turn."""
    installed = await install_mcp(h.rt, [everything()], errlog=errlog)
    agent = await h.agent(
        tool_call_response(
            "c1", "ev__trigger-long-running-operation", {"duration": 60, "steps": 60}
        )
    )
    agent.followup(user_message("u1"))
    await eventually(lambda: compact(agent.session, only=("call(",)) == ["call(c1)"])
    agent.cancel(CancelCause.user())
    await settle(agent, START)
    assert compact(agent.session, only=("result(", "T-")) == [
        "result(c1,ABORTED)",
        "T-1:aborted",
    ]
    h.adapter.add(tool_call_response("c2", "ev__echo", {"message": "again"}), text_response("ok"))
    agent.followup(user_message("u2"))
    await settle(agent, START)
    assert texts(results(h, len(h.adapter.requests) - 1)["c2"]) == ["Echo: again"]
    await installed.close()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
async def http_everything(tmp_path: Path) -> AsyncIterator[str]:
    port = free_port()
    with (tmp_path / "http-server.txt").open("w") as log:
        process = subprocess.Popen(
            [everything_bin(), "streamableHttp"],
            env={**os.environ, "PORT": str(port)},
            stdout=log,
            stderr=log,
            start_new_session=True,
        )
    try:

        def accepting() -> bool:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
            except OSError:
                return False
            return True

        await eventually(accepting)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        os.killpg(process.pid, signal.SIGKILL)
        await asyncio.to_thread(process.wait, 10)


async def test_everything_over_streamable_http(h: Harness, http_everything: str) -> None:
    """The same server over streamable HTTP: listed, called, with headers sent."""
    server = MCPServer.http("web", url=http_everything, headers={"X-Test": "1"})
    installed = await install_mcp(h.rt, [server])
    assert "web__echo" in installed.tools("web")
    agent = await h.agent(
        tool_calls_response(
            [
                ("c1", "web__echo", {"message": "over http"}),
                ("c2", "web__get-sum", {"a": 2, "b": 3}),
            ]
        ),
        text_response("done"),
    )
    agent.followup(user_message("u1"))
    await settle(agent, START)
    assert compact(agent.session, only=("result(",)) == ["result(c1)", "result(c2)"]
    assert texts(results(h, 1)["c1"]) == ["Echo: over http"]
    assert texts(results(h, 1)["c2"]) == ["The sum of 2 and 3 is 5."]
    assert installed.status("web") == "connected"
    await installed.close()
    assert installed.tools("web") == ()


def start_everything_http(port: int, log: TextIO) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [everything_bin(), "streamableHttp"],
        env={**os.environ, "PORT": str(port)},
        stdout=log,
        stderr=log,
        start_new_session=True,
    )


async def test_an_http_server_that_dies_fails_the_call_and_the_next_call_reconnects(
    h: Harness, tmp_path: Path
) -> None:
    """The HTTP server is killed during a long call: TOOL_FAILED with the cause; once it
    is back on its address, the next call opens a new session and succeeds."""
    port = free_port()
    url = f"http://127.0.0.1:{port}/mcp"

    def accepting() -> bool:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
        except OSError:
            return False
        return True

    with (tmp_path / "http-server.txt").open("w") as log:
        process = start_everything_http(port, log)
        try:
            await eventually(accepting)
            installed = await install_mcp(h.rt, [MCPServer.http("web", url=url)])
            agent = await h.agent(
                tool_call_response(
                    "c1", "web__trigger-long-running-operation", {"duration": 60, "steps": 60}
                ),
                tool_call_response("c2", "web__echo", {"message": "back"}),
                text_response("done"),
            )
            restarted = asyncio.Event()

            async def hold_c2(payload: ToolHookPayload) -> None:
                # c2 waits until the server is back on its address.
                if payload.exec.call_id == "c2":
                    await asyncio.wait_for(restarted.wait(), START)

            h.rt.hooks.on("tools/pre-execute", hold_c2)
            agent.followup(user_message("u1"))
            await eventually(lambda: compact(agent.session, only=("call(",)) == ["call(c1)"])
            os.killpg(process.pid, signal.SIGKILL)
            await asyncio.to_thread(process.wait, 10)
            await eventually(lambda: len(compact(agent.session, only=("result(",))) == 1)
            process = start_everything_http(port, log)
            await eventually(accepting)
            restarted.set()
            await settle(agent, START)
        finally:
            os.killpg(process.pid, signal.SIGKILL)
            await asyncio.to_thread(process.wait, 10)
    assert compact(agent.session, only=("result(",)) == ["result(c1,TOOL_FAILED)", "result(c2)"]
    (failure,) = texts(results(h, 1)["c1"])
    assert failure.startswith("MCP server 'web' went away during the call: ")
    assert texts(results(h, 2)["c2"]) == ["Echo: back"]
    await installed.close()
