"""MCP tools against a server written with the SDK's own server API (fault_server.py):
names, schemas, results, validation, cancellation, timeouts, deaths, list changes, close."""

from __future__ import annotations

import asyncio
import base64
import json
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, TextIO

import pytest

from steerloop import CancelCause, Runtime, define_tool, user_message
from steerloop.errors import ToolDefinitionError
from steerloop.mcp import MCPConnectionError, MCPServer, MCPTools, install_mcp
from steerloop.messages import ImageBlock, TextBlock, ToolResultMessage
from steerloop.testing import text_response, tool_call_response, tool_calls_response
from steerloop.workspace import install_approval

from ..conftest import Harness, compact, events_of, settle
from .helpers import START, alive, eventually, fault, lines

pytestmark = pytest.mark.timeout(180)


@pytest.fixture
async def installed(h: Harness, state: Path, errlog: TextIO) -> AsyncIterator[MCPTools]:
    tools = await install_mcp(h.rt, [fault(state)], errlog=errlog)
    yield tools
    await tools.close()


def results(h: Harness, request: int) -> dict[str, ToolResultMessage]:
    return {
        m.call_id: m
        for m in h.adapter.requests[request].messages
        if isinstance(m, ToolResultMessage)
    }


def text(message: ToolResultMessage) -> str:
    return "".join(b.text for b in message.content if isinstance(b, TextBlock))


def offered(h: Harness, request: int) -> list[str]:
    return [t.name for t in h.adapter.requests[request].tools]


async def test_tools_are_registered_as_server_tool_with_schema_and_concurrency(
    h: Harness, installed: MCPTools
) -> None:
    """Names in the server's order; description and input schema as the server gave them;
    readOnlyHint makes a tool concurrency-safe, its absence exclusive."""
    assert installed.tools("f") == (
        "f__echo", "f__count", "f__fail", "f__image", "f__hang", "f__die",
        "f__spawn", "f__environment", "f__grow",
    )  # fmt: skip
    echo = h.rt.tools.get("f__echo")
    count = h.rt.tools.get("f__count")
    assert echo is not None and count is not None
    assert echo.description == "Return the text."
    assert echo.parameters == {
        "type": "object",
        "properties": {"text": {"title": "Text", "type": "string"}},
        "required": ["text"],
        "title": "echoArguments",
    }
    assert echo.concurrency_safe is True
    assert count.concurrency_safe is False
    assert installed.status("f") == "connected"


async def test_results_text_json_structured_content_and_is_error(
    h: Harness, installed: MCPTools
) -> None:
    """text → TextBlock; an image → an ImageBlock of its bytes; structuredContent →
    tool/result meta; isError → TOOL_FAILED."""
    agent = await h.agent(
        tool_calls_response(
            [
                ("c1", "f__echo", {"text": "hello"}),
                ("c2", "f__count", {"n": 21}),
                ("c3", "f__image", {}),
                ("c4", "f__fail", {"reason": "no"}),
            ]
        ),
        text_response("done"),
    )
    agent.followup(user_message("u1"))
    await settle(agent, START)
    assert compact(agent.session, only=("result(",)) == [
        "result(c1)", "result(c2)", "result(c3)", "result(c4,TOOL_FAILED)",
    ]  # fmt: skip
    got = results(h, 1)
    assert text(got["c1"]) == "hello"
    assert json.loads(text(got["c2"])) == {"n": 21, "double": 42}
    assert got["c3"].content == (ImageBlock("image/png", base64.b64decode("iVBORw0KGgo=")),)
    assert got["c4"].is_error and text(got["c4"]) == "Error executing tool fail"
    metas = {e.data.message.call_id: e.data.meta for e in events_of(agent.session, "tool/result")}
    assert metas["c2"] == {"structured_content": {"n": 21, "double": 42}}
    assert metas["c3"] is None


async def test_invalid_arguments_are_refused_before_anything_is_sent(
    h: Harness, installed: MCPTools, state: Path
) -> None:
    """Arguments are checked against the server's input schema: INVALID_ARGS, no request."""
    agent = await h.agent(
        tool_calls_response([("c1", "f__hang", {"tag": 5}), ("c2", "f__hang", {})]),
        text_response("done"),
    )
    agent.followup(user_message("u1"))
    await settle(agent, START)
    assert compact(agent.session, only=("result(",)) == [
        "result(c1,INVALID_ARGS)",
        "result(c2,INVALID_ARGS)",
    ]
    assert text(results(h, 1)["c1"]) == "invalid arguments: 5 is not of type 'string'"
    assert not (state / "started").exists()


async def test_cancelling_the_turn_cancels_the_request_on_the_server(
    h: Harness, installed: MCPTools, state: Path
) -> None:
    """The turn's signal reaches the server as the SDK's cancellation: the handler there
    is interrupted, the call ends ABORTED."""
    agent = await h.agent(tool_call_response("c1", "f__hang", {"tag": "t1"}))
    agent.followup(user_message("u1"))
    await eventually(lambda: lines(state / "started") == ["t1"])
    agent.cancel(CancelCause.user())
    await settle(agent, START)
    assert compact(agent.session, only=("result(", "T-")) == [
        "result(c1,ABORTED)",
        "T-1:aborted",
    ]
    await eventually(lambda: lines(state / "cancelled") == ["t1"])


