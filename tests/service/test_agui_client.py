"""The official AG-UI client against a real server: ``@ag-ui/client`` 1.0.0's ``HttpAgent``
(with ``@ag-ui/core`` 1.0.0's schemas) runs ``agui_client.cjs`` scenarios against uvicorn.
The script fails on any event the schemas refuse and on any member or event the client's
own enforcement stage strips. Installed by ``scripts/install_test_servers.sh``; under
``CI=true`` a missing client is a failure, not a skip."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from steerloop.service import create_app
from steerloop.testing import error_response, text_response, tool_call_response
from steerloop.tools import ToolDecision

from .served import served
from .test_service import Model, sqlite_url

pytestmark = pytest.mark.timeout(120)

REPO = Path(__file__).resolve().parents[2]
SCRIPT = Path(__file__).with_name("agui_client.cjs")
CLIENT = REPO / ".test-servers" / "node_modules" / "@ag-ui" / "client" / "package.json"
PICK = {
    "name": "pick_color",
    "description": "Ask the user to pick a color",
    "parameters": {"type": "object", "properties": {"hint": {"type": "string"}}},
}


def _need_client() -> None:
    missing = None
    if shutil.which("node") is None:
        missing = "node is not installed"
    elif not CLIENT.exists():
        missing = f"{CLIENT.parent} is missing: run scripts/install_test_servers.sh"
    if missing is None:
        return
    if os.environ.get("CI") == "true":
        pytest.fail(f"the official AG-UI client is required under CI=true: {missing}")
    pytest.skip(missing)


class Driver:
    """One run of the node script: its JSON lines, read as they come."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc

    async def line(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        raw = await asyncio.wait_for(self.proc.stdout.readline(), 60)
        assert raw, "the client script ended early"
        out: dict[str, Any] = json.loads(raw)
        assert "fatal" not in out, out["fatal"]
        return out

    async def finish(self) -> None:
        done = await self.line()
        assert done.get("done"), done
        assert done["rawProblems"] == [], done["rawProblems"]
        enforced = [w for w in done["warnings"] if "[ag-ui]" in w]
        assert enforced == [], enforced
        assert await asyncio.wait_for(self.proc.wait(), 30) == 0


async def drive(client: Any, thread: str, *runs: dict[str, Any]) -> Driver:
    _need_client()
    spec = {"url": f"{client.base_url}/v1/agui", "threadId": thread, "runs": list(runs)}
    proc = await asyncio.create_subprocess_exec(
        "node",
        str(SCRIPT),
        json.dumps(spec),
        stdout=asyncio.subprocess.PIPE,
        env=os.environ | {"STEERLOOP_TEST_SERVERS": str(REPO / ".test-servers")},
    )
    return Driver(proc)


def texts(result: dict[str, Any]) -> list[str]:
    return [
        m["content"] for m in result["messages"] if m["role"] == "assistant" and m.get("content")
    ]


async def test_text_tool_calls_and_history(tmp_path: Path) -> None:
    model = Model(
        tool_call_response("c1", "gate", {"x": 1}),
        text_response("all done"),
        text_response("second answer"),
    )
    model.release.set()
    async with served(create_app(sqlite_url(tmp_path), model.profiles())) as client:
        d = await drive(client, "t1", {"user": "start"}, {"user": "more"})
        first, second = await d.line(), await d.line()
        await d.finish()
        assert first["error"] is None and first["outcome"] == "success"
        assert first["events"][0] == "RUN_STARTED" and first["events"][-1] == "RUN_FINISHED"
        assert "TOOL_CALL_RESULT" in first["events"]
        assert texts(first)[-1] == "all done"
        roles = [m["role"] for m in second["messages"]]
        assert roles == ["user", "assistant", "tool", "assistant", "user", "assistant"]
        assert texts(second)[-1] == "second answer"
        assert second["events"][1] == "MESSAGES_SNAPSHOT"
        # the history the client re-sent was not applied again: two user messages
        log = (await client.get("/v1/sessions/t1/log")).json()["events"]
        assert [e["type"] for e in log].count("user/message") == 2


async def test_frontend_tool_interrupt_and_resume(tmp_path: Path) -> None:
    model = Model(tool_call_response("c1", "pick_color", {"hint": "warm"}), text_response("red!"))
    async with served(create_app(sqlite_url(tmp_path), model.profiles())) as client:
        d = await drive(
            client,
            "t1",
            {"user": "pick", "tools": [PICK]},
            {"answerClient": "red", "tools": [PICK]},
        )
        first, second = await d.line(), await d.line()
        await d.finish()
        assert first["outcome"] == "interrupt"
        assert [(i["id"], i["reason"]) for i in first["interrupts"]] == [("c1", "client_tool")]
        assert second["error"] is None and second["outcome"] == "success"
        assert texts(second)[-1] == "red!"
        log = (await client.get("/v1/sessions/t1/log")).json()["events"]
        results = [e["data"]["message"] for e in log if e["type"] == "tool/result"]
        assert [(r["call_id"], r["content"][0]["text"]) for r in results] == [("c1", "red")]


async def test_approval_interrupt_and_resume(tmp_path: Path) -> None:
    model = Model(tool_call_response("c1", "gate", {}), text_response("opened"))
    model.release.set()

    def profiles(rt: Any) -> Any:
        found = model.profiles()(rt)
        rt.hooks.on(
            "tools/pre-execute",
            lambda p: ToolDecision.ask("opens the gate") if p.exec.name == "gate" else None,
        )
        return found

    async with served(create_app(sqlite_url(tmp_path), profiles)) as client:
        d = await drive(client, "t1", {"user": "go"}, {"decide": "allow"})
        first, second = await d.line(), await d.line()
        await d.finish()
        assert first["outcome"] == "interrupt"
        (interrupt,) = first["interrupts"]
        assert interrupt["reason"] == "tool_approval" and interrupt["message"] == "opens the gate"
        assert second["outcome"] == "success" and texts(second)[-1] == "opened"
        log = (await client.get("/v1/sessions/t1/log")).json()["events"]
        assert [e["data"]["decision"] for e in log if e["type"] == "tool/approval-decided"] == [
            "allow"
        ]


async def test_error_and_cancelled(tmp_path: Path) -> None:
    model = Model(error_response("BOOM", "it broke"), tool_call_response("c1", "gate", {}))
    async with served(create_app(sqlite_url(tmp_path), model.profiles())) as client:
        d = await drive(client, "t1", {"user": "fail"}, {"user": "hold"})
        failed = await d.line()
        assert failed["events"][-1] == "RUN_ERROR"
        assert (failed["raw"][-1]["message"], failed["raw"][-1]["code"]) == ("it broke", "BOOM")
        await asyncio.wait_for(model.entered.wait(), 60)
        assert (await client.post("/v1/sessions/t1/cancel", json={})).status_code == 202
        cancelled = await d.line()
        await d.finish()
        assert cancelled["error"] is None and cancelled["outcome"] == "cancelled"


async def test_a_concurrent_second_run(tmp_path: Path) -> None:
    model = Model(tool_call_response("c1", "gate", {}), text_response("after the steer"))
    async with served(create_app(sqlite_url(tmp_path), model.profiles())) as client:
        d = await drive(client, "t1", {"user": "go", "second": "also this"})
        assert await d.line() == {"signal": "second-started"}
        model.release.set()
        result = await d.line()
        await d.finish()
        second = result["second"]
        assert result["outcome"] == second["outcome"] == "success"
        assert second["error"] is None
        assert second["events"][:4] == [
            "RUN_STARTED", "MESSAGES_SNAPSHOT", "STATE_SNAPSHOT", "STEP_STARTED",
        ]  # fmt: skip
        assert texts(second)[-1] == texts(result)[-1] == "after the steer"
