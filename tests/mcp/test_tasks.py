"""Task-augmented tools (``execution.taskSupport``) are called as tasks: the handle is logged
(``mcp/task-created``) before the call waits for the result; a cancelled call cancels its
task; a server's request during a task is attributed to the call by the task it names."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import TextIO

import pytest

from steerloop import AbortController, AgentOptions, CancelCause, Runtime, user_message
from steerloop.mcp import MCPServer, MCPTools, install_mcp
from steerloop.messages import TextBlock, ToolCallBlock
from steerloop.session.events import MCPTaskCreated
from steerloop.testing import text_response, tool_call_response
from steerloop.tools import ToolExec

from ..conftest import Harness, compact, events_of, settle
from .helpers import START, eventually, everything_bin, hostile, lines, result_texts

pytestmark = pytest.mark.timeout(180)


@pytest.fixture
async def installed(h: Harness, state: Path, errlog: TextIO) -> AsyncIterator[MCPTools]:
    tools = await install_mcp(h.rt, [hostile(state)], errlog=errlog)
    yield tools
    await tools.close()


async def test_a_task_tool_logs_its_handle_before_it_waits(
    h: Harness, installed: MCPTools, state: Path
) -> None:
    """The required-task tool runs as a task: mcp/task-created (call, server, task, ttl) is
    in the log while the call waits; the result is the task's."""
    agent = await h.agent(
        tool_call_response("c1", "x__job", {"text": "report"}), text_response("ok")
    )
    agent.followup(user_message("go"))
    (created,) = await eventually(lambda: events_of(agent.session, "mcp/task-created"))
    (task_id,) = lines(state / "tasks")
    assert created.ignorable
    assert created.data == MCPTaskCreated(
        call_id="c1", server="x", task_id=task_id, ttl_ms=24 * 3600 * 1000, poll_ms=50
    )
    assert agent.status == "running" and events_of(agent.session, "tool/result") == []
    (state / f"release-{task_id}").touch()
    await settle(agent, START)
    assert result_texts(agent, "c1")[0].startswith("job done: report")
    kinds = [e.type for e in agent.session.events if e.type.startswith(("tool/", "mcp/"))]
    assert kinds == ["tool/call", "mcp/task-created", "tool/result"]


async def test_cancelling_the_call_cancels_its_task(
    h: Harness, installed: MCPTools, state: Path
) -> None:
    """The turn is cancelled while the task runs: the server gets tasks/cancel; ABORTED."""
    agent = await h.agent(tool_call_response("c1", "x__job", {"text": "report"}))
    agent.followup(user_message("go"))
    await eventually(lambda: events_of(agent.session, "mcp/task-created"))
    (task_id,) = lines(state / "tasks")
    agent.cancel(CancelCause.user())
    await settle(agent, START)
    assert compact(agent.session, only=("result(", "T-")) == ["result(c1,ABORTED)", "T-1:aborted"]
    assert await eventually(lambda: lines(state / "cancelled")) == [task_id]


async def test_everything_research_task_asks_for_input_through_its_task(
    h: Harness, errlog: TextIO
) -> None:
    """server-everything's simulate-research-query (taskSupport required, 2025-11-25 tasks):
    its clarification request names the task, so it is the call's input request; the answer
    reaches the task and its report."""
    server = MCPServer.stdio("ev", command=everything_bin(), args=["stdio"])
    installed = await install_mcp(h.rt, [server], errlog=errlog)
    assert "ev__simulate-research-query" in installed.tools("ev")
    agent = await h.agent(
        tool_call_response(
            "c1", "ev__simulate-research-query", {"topic": "python", "ambiguous": True}
        ),
        text_response("ok"),
    )
    agent.followup(user_message("go"))
    (request,) = await eventually(lambda: agent.pending_inputs)
    assert request.call_id == "c1" and "python" in request.message
    (created,) = events_of(agent.session, "mcp/task-created")
    assert created.data.call_id == "c1"
    agent.answer_input(request.id, "accept", {"interpretation": "programming"})
    await settle(agent, START)
    assert compact(agent.session, only=("result(",)) == ["result(c1)"]
    report = "\n".join(result_texts(agent, "c1"))
    assert "Research Report: python (programming)" in report
    await installed.close()


CHILD = Path(__file__).with_name("_task_crash_child.py")
LINE_TIMEOUT = 60.0


async def crash_while_the_task_runs(db: Path, state: Path) -> str:
    """Run the child until its task's handle is durable, SIGKILL it; the task's id."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = await asyncio.create_subprocess_exec(
        sys.executable, str(CHILD), str(db), str(state),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=env,
    )  # fmt: skip
    try:
        assert proc.stdout is not None and proc.stderr is not None
        line = await asyncio.wait_for(proc.stdout.readline(), LINE_TIMEOUT)
        if not line.startswith(b"task "):
            proc.kill()
            raise AssertionError(line + await proc.stderr.read())
        proc.send_signal(signal.SIGKILL)
        await asyncio.wait_for(proc.wait(), LINE_TIMEOUT)
        return line.split()[1].decode()
    finally:
        if proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await proc.wait()


async def test_after_a_crash_recovery_gets_the_tasks_result_from_its_logged_handle(
    tmp_path: Path, state: Path, errlog: TextIO
) -> None:
    """The process dies while its call waits on a task; the task goes on and ends. A new
    process resumes the session: instead of TOOL_OUTCOME_UNKNOWN, the call's tool/result is
    the task's real result (reconciled), fetched with the logged handle from a new server
    process; a call without a handle is not the MCP tool's to answer."""
    db = tmp_path / "s.db"
    task_id = await crash_while_the_task_runs(db, state)
    (state / f"release-{task_id}").touch()
    rt = await Runtime.open(store=f"sqlite:///{db}")
    try:
        Harness(rt)
        installed = await install_mcp(rt, [hostile(state)], errlog=errlog)
        handle = await rt.agents.resume(
            resume_session_id="s", agent_options=AgentOptions(provider="mock", model="m")
        )
        agent = handle.agent
        (created,) = events_of(agent.session, "mcp/task-created")
        assert created.data.task_id == task_id and created.data.call_id == "c1"
        (result,) = events_of(agent.session, "tool/result")
        assert result.data.reconciled and result.data.error is None
        text = [b.text for b in result.data.message.content if isinstance(b, TextBlock)]
        assert text[0].startswith("job done: report")
        # The server that answered is not the one that started the task.
        assert f"(server {task_id.split('-')[1]})" not in text[0]
        assert compact(agent.session, only=("call(", "result(", "T-")) == [
            "call(c1)",
            "result(c1)",
            "T-1:interrupted",
        ]
        exec = ToolExec(
            call_id="c9",
            name="x__job",
            arguments={"text": "other"},
            raw_arguments='{"text": "other"}',
            signal=AbortController().signal,
            agent=agent,
        )
        unknown = ToolCallBlock(id="c9", name="x__job", arguments="{}")
        assert await installed._servers["x"].reconcile(unknown, exec) is None
    finally:
        await rt.close()
