"""The approval policy on tools/pre-execute: auto, read-only and ask."""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path
from typing import Any

import pytest

from steerloop import CancelCause, ToolDecision, define_tool, user_message
from steerloop.messages import ToolResultMessage
from steerloop.testing import text_response, tool_call_response, tool_calls_response
from steerloop.tools import Tool, ToolExec
from steerloop.workspace import install_approval, workspace_tools

from ..conftest import Harness, compact, label, settle
from ..support import events_of

CALLS_AND_RESULTS = ("call(", "result(")


def register(h: Harness, root: Path, *extra: Tool) -> dict[str, Tool]:
    tools = {tool.name: tool for tool in [*workspace_tools(root), *extra]}
    for tool in tools.values():
        h.rt.tools.register(tool)
    return tools


def tool_message(h: Harness, request: int, call_id: str) -> ToolResultMessage:
    for message in h.adapter.requests[request].messages:
        if isinstance(message, ToolResultMessage) and message.call_id == call_id:
            return message
    raise AssertionError(f"no tool message for {call_id} in request {request}")


def meeting_reads(tool: Tool, parties: int) -> Tool:
    """``tool`` whose bodies wait until ``parties`` of them are in flight together."""
    barrier = asyncio.Barrier(parties)

    async def execute(args: Any, exec: ToolExec) -> Any:
        await asyncio.wait_for(barrier.wait(), 5)
        return await tool.execute(args, exec)

    return dataclasses.replace(tool, execute=execute)


def test_invalid_modes_are_refused(rt: Any) -> None:
    with pytest.raises(ValueError, match="approval mode"):
        install_approval(rt, "yolo")  # type: ignore[arg-type]
    assert not rt.hooks.has("tools/pre-execute")


async def test_auto_allows_everything(h: Harness, root: Path) -> None:
    register(h, root)
    install_approval(h.rt, "auto")
    agent = await h.agent(
        tool_calls_response(
            [
                ("c1", "write_file", {"path": "a.txt", "content": "one\n"}),
                ("c2", "edit", {"path": "a.txt", "old_string": "one", "new_string": "two"}),
                ("c3", "shell", {"command": "cat a.txt"}),
                ("c4", "read_file", {"path": "a.txt"}),
            ]
        ),
        text_response("done"),
    )
    agent.followup(user_message("u1"))
    await settle(agent)
    assert compact(agent.session, only=CALLS_AND_RESULTS) == [
        "call(c1)", "result(c1)", "call(c2)", "result(c2)",
        "call(c3)", "result(c3)", "call(c4)", "result(c4)",
    ]  # fmt: skip
    assert label(tool_message(h, 1, "c3")) == "two\n[exit code 0]"
    assert (root / "a.txt").read_text() == "two\n"


async def test_read_only_runs_reads_in_parallel_and_denies_writes(h: Harness, root: Path) -> None:
    """Both reads are in flight at once (each waits for the other); every writer — the
    workspace ones and a custom exclusive tool — is DENIED with a reason the model sees."""
    (root / "a.txt").write_text("A\n")
    (root / "b.txt").write_text("B\n")
    ran: list[str] = []

    async def custom(args: Any, exec: ToolExec) -> str:
        ran.append(exec.call_id)
        return "ran"

    tools = register(
        h, root, define_tool(name="custom", description="d", parameters={}, execute=custom)
    )
    h.rt.tools.register(meeting_reads(tools["read_file"], 2))
    install_approval(h.rt, "read-only")
    agent = await h.agent(
        tool_calls_response(
            [
                ("c1", "read_file", {"path": "a.txt"}),
                ("c2", "read_file", {"path": "b.txt"}),
                ("c3", "write_file", {"path": "new.txt", "content": "x"}),
                ("c4", "edit", {"path": "a.txt", "old_string": "A", "new_string": "Z"}),
                ("c5", "shell", {"command": "touch touched"}),
                ("c6", "custom", {}),
                ("c7", "grep", {"pattern": "B"}),
            ]
        ),
        text_response("done"),
    )
    agent.followup(user_message("u1"))
    await settle(agent)
    assert compact(agent.session, only=("result(",)) == [
        "result(c1)", "result(c2)", "result(c3,DENIED)", "result(c4,DENIED)",
        "result(c5,DENIED)", "result(c6,DENIED)", "result(c7)",
    ]  # fmt: skip
    assert label(tool_message(h, 1, "c1")) == "     1\tA"
    assert label(tool_message(h, 1, "c2")) == "     1\tB"
    assert label(tool_message(h, 1, "c7")) == "b.txt:1:B"
    denied = tool_message(h, 1, "c5")
    assert denied.is_error
    assert label(denied) == "'shell' may change the workspace and the session is in read-only mode"
    assert sorted(p.name for p in root.iterdir()) == ["a.txt", "b.txt"]
    assert (root / "a.txt").read_text() == "A\n"
    assert ran == []


