"""A ``--profiles MODULE:ATTR`` module for the PostgreSQL service tests: worker processes
that do not share memory with the test, so what the model received and the holding of a
step go through files.

* The model answers by the request: a last user message starting with ``gate`` calls the
  ``gate`` tool; anything else gets ``reply to <last user text>``. Each request's user texts
  and this process's pid are appended as one JSON line to ``$STEERLOOP_TEST_RECORD``.
* ``gate`` (argument ``name``) waits until the file ``$STEERLOOP_TEST_GATES/<name>`` exists
  (or its call is aborted): the step after it is held open until the test releases it.
* A last user message starting with ``write`` calls the ``write`` tool, which a
  ``tools/pre-execute`` policy holds for an approval (``ToolDecision.ask``); it returns
  ``written <path>`` when allowed.
* ``$STEERLOOP_TEST_PROFILES`` (comma-separated, default ``default``) names the profiles
  this process serves, all at version 1.
"""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Any

from steerloop import AgentOptions, ToolDecision, define_tool
from steerloop.llm import GenerateRequest
from steerloop.service import Profile
from steerloop.testing import ScriptedAdapter, text_response, tool_call_response

_POLL = 0.02


def user_texts(request: GenerateRequest) -> list[str]:
    return [
        block.text
        for message in request.messages
        if message.role == "user"
        for block in message.content
        if hasattr(block, "text")
    ]


def _answer(request: GenerateRequest) -> Any:
    record = os.environ.get("STEERLOOP_TEST_RECORD")
    texts = user_texts(request)
    last = request.messages[-1] if request.messages else None
    if record:
        line = {"pid": os.getpid(), "users": texts, "last_id": getattr(last, "id", None)}
        with open(record, "a", encoding="utf-8") as out:
            out.write(json.dumps(line) + "\n")
    if last is not None and last.role == "user" and texts and texts[-1].startswith("gate"):
        name = texts[-1].split()[-1]
        return tool_call_response(f"call-{name}", "gate", {"name": name})
    if last is not None and last.role == "user" and texts and texts[-1].startswith("write"):
        name = texts[-1].split()[-1]
        return tool_call_response(f"call-{name}", "write", {"path": name})
    return text_response(f"reply to {texts[-1] if texts else 'nothing'}")


async def _gate(args: Any, exec: Any) -> str:
    gates = Path(os.environ.get("STEERLOOP_TEST_GATES", "."))
    name = str(args.get("name", "gate"))
    while not (gates / name).exists():
        if exec.signal.aborted:
            return "gate aborted"
        await asyncio.sleep(_POLL)  # polling a file another process creates
    return f"gate {name} open"


def _ask_for_writes(payload: Any) -> ToolDecision | None:
    return ToolDecision.ask("write changes files") if payload.exec.name == "write" else None


def profiles(rt: Any) -> list[Profile]:
    rt.llm.register_adapter(["mock"], ScriptedAdapter([_answer] * 10_000))
    rt.tools.register(
        define_tool(
            name="gate",
            description="waits for its file",
            parameters={"type": "object", "properties": {"name": {"type": "string"}}},
            execute=_gate,
        )
    )
    rt.tools.register(
        define_tool(
            name="write",
            description="writes a file (asks first)",
            parameters={"type": "object", "properties": {"path": {"type": "string"}}},
            execute=lambda args, exec: f"written {args.get('path')}",
        )
    )
    rt.hooks.on("tools/pre-execute", _ask_for_writes)
    names = os.environ.get("STEERLOOP_TEST_PROFILES", "default").split(",")
    options = AgentOptions(provider="mock", model="m")
    return [Profile(name=name, options=options) for name in names if name]
