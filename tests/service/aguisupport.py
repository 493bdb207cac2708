"""Reading AG-UI runs off the wire: the raw SSE bytes, every event validated by the Python
``ag-ui-protocol`` 1.0 models strictly (no member the models do not describe, anywhere)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
from ag_ui.core import Event, EventType
from pydantic import BaseModel, TypeAdapter

EVENTS: TypeAdapter[Any] = TypeAdapter(Event)
WAIT = 30.0
ENDS = (EventType.RUN_FINISHED, EventType.RUN_ERROR)


def strict(value: Any, where: str = "event") -> None:
    """Fail on any member a model keeps as an extra (the models are open; the wire is not)."""
    if isinstance(value, BaseModel):
        extra = value.model_extra or {}
        assert not extra, f"{where}: unknown members {sorted(extra)}"
        for name in type(value).model_fields:
            strict(getattr(value, name), f"{where}.{name}")
    elif isinstance(value, list | tuple):
        for i, item in enumerate(value):
            strict(item, f"{where}[{i}]")


def parse_stream(raw: bytes) -> list[Any]:
    """Events of a raw SSE body: LF only, each ``data:`` JSON valid and strict."""
    assert b"\r" not in raw, "SSE lines must end in LF"
    out = []
    for block in raw.decode().split("\n\n"):
        data = [
            line[5:].removeprefix(" ") for line in block.split("\n") if line.startswith("data:")
        ]
        if not data:
            continue
        event = EVENTS.validate_json("\n".join(data))
        strict(event)
        # nothing the models dropped either: the JSON round-trips
        assert json.loads(event.model_dump_json(by_alias=True, exclude_none=True)) == json.loads(
            "\n".join(data)
        )
        out.append(event)
    return out


async def agui_run(client: httpx.AsyncClient, body: dict[str, Any]) -> list[Any]:
    """POST one run and read it to its RUN_FINISHED / RUN_ERROR (bounded)."""
    raw = b""
    async with asyncio.timeout(WAIT), client.stream("POST", "/v1/agui", json=body) as answer:
        assert answer.status_code == 200, (await answer.aread()).decode()
        assert answer.headers["content-type"].startswith("text/event-stream")
        async for chunk in answer.aiter_bytes():
            raw += chunk
            events = parse_stream(raw.rpartition(b"\n\n")[0])
            if events and events[-1].type in ENDS:
                return events
    raise AssertionError(f"the run ended without RUN_FINISHED: {raw!r}")


def run_input(thread: str, run: str, *messages: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {
        "threadId": thread,
        "runId": run,
        "state": {},
        "messages": list(messages),
        "tools": [],
        "context": [],
        "forwardedProps": {},
    } | extra


def user(id: str, text: str) -> dict[str, Any]:
    return {"id": id, "role": "user", "content": text}


def shape(events: list[Any]) -> list[str]:
    """Event types with runs of *_CONTENT collapsed (live deltas vary)."""
    out: list[str] = []
    for event in events:
        name = event.type.value
        if not (name.endswith("_CONTENT") and out and out[-1] == name):
            out.append(name)
    return out


def wire(event: Any) -> dict[str, Any]:
    """An event's JSON form without its timestamp."""
    out: dict[str, Any] = json.loads(event.model_dump_json(by_alias=True, exclude_none=True))
    out.pop("timestamp", None)
    return out
