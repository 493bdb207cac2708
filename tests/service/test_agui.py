"""``POST /v1/agui`` (SERVICE.md §2.5, AG-UI 1.0): runs read off the raw bytes and held to the
``ag-ui-protocol`` models strictly (``aguisupport``); reconciliation by message id, client
tools as deferred calls, approvals and client calls as interrupts answered by ``resume``,
outcomes, the state document."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from steerloop import TextBlock, define_tool
from steerloop.service import create_app
from steerloop.testing import error_response, reasoning_response, text_response, tool_call_response
from steerloop.tools import ToolDecision

from .aguisupport import agui_run, run_input, shape, user, wire
from .served import served
from .test_service import Model, sqlite_url

pytestmark = pytest.mark.timeout(90)

PICK = {
    "name": "pick_color",
    "description": "Ask the user to pick a color",
    "parameters": {"type": "object", "properties": {"hint": {"type": "string"}}},
}


async def log_of(client: Any, session_id: str) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = (await client.get(f"/v1/sessions/{session_id}/log")).json()[
        "events"
    ]
    return events


def types(log: list[dict[str, Any]], *kinds: str) -> list[str]:
    return [e["type"] for e in log if e["type"] in kinds]


async def test_a_run_maps_to_ag_ui_events(tmp_path: Path) -> None:
    model = Model(tool_call_response("c1", "gate", {"x": 1}), text_response("all done"))
    model.release.set()
    async with served(create_app(sqlite_url(tmp_path), model.profiles())) as client:
        first = run_input("t1", "r1", user("u1", "start"))
        events = await agui_run(client, first)
        assert shape(events) == [
            "RUN_STARTED", "STATE_SNAPSHOT", "CUSTOM",
            "STEP_STARTED", "TOOL_CALL_START", "TOOL_CALL_ARGS", "TOOL_CALL_END",
            "TOOL_CALL_RESULT", "STEP_FINISHED",
            "STEP_STARTED", "TEXT_MESSAGE_START", "TEXT_MESSAGE_CONTENT", "TEXT_MESSAGE_END",
            "STEP_FINISHED", "RUN_FINISHED",
        ]  # fmt: skip
        assert (events[0].thread_id, events[0].run_id) == ("t1", "r1")
        assert wire(events[1]) == {"type": "STATE_SNAPSHOT", "snapshot": {}}
        assert all(isinstance(e.timestamp, int) for e in events)
        start = events[4]
        assert (start.tool_call_id, start.tool_call_name) == ("c1", "gate")
        assert start.parent_message_id  # the assistant message that asked for it
        assert events[5].delta == '{"x": 1}' and events[7].content == "gate open"
        text = "".join(e.delta for e in events if e.type.value == "TEXT_MESSAGE_CONTENT")
        assert text == "all done"
        end = wire(events[-1])
        assert end["outcome"] == {"type": "success"} and end["runId"] == "r1"
        # the thread is a session: a second run continues it. The client sends its whole
        # thread; only the new user message is applied.
        model.adapter.add(text_response("again"))
        log = await log_of(client, "t1")
        history = [user("u1", "start"), {"id": "a-client", "role": "assistant", "content": "x"}]
        second = await agui_run(client, run_input("t1", "r2", *history, user("u2", "more")))
        assert shape(second) == [
            "RUN_STARTED", "MESSAGES_SNAPSHOT", "STATE_SNAPSHOT", "CUSTOM",
            "STEP_STARTED", "TEXT_MESSAGE_START", "TEXT_MESSAGE_CONTENT", "TEXT_MESSAGE_END",
            "STEP_FINISHED", "RUN_FINISHED",
        ]  # fmt: skip
        snapshot = [(m.role, m.id) for m in second[1].messages]
        assert snapshot[0] == ("user", "u1") and snapshot[-1] == ("user", "u2")
        assert [r for r, _ in snapshot] == ["user", "assistant", "tool", "assistant", "user"]
        assert [m.content for m in model.adapter.requests[-1].messages[-2:]] == [
            (TextBlock("all done"),),
            (TextBlock("more"),),
        ]
        assert types(await log_of(client, "t1"), "user/message") == ["user/message"] * 2
        assert len(log) < len(await log_of(client, "t1"))


async def test_an_input_with_nothing_new_re_sends_nothing(tmp_path: Path) -> None:
    """An input whose newest message is an assistant message (regenerate) or a tool result
    runs nothing: the older user message is in the log already. ``messages: []`` is valid."""
    model = Model(text_response("hello"))
    async with served(create_app(sqlite_url(tmp_path), model.profiles())) as client:
        empty = await agui_run(client, run_input("t1", "r0"))
        assert shape(empty) == ["RUN_STARTED", "STATE_SNAPSHOT", "RUN_FINISHED"]
        await agui_run(client, run_input("t1", "r1", user("u1", "hi")))
        assert len(model.adapter.requests) == 1
        for last in (
            {"id": "a1", "role": "assistant", "content": "hello"},
            {"id": "t9", "role": "tool", "toolCallId": "nope", "content": "x"},
        ):
            again = await agui_run(client, run_input("t1", "rx", user("u1", "hi"), last))
            assert shape(again) == [
                "RUN_STARTED", "MESSAGES_SNAPSHOT", "STATE_SNAPSHOT", "RUN_FINISHED",
            ]  # fmt: skip
        assert len(model.adapter.requests) == 1
        assert types(await log_of(client, "t1"), "turn/start") == ["turn/start"]


async def test_a_client_tool_call_is_an_interrupt_resumed_with_its_result(tmp_path: Path) -> None:
    model = Model(tool_call_response("c1", "pick_color", {"hint": "warm"}), text_response("red!"))
    async with served(create_app(sqlite_url(tmp_path), model.profiles())) as client:
        first = await agui_run(client, run_input("t1", "r1", user("u1", "pick"), tools=[PICK]))
        assert shape(first)[-5:] == [
            "TOOL_CALL_START", "TOOL_CALL_ARGS", "TOOL_CALL_END", "STEP_FINISHED", "RUN_FINISHED",
        ]  # fmt: skip
        assert [t.name for t in model.adapter.requests[0].tools] == ["gate", "pick_color"]
        end = wire(first[-1])
        assert end["outcome"]["type"] == "interrupt"
        (interrupt,) = end["outcome"]["interrupts"]
        assert interrupt["id"] == "c1" and interrupt["reason"] == "client_tool"
        assert interrupt["toolCallId"] == "c1"
        assert interrupt["metadata"] == {"tool": "pick_color", "arguments": '{"hint": "warm"}'}
        described = (await client.get("/v1/sessions/t1")).json()
        assert described["status"] == "running"
        assert described["pending_client_calls"] == [
            {"call_id": "c1", "name": "pick_color", "arguments": '{"hint": "warm"}'}
        ]
        # the client ran the tool: its next run carries the result and resumes
        result = {"id": "tr1", "role": "tool", "toolCallId": "c1", "content": "red"}
        second = await agui_run(
            client,
            run_input(
                "t1",
                "r2",
                user("u1", "pick"),
                result,
                tools=[PICK],
                resume=[{"interruptId": "c1", "status": "resolved"}],
            ),
        )
        assert shape(second) == [
            "RUN_STARTED", "MESSAGES_SNAPSHOT", "STATE_SNAPSHOT", "STEP_STARTED",
            "TOOL_CALL_RESULT", "STEP_FINISHED", "STEP_STARTED", "TEXT_MESSAGE_START",
            "TEXT_MESSAGE_CONTENT", "TEXT_MESSAGE_END", "STEP_FINISHED", "RUN_FINISHED",
        ]  # fmt: skip
        assert second[4].tool_call_id == "c1" and second[4].content == "red"
        assert wire(second[-1])["outcome"] == {"type": "success"}
        log = await log_of(client, "t1")
        assert types(log, "tool/call", "tool/deferred", "tool/result", "turn/end") == [
            "tool/call", "tool/deferred", "tool/result", "turn/end",
        ]  # fmt: skip
        assert model.adapter.requests[1].messages[-1].content == (TextBlock("red"),)
        assert (await client.get("/v1/sessions/t1")).json()["pending_client_calls"] == []


async def test_an_approval_is_an_interrupt_and_resume_decides_it(tmp_path: Path) -> None:
    model = Model(tool_call_response("c1", "gate", {"x": 1}), text_response("done"))
    model.release.set()

    def profiles(rt: Any) -> Any:
        found = model.profiles()(rt)
        rt.hooks.on(
            "tools/pre-execute",
            lambda p: ToolDecision.ask("opens the gate") if p.exec.name == "gate" else None,
        )
        return found

    async with served(create_app(sqlite_url(tmp_path), profiles)) as client:
        first = await agui_run(client, run_input("t1", "r1", user("u1", "go")))
        (interrupt,) = wire(first[-1])["outcome"]["interrupts"]
        assert interrupt["reason"] == "tool_approval" and interrupt["message"] == "opens the gate"
        assert interrupt["metadata"] == {"tool": "gate", "arguments": '{"x": 1}'}
        assert interrupt["responseSchema"]["required"] == ["decision"]
        bad = await client.post(
            "/v1/agui",
            json=run_input(
                "t1", "rb", resume=[{"interruptId": "c1", "status": "resolved", "payload": "yes"}]
            ),
        )
        assert bad.status_code == 422 and bad.json()["error"]["code"] == "invalid_resume"
        resume = [{"interruptId": "c1", "status": "resolved", "payload": {"decision": "allow"}}]
        second = await agui_run(client, run_input("t1", "r2", user("u1", "go"), resume=resume))
        assert wire(second[-1])["outcome"] == {"type": "success"}
        assert "TOOL_CALL_RESULT" in shape(second)
        log = await log_of(client, "t1")
        decided = [e["data"] for e in log if e["type"] == "tool/approval-decided"]
        assert decided == [{"call_id": "c1", "decision": "allow", "by": "http"}]
        # answering again is not an error and decides nothing
        again = await agui_run(client, run_input("t1", "r3", resume=resume))
        assert shape(again)[-1] == "RUN_FINISHED"
        assert types(await log_of(client, "t1"), "tool/approval-decided") == [
            "tool/approval-decided"
        ]


async def test_a_cancelled_turn_ends_the_run_cancelled(tmp_path: Path) -> None:
    model = Model(tool_call_response("c1", "gate", {}))
    async with served(create_app(sqlite_url(tmp_path), model.profiles())) as client:
        run = asyncio.create_task(agui_run(client, run_input("t1", "r1", user("u1", "go"))))
        await asyncio.wait_for(model.entered.wait(), 30)
        assert (await client.post("/v1/sessions/t1/cancel", json={})).status_code == 202
        events = await asyncio.wait_for(run, 30)
        assert wire(events[-1])["outcome"] == {"type": "cancelled"}


async def test_a_failed_turn_is_run_error_and_reasoning_streams(tmp_path: Path) -> None:
    model = Model(reasoning_response("think first", "answer"), error_response("BOOM", "it broke"))
    async with served(create_app(sqlite_url(tmp_path), model.profiles())) as client:
        ok = await agui_run(client, run_input("t1", "r1", user("u1", "why")))
        assert shape(ok)[4:12] == [
            "REASONING_START", "REASONING_MESSAGE_START", "REASONING_MESSAGE_CONTENT",
            "REASONING_MESSAGE_END", "REASONING_END", "TEXT_MESSAGE_START",
            "TEXT_MESSAGE_CONTENT", "TEXT_MESSAGE_END",
        ]  # fmt: skip
        reasoning = "".join(e.delta for e in ok if e.type.value == "REASONING_MESSAGE_CONTENT")
        assert reasoning == "think first"
        failed = await agui_run(client, run_input("t1", "r2", user("u2", "again")))
        assert wire(failed[-1]) == {"type": "RUN_ERROR", "message": "it broke", "code": "BOOM"}


async def test_state_is_a_snapshot_then_deltas(tmp_path: Path) -> None:
    model = Model(tool_call_response("c1", "remember", {"item": "milk"}), text_response("ok"))

    def profiles(rt: Any) -> Any:
        found = model.profiles()(rt)

        def remember(args: dict[str, Any], exec: Any) -> str:
            exec.agent.update_state([{"op": "add", "path": "/items/-", "value": args["item"]}])
            return f"{len(exec.agent.state['items'])} items"

        rt.tools.register(
            define_tool(
                name="remember",
                description="remember an item",
                parameters={"type": "object", "properties": {"item": {"type": "string"}}},
                execute=remember,
            )
        )
        return found

    async with served(create_app(sqlite_url(tmp_path), profiles)) as client:
        body = run_input("t1", "r1", user("u1", "milk"), state={"items": ["eggs"]})
        events = await agui_run(client, body)
        snapshots = [wire(e) for e in events if e.type.value == "STATE_SNAPSHOT"]
        assert snapshots == [{"type": "STATE_SNAPSHOT", "snapshot": {"items": ["eggs"]}}]
        deltas = [wire(e)["delta"] for e in events if e.type.value == "STATE_DELTA"]
        assert deltas[-1] == [{"op": "add", "path": "/items/-", "value": "milk"}]
        described = (await client.get("/v1/sessions/t1")).json()
        assert described["state"] == {"items": ["eggs", "milk"]}
        # the plain feed has the same event
        log = await log_of(client, "t1")
        assert [e["data"]["patch"] for e in log if e["type"] == "state/changed"] == [
            [{"op": "add", "path": "/items", "value": ["eggs"]}],
            [{"op": "add", "path": "/items/-", "value": "milk"}],
        ]
        # a fresh client's {} is "no state yet", not "clear it"
        model.adapter.add(text_response("still"))
        await agui_run(client, run_input("t1", "r2", user("u2", "and")))
        assert (await client.get("/v1/sessions/t1")).json()["state"] == {"items": ["eggs", "milk"]}


async def test_bad_agui_input_is_422_and_writes_nothing(tmp_path: Path) -> None:
    async with served(create_app(sqlite_url(tmp_path), Model().profiles())) as client:
        for body in (
            {"threadId": "t"},
            run_input("t", "r", user("u", "x")) | {"surprise": 1},
            run_input("t", "r", user("u", "x"), state=[1]),
            run_input("t", "r", user("u", "x"), tools=[PICK, PICK]),
            run_input("t", "r", user("u", "x"), tools=[PICK | {"parameters": {"type": 3}}]),
            run_input("t", "r", resume=[{"interruptId": "c9", "status": "resolved"}]),
        ):
            answer = await client.post("/v1/agui", json=body)
            assert answer.status_code == 422, body
            assert answer.json()["error"]["code"] in ("invalid_body", "invalid_resume")
        assert types(await log_of(client, "t"), "user/message", "turn/start") == []


async def test_a_second_run_attaches_to_the_running_turn_at_a_step_boundary(
    tmp_path: Path,
) -> None:
    """A run on a running thread steers its message into the turn and shows that turn from
    its open step: STEP_STARTED first, never a STEP_FINISHED without it; both runs end with
    the turn."""
    model = Model(tool_call_response("c1", "gate", {}), text_response("after the steer"))
    async with served(create_app(sqlite_url(tmp_path), model.profiles())) as client:
        first = asyncio.create_task(agui_run(client, run_input("t1", "r1", user("u1", "go"))))
        await asyncio.wait_for(model.entered.wait(), 30)
        second = asyncio.create_task(
            agui_run(client, run_input("t1", "r2", user("u1", "go"), user("u2", "also this")))
        )
        async with asyncio.timeout(30):  # the steer is queued in the turn
            while not any(
                e["type"] == "agent/inbox/spliced"
                and any(m["id"] == "u2" for m in e["data"].get("inserted", []))
                for e in await log_of(client, "t1")
            ):
                await asyncio.sleep(0.02)
        model.release.set()
        one, two = await asyncio.wait_for(asyncio.gather(first, second), 30)
        assert shape(two) == [
            "RUN_STARTED", "MESSAGES_SNAPSHOT", "STATE_SNAPSHOT", "STEP_STARTED", "CUSTOM",
            "TOOL_CALL_RESULT", "STEP_FINISHED", "CUSTOM", "STEP_STARTED",
            "TEXT_MESSAGE_START", "TEXT_MESSAGE_CONTENT", "TEXT_MESSAGE_END", "STEP_FINISHED",
            "RUN_FINISHED",
        ]  # fmt: skip
        assert two[3].step_name == two[6].step_name == "step 1.1"
        text = "".join(e.delta for e in two if e.type.value == "TEXT_MESSAGE_CONTENT")
        assert text == "after the steer"
        assert [(m.role, m.id) for m in two[1].messages][-1] == ("user", "u2")
        assert wire(one[-1])["outcome"] == wire(two[-1])["outcome"] == {"type": "success"}
        assert model.adapter.requests[-1].messages[-1].content == (TextBlock("also this"),)
