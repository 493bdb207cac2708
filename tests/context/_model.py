"""A simulated provider for long sessions: it reports input tokens the way the estimator
counts characters, so "under the bound" is checkable on every request it receives."""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Callable, Sequence
from typing import Any

from steerloop import Runtime, define_tool
from steerloop.context import estimate_message_tokens
from steerloop.context._compaction import _SUMMARIZER_PROMPT
from steerloop.llm._types import GenerateRequest, TokenUsage
from steerloop.llm.chunks import StreamChunk, UsageChunk
from steerloop.messages import TextBlock
from steerloop.testing import ScriptedAdapter, text_response, tool_call_response

RESULT_CHARS = 2048


def request_tokens(request: GenerateRequest) -> int:
    """The input tokens this provider reports: messages + tool schemas at 4 chars a token."""
    tools = [
        {"name": t.name, "description": t.description, "parameters": dict(t.parameters)}
        for t in request.tools
    ]
    schema = math.ceil(len(json.dumps(tools)) * 0.25) if tools else 0
    return estimate_message_tokens(request.messages) + schema


def is_summary_request(request: GenerateRequest) -> bool:
    first = request.messages[0] if request.messages else None
    return (
        first is not None
        and first.role == "system"
        and isinstance(first.content[0], TextBlock)
        and first.content[0].text == _SUMMARIZER_PROMPT
    )


def _with_usage(chunks: list[StreamChunk], request: GenerateRequest) -> list[StreamChunk]:
    usage = TokenUsage(input_tokens=request_tokens(request), output_tokens=20)
    return [*chunks[:-1], UsageChunk(usage=usage), chunks[-1]]


def make_model(prefix: str = "c") -> Callable[[GenerateRequest], list[StreamChunk]]:
    """Each question → one ``fetch`` call, then a short answer; a summary request → a recap."""
    calls = itertools.count(1)

    def model(request: GenerateRequest) -> list[StreamChunk]:
        if is_summary_request(request):
            recap = "Recap: the user asked questions; fetch answered each."
            return _with_usage(text_response(recap), request)
        last = request.messages[-1]
        if last.role == "tool":
            return _with_usage(text_response(f"answered {last.call_id}"), request)
        call = tool_call_response(f"{prefix}{next(calls)}", "fetch", {"q": "x"})
        return _with_usage(call, request)

    return model


def fetch_tool() -> Any:
    async def execute(args: Any, exec: Any) -> str:
        return ("result of " + str(exec.call_id) + " ").ljust(RESULT_CHARS, ".")

    return define_tool(
        name="fetch",
        description="fetch a page",
        parameters={"type": "object", "properties": {"q": {"type": "string"}}},
        execute=execute,
    )


def simulated(rt: Runtime, turns: int) -> ScriptedAdapter:
    """A ``mock`` provider playing ``model`` for ``turns`` turns (plus summaries)."""
    adapter = ScriptedAdapter([make_model()] * (turns * 3 + 10))
    rt.llm.register_adapter("mock", adapter)
    rt.tools.register(fetch_tool())
    return adapter


def agent_requests(adapter: ScriptedAdapter) -> Sequence[GenerateRequest]:
    return [r for r in adapter.requests if not is_summary_request(r)]
