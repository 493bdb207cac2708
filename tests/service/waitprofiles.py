"""A ``--profiles MODULE:ATTR`` module for the durable-wait tests of ``steerloop serve``: a
rule model (the same in every process, so a restarted server answers alike) that calls the
client's ``pick_color`` tool for a user message ``pick NAME`` (call id ``pick-NAME``),
answers ``got <result>`` after a tool result, and ``ok`` otherwise. Every request's
messages are appended as one JSON line to ``$STEERLOOP_TEST_RECORD`` (the test reads what
the model received across processes)."""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator
from typing import Any

from steerloop import AgentOptions
from steerloop.llm import GenerateRequest, ModelInfo
from steerloop.llm.chunks import StreamChunk
from steerloop.messages import TextBlock, message_to_json
from steerloop.service import Profile
from steerloop.testing import text_response, tool_call_response


def _text(message: Any) -> str:
    return "".join(b.text for b in getattr(message, "content", ()) if isinstance(b, TextBlock))


class Picking:
    async def resolve_model(self, provider: str, model: str) -> ModelInfo:
        return ModelInfo()

    async def stream(self, request: GenerateRequest) -> AsyncIterator[StreamChunk]:
        record = os.environ.get("STEERLOOP_TEST_RECORD")
        if record:
            line = {
                "pid": os.getpid(),
                "session": request.session_id,
                "messages": [message_to_json(m) for m in request.messages],
            }
            with open(record, "a", encoding="utf-8") as out:
                out.write(json.dumps(line) + "\n")
        last = request.messages[-1]
        text = _text(last)
        if last.role == "tool":
            chunks = text_response(f"got {text}")
        elif text.startswith("pick "):
            name = text.split()[1]
            chunks = tool_call_response(f"pick-{name}", "pick_color", {"hint": name})
        else:
            chunks = text_response("ok")
        for chunk in chunks:
            yield chunk


def profiles(rt: Any) -> list[Profile]:
    rt.llm.register_adapter(["mock"], Picking())
    return [Profile(name="default", options=AgentOptions(provider="mock", model="m"))]
