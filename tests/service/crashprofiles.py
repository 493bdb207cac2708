"""A ``--profiles MODULE:ATTR`` module for the crash tests of ``steerloop serve``: a model
that answers every request at once, except that a user message ``call:ID`` makes it call
the approval-gated ``write`` tool (call id ``ID``) and ``hang`` makes it stream until the
turn is cancelled."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from steerloop import AgentOptions, define_tool
from steerloop.llm import GenerateRequest, ModelInfo
from steerloop.llm.chunks import StreamChunk
from steerloop.messages import TextBlock, ToolResultMessage, UserMessage
from steerloop.service import Profile
from steerloop.testing import text_response, tool_call_response
from steerloop.workspace import install_approval


class Answering:
    """Answers ``ok`` to anything; ``call:ID`` → a ``write`` call; ``hang`` → waits."""

    async def resolve_model(self, provider: str, model: str) -> ModelInfo:
        return ModelInfo()

    async def stream(self, request: GenerateRequest) -> AsyncIterator[StreamChunk]:
        last = request.messages[-1] if request.messages else None
        text = ""
        if isinstance(last, UserMessage):
            text = "".join(b.text for b in last.content if isinstance(b, TextBlock))
        if text.startswith("call:") and not isinstance(last, ToolResultMessage):
            chunks = tool_call_response(text.removeprefix("call:"), "write", {})
        elif text == "hang":
            for chunk in text_response("…")[:2]:
                yield chunk
            if request.signal is not None:
                await request.signal.wait()
            return
        else:
            chunks = text_response("ok")
        for chunk in chunks:
            yield chunk


def profiles(rt: Any) -> list[Profile]:
    rt.llm.register_adapter(["mock"], Answering())

    def write(args: Any, exec: Any) -> str:
        return "written"

    rt.tools.register(
        define_tool(
            name="write", description="writes", parameters={"type": "object"}, execute=write
        )
    )
    install_approval(rt, "ask")
    return [Profile(name="default", options=AgentOptions(provider="mock", model="m"))]
