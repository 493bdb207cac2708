"""Task-augmented tools (``execution.taskSupport``) are called as tasks: the handle is logged
(``mcp/task-created``) before the call waits for the result; a cancelled call cancels its
task; a server's request during a task is attributed to the call by the task it names."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import TextIO

import pytest

from steerloop import CancelCause, user_message
from steerloop.mcp import MCPServer, MCPTools, install_mcp
from steerloop.session.events import MCPTaskCreated
from steerloop.testing import text_response, tool_call_response

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