async def test_a_server_that_never_answers_is_bounded_by_the_tool_timeout(
    h: Harness, state: Path, errlog: TextIO
) -> None:
    """A call the server never answers ends TOOL_FAILED at the server's timeout, and the
    server is told to stop."""
    installed = await install_mcp(h.rt, [fault(state, timeout=1.0)], errlog=errlog)
    agent = await h.agent(tool_call_response("c1", "f__hang", {"tag": "t1"}), text_response("done"))
    agent.followup(user_message("u1"))
    await settle(agent, START)
    assert compact(agent.session, only=("result(",)) == ["result(c1,TOOL_FAILED)"]
    assert text(results(h, 1)["c1"]) == "tool 'f__hang' timed out after 1.0s"
    await eventually(lambda: lines(state / "cancelled") == ["t1"])
    await installed.close()


async def test_a_dead_server_fails_the_call_in_flight_and_the_next_call_reconnects(
    h: Harness, installed: MCPTools, state: Path
) -> None:
    """The server exits mid-call: that call ends TOOL_FAILED naming the cause and is not
    re-sent; the next call starts a new server process and succeeds."""
    agent = await h.agent(
        tool_call_response("c1", "f__die", {"tag": "d1"}),
        tool_call_response("c2", "f__echo", {"text": "back"}),
        text_response("done"),
    )
    agent.followup(user_message("u1"))
    await settle(agent, 2 * START)
    assert compact(agent.session, only=("result(",)) == ["result(c1,TOOL_FAILED)", "result(c2)"]
    assert text(results(h, 1)["c1"]) == (
        "MCP server 'f' went away during the call: Connection closed"
    )
    assert text(results(h, 2)["c2"]) == "back"
    assert lines(state / "started") == ["d1"]  # never retried
    assert len(lines(state / "pid")) == 2
    assert installed.status("f") == "connected"


async def test_a_changed_tool_list_applies_at_the_next_request_not_inside_the_group(
    h: Harness, installed: MCPTools
) -> None:
    """tools/list_changed during a tool group: the group still sees the old list (the new
    tool is UNKNOWN_TOOL there), the next request offers it and can call it."""
    agent = await h.agent(
        tool_calls_response([("c1", "f__grow", {}), ("c2", "f__added", {"x": 1})]),
        tool_call_response("c3", "f__added", {"x": 41}),
        text_response("done"),
    )
    agent.followup(user_message("u1"))
    await settle(agent, START)
    assert compact(agent.session, only=("result(",)) == [
        "result(c1)",
        "result(c2,UNKNOWN_TOOL)",
        "result(c3)",
    ]
    assert "f__added" not in offered(h, 0)
    assert offered(h, 1)[-1] == "f__added"
    assert text(results(h, 2)["c3"]) == "42"
    assert installed.tools("f")[-1] == "f__added"


async def test_close_ends_the_server_process_and_its_children(state: Path, errlog: TextIO) -> None:
    """rt.close() closes the MCP connections: the server and a child it spawned are gone,
    and the tools are unregistered."""
    rt = await Runtime.open()
    installed = await install_mcp(rt, [fault(state)], errlog=errlog)
    tool = rt.tools.get("f__spawn")
    assert tool is not None
    h = Harness(rt)
    agent = await h.agent(tool_call_response("c1", "f__spawn", {}), text_response("done"))
    agent.followup(user_message("u1"))
    await settle(agent, START)
    (child,) = map(int, lines(state / "children"))
    (server,) = map(int, lines(state / "pid"))
    assert alive(child) and alive(server)
    await rt.close()
    assert installed.tools("f") == ()
    assert rt.tools.get("f__spawn") is None
    await eventually(lambda: not alive(child) and not alive(server), 10)


async def test_the_environment_holds_only_the_allow_list_and_what_was_configured(
    h: Harness, state: Path, errlog: TextIO, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No variable of ours reaches the server unless allow-listed or configured (the tree's
    marker aside)."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-ours")
    monkeypatch.setenv("LANG", "C.UTF-8")
    installed = await install_mcp(h.rt, [fault(state, env={"GIVEN": "1"})], errlog=errlog)
    agent = await h.agent(tool_call_response("c1", "f__environment", {}), text_response("done"))
    agent.followup(user_message("u1"))
    await settle(agent, START)
    names = {b.text for b in results(h, 1)["c1"].content if isinstance(b, TextBlock)}
    assert "OPENAI_API_KEY" not in names
    assert {"GIVEN", "PATH", "LANG"} <= names
    # Python may add LC_CTYPE itself (PEP 538 locale coercion), which the list allows.
    from steerloop.mcp import ENV_ALLOW_LIST
    from steerloop.mcp._tree import MARKER

    # The marker that finds the server's process tree is the one variable steerloop adds.
    assert names <= {"GIVEN", MARKER, *ENV_ALLOW_LIST}
    await installed.close()