async def test_ask_yes_runs_the_writer_and_skips_reads(h: Harness, root: Path) -> None:
    register(h, root)
    asked: list[tuple[str, str, Any]] = []

    async def ask(exec: ToolExec) -> bool:
        asked.append((exec.call_id, exec.name, exec.arguments.path))
        return True

    install_approval(h.rt, "ask", ask)
    agent = await h.agent(
        tool_calls_response(
            [
                ("c1", "write_file", {"path": "a.txt", "content": "hi"}),
                ("c2", "read_file", {"path": "a.txt"}),
                ("c3", "list_dir", {"path": "."}),
            ]
        ),
        text_response("done"),
    )
    agent.followup(user_message("u1"))
    await settle(agent)
    assert compact(agent.session, only=("result(",)) == ["result(c1)", "result(c2)", "result(c3)"]
    assert asked == [("c1", "write_file", "a.txt")]
    assert label(tool_message(h, 1, "c2")) == "     1\thi"
    assert (root / "a.txt").read_text() == "hi"


async def test_ask_no_denies_and_the_model_sees_it(h: Harness, root: Path) -> None:
    register(h, root)
    asked: list[str] = []

    async def ask(exec: ToolExec) -> bool:
        asked.append(exec.name)
        return False

    install_approval(h.rt, "ask", ask)
    agent = await h.agent(
        tool_call_response("c1", "shell", {"command": "touch ran"}), text_response("ok")
    )
    agent.followup(user_message("u1"))
    await settle(agent)
    assert compact(agent.session, only=(*CALLS_AND_RESULTS, "ask(", "decide(", "T-")) == [
        "call(c1)", "ask(c1)", "decide(c1,deny)", "result(c1,DENIED)", "T-1:completed",
    ]  # fmt: skip
    decided = events_of(agent.session, "tool/approval-decided")[0].data
    assert (decided.reason, decided.by) == ("denied by the user", "user")
    assert asked == ["shell"]
    assert len(h.adapter.requests) == 2
    last = h.adapter.requests[1].messages[-1]
    assert isinstance(last, ToolResultMessage)
    assert (last.call_id, last.is_error, label(last)) == ("c1", True, "denied by the user")
    assert not (root / "ran").exists()


async def test_ask_covers_any_exclusive_tool(h: Harness, root: Path) -> None:
    """A custom tool that is not concurrency-safe for its arguments counts as a writer."""

    async def body(args: Any, exec: ToolExec) -> str:
        return "ok"

    custom = define_tool(
        name="custom",
        description="d",
        parameters={"type": "object"},
        execute=body,
        concurrency_safe=lambda args: not args.get("mutate", False),
    )
    register(h, root, custom)
    asked: list[str] = []

    async def ask(exec: ToolExec) -> bool:
        asked.append(exec.call_id)
        return exec.call_id != "c2"

    install_approval(h.rt, "ask", ask)
    agent = await h.agent(
        tool_calls_response([("c1", "custom", {}), ("c2", "custom", {"mutate": True})]),
        text_response("done"),
    )
    agent.followup(user_message("u1"))
    await settle(agent)
    assert compact(agent.session, only=("result(",)) == ["result(c1)", "result(c2,DENIED)"]
    assert asked == ["c2"]


async def test_cancel_while_asking_stops_waiting(h: Harness, root: Path) -> None:
    """A pending prompt does not hold the cancel: the call ends ABORTED_BEFORE_DISPATCH."""
    register(h, root)
    asking = asyncio.Event()
    answer = asyncio.Event()

    async def ask(exec: ToolExec) -> bool:
        asking.set()
        await answer.wait()
        return True

    install_approval(h.rt, "ask", ask)
    agent = await h.agent(tool_call_response("c1", "write_file", {"path": "a", "content": "x"}))
    agent.followup(user_message("u1"))
    await asyncio.wait_for(asking.wait(), 5)
    agent.cancel(CancelCause.user())
    await settle(agent)
    assert compact(agent.session)[-5:] == [
        "call(c1)",
        "ask(c1)",
        "result(c1,ABORTED_BEFORE_DISPATCH)",
        "S-1.1",
        "T-1:aborted",
    ]
    answer.set()
    assert not (root / "a").exists()


async def test_policy_passes_on_to_later_policies(h: Harness, root: Path) -> None:
    """The approval policy never answers allow(): a policy registered after it still runs."""
    register(h, root)
    install_approval(h.rt, "auto")
    h.rt.hooks.on("tools/pre-execute", lambda payload: ToolDecision.deny("later policy"))
    agent = await h.agent(
        tool_call_response("c1", "read_file", {"path": "x"}), text_response("done")
    )
    agent.followup(user_message("u1"))
    await settle(agent)
    assert compact(agent.session, only=("result(",)) == ["result(c1,DENIED)"]
    assert label(tool_message(h, 1, "c1")) == "later policy"


async def test_disposer_removes_the_policy(h: Harness, root: Path) -> None:
    register(h, root)
    dispose = install_approval(h.rt, "read-only")
    dispose()
    dispose()
    agent = await h.agent(
        tool_call_response("c1", "write_file", {"path": "a.txt", "content": "x"}),
        text_response("done"),
    )
    agent.followup(user_message("u1"))
    await settle(agent)
    assert compact(agent.session, only=("result(",)) == ["result(c1)"]
    assert (root / "a.txt").read_text() == "x"
