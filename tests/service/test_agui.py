"""``POST /v1/agui`` (SERVICE.md §2.5): an AG-UI ``RunAgentInput`` in, AG-UI events out,
every event parsed back with the ``ag-ui-protocol`` package's own models."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from ag_ui.core import Event, EventType
from httpx_sse import aconnect_sse
from pydantic import TypeAdapter

from steerloop import TextBlock
from steerloop.service import create_app
from steerloop.testing import text_response, tool_call_response

from .served import served
from .test_service import Model, sqlite_url

pytestmark = pytest.mark.timeout(90)
EVENTS: TypeAdapter[Any] = TypeAdapter(Event)


def run_input(thread: str, run: str, text: str) -> dict[str, Any]:
    return {
        "threadId": thread,
        "runId": run,
        "state": {},
        "messages": [{"id": "u1", "role": "user", "content": text}],
        "tools": [],
        "context": [],
        "forwardedProps": {},
    }


async def agui_run(client: Any, body: dict[str, Any]) -> list[Any]:
    parsed = []
    async with aconnect_sse(client, "POST", "/v1/agui", json=body) as source:
        async for sse in source.aiter_sse():
            event = EVENTS.validate_json(sse.data)
            parsed.append(event)
            if event.type in (EventType.RUN_FINISHED, EventType.RUN_ERROR):
                break
    return parsed


def shape(events: list[Any]) -> list[str]:
    """Event types with runs of TEXT_MESSAGE_CONTENT collapsed (live deltas vary)."""
    out: list[str] = []
    for event in events:
        name = event.type.value
        if not (name == "TEXT_MESSAGE_CONTENT" and out and out[-1] == name):
            out.append(name)
    return out


async def test_a_run_maps_to_ag_ui_events(tmp_path: Path) -> None:
    model = Model(tool_call_response("c1", "gate", {"x": 1}), text_response("all done"))
    model.release.set()
    async with served(create_app(sqlite_url(tmp_path), model.profiles())) as client:
        events = await agui_run(client, run_input("t1", "r1", "start"))
        assert shape(events) == [
            "RUN_STARTED",
            "CUSTOM",
            "CUSTOM",
            "STEP_STARTED",
            "TOOL_CALL_START",
            "TOOL_CALL_ARGS",
            "TOOL_CALL_END",
            "TOOL_CALL_RESULT",
            "STEP_FINISHED",
            "STEP_STARTED",
            "TEXT_MESSAGE_START",
            "TEXT_MESSAGE_CONTENT",
            "TEXT_MESSAGE_END",
            "STEP_FINISHED",
            "RUN_FINISHED",
        ]
        assert (events[0].thread_id, events[0].run_id) == ("t1", "r1")
        assert (events[-1].thread_id, events[-1].run_id) == ("t1", "r1")
        assert events[1].name == "steerloop.inbox"
        assert events[4].tool_call_id == "c1" and events[4].tool_call_name == "gate"
        assert events[5].delta == '{"x": 1}'
        assert events[7].content == "gate open"
        text = "".join(e.delta for e in events if e.type == EventType.TEXT_MESSAGE_CONTENT)
        assert text == "all done"
        # the thread is a session: a second run continues it
        model.adapter.add(text_response("again"))
        second = await agui_run(client, run_input("t1", "r2", "more"))
        assert shape(second) == [
            "RUN_STARTED",
            "CUSTOM",
            "CUSTOM",
            "STEP_STARTED",
            "TEXT_MESSAGE_START",
            "TEXT_MESSAGE_CONTENT",
            "TEXT_MESSAGE_END",
            "STEP_FINISHED",
            "RUN_FINISHED",
        ]
        assert second[-1].run_id == "r2"
        last = model.adapter.requests[-1].messages
        assert [m.role for m in last[-2:]] == ["assistant", "user"]
        assert last[-1].content[0] == TextBlock("more")


async def test_bad_agui_input_is_422_and_writes_nothing(tmp_path: Path) -> None:
    async with served(create_app(sqlite_url(tmp_path), Model().profiles())) as client:
        for body in ({"threadId": "t"}, run_input("t", "r", "x") | {"messages": []}):
            answer = await client.post("/v1/agui", json=body)
            assert answer.status_code == 422
            assert answer.json()["error"]["code"] == "invalid_body"
        assert (await client.get("/v1/sessions")).json() == {"sessions": []}