async def test_read_only_approval_allows_only_tools_the_server_marked_read_only(
    h: Harness, installed: MCPTools, state: Path
) -> None:
    """MCP tools go through tools/pre-execute: read-only denies the unmarked tool."""
    install_approval(h.rt, "read-only")
    agent = await h.agent(
        tool_calls_response([("c1", "f__echo", {"text": "ok"}), ("c2", "f__hang", {"tag": "w"})]),
        text_response("done"),
    )
    agent.followup(user_message("u1"))
    await settle(agent, START)
    assert compact(agent.session, only=("result(",)) == ["result(c1)", "result(c2,DENIED)"]
    assert not (state / "started").exists()


async def test_a_tool_name_clash_is_an_error_at_install_and_nothing_stays_open(
    h: Harness, state: Path, errlog: TextIO
) -> None:
    """A tool of the server whose steerloop name is taken: install fails, names the
    clash, registers nothing and closes the server."""

    def mine(args: Any, exec: Any) -> str:
        return "mine"

    h.rt.tools.register(define_tool(name="f__echo", description="", parameters={}, execute=mine))
    with pytest.raises(ToolDefinitionError, match="'f__echo' is already registered"):
        await install_mcp(h.rt, [fault(state)], errlog=errlog)
    assert [t.name for t in h.rt.tools.list()] == ["f__echo"]
    (server,) = map(int, lines(state / "pid"))
    await eventually(lambda: not alive(server), 10)


async def test_a_server_tool_name_outside_the_alphabet_is_an_error_at_install(
    h: Harness, state: Path, errlog: TextIO
) -> None:
    server = fault(state, env={"FAULT_BAD_NAME": "dotted.name"})
    bad = r"'dotted\.name' gives the name 'f__dotted\.name'"
    with pytest.raises(ToolDefinitionError, match=bad):
        await install_mcp(h.rt, [server], errlog=errlog)
    assert h.rt.tools.list() == ()


async def test_two_servers_of_one_name_and_bad_configurations_are_refused(rt: Runtime) -> None:
    one = MCPServer.stdio("s", command="true")
    with pytest.raises(ValueError, match="unique"):
        await install_mcp(rt, [one, one])
    with pytest.raises(ValueError, match="server name"):
        MCPServer.stdio("a b", command="x")
    with pytest.raises(ValueError, match="url"):
        MCPServer.http("a", url="file:///etc/passwd")
    with pytest.raises(ValueError, match="env"):
        MCPServer.stdio("a", command="x", env={"A": 1})  # type: ignore[dict-item]
    with pytest.raises(ValueError, match="timeout"):
        MCPServer.stdio("a", command="x", timeout=0)
    secret = MCPServer.http("a", url="http://127.0.0.1:1/mcp", headers={"Authorization": "k"})
    assert "Authorization" not in repr(secret)


async def test_a_server_that_cannot_start_is_a_clear_error(rt: Runtime, tmp_path: Path) -> None:
    """The cause, named with the server; nothing registered."""
    missing = MCPServer.stdio("gone", command=str(tmp_path / "no-such-server"))
    with pytest.raises(MCPConnectionError, match=r"MCP server 'gone' could not connect: .*No such"):
        await install_mcp(rt, [missing])
    assert rt.tools.list() == ()
    refused = MCPServer.http("down", url="http://127.0.0.1:9/mcp", timeout=5)
    with pytest.raises(
        MCPConnectionError,
        match=r"MCP server 'down' could not connect: "
        r"All connection attempts failed \(ConnectError\)",
    ):
        await install_mcp(rt, [refused])
    assert rt.tools.list() == ()


async def test_a_call_cancelled_while_the_server_starts_stops_the_start(
    rt: Runtime, tmp_path: Path, errlog: TextIO
) -> None:
    """A server that never completes its handshake: the caller's signal ends the wait
    (bounded by the SDK's shutdown, not the 30 s connect bound), and the half-started
    process is ended."""
    from steerloop import AbortController
    from steerloop.errors import AbortedError
    from steerloop.mcp._connection import Connection

    pid_file = tmp_path / "pid"
    mute = MCPServer.stdio(
        "mute",
        command=sys.executable,
        args=["-c", f"import os, time; open({str(pid_file)!r}, 'w').write(str(os.getpid()))"
              "; time.sleep(600)"],
    )  # fmt: skip
    connection = Connection(mute, lambda: None, errlog)
    controller = AbortController()
    pending = asyncio.ensure_future(connection.list_tools(controller.signal))
    await eventually(lambda: pid_file.exists() and pid_file.read_text())
    controller.abort("stop")
    with pytest.raises(AbortedError):
        await asyncio.wait_for(pending, 20)
    pid = int(pid_file.read_text())
    await eventually(lambda: not alive(pid), 20)
    await connection.close()
