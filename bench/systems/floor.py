"""The floor: a hand-written minimal asyncio loop doing the same fake-model + tool work.

It streams the same chunk objects steerloop's scripted adapter streams, folds them into
text and tool calls, parses and validates the arguments, awaits the tool and records
the turn in a plain history list: what any loop must do, and nothing else.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from typing import Any

from _harness import EchoArgs, echo_text

from steerloop.llm.chunks import StreamChunk
from steerloop.testing import text_response, tool_call_response, tool_calls_response

NAME = "floor (bare asyncio)"


def script(steps: int) -> list[list[StreamChunk]]:
    return [tool_call_response(f"c{i}", "echo", {"x": i}) for i in range(steps)] + [
        text_response("done")
    ]


async def _model(history: list[Any], response: list[StreamChunk]) -> AsyncIterator[StreamChunk]:
    for chunk in response:
        yield chunk


async def _echo(args: EchoArgs) -> str:
    return await echo_text(args.x)


async def _loop(responses: list[list[StreamChunk]], tools: dict[str, Any]) -> None:
    history: list[Any] = [("user", "go")]
    for response in responses:
        calls: list[tuple[str, str, str]] = []
        text: list[str] = []
        async for chunk in _model(history, response):
            kind = chunk.kind
            if kind == "text-delta":
                text.append(chunk.text)  # type: ignore[union-attr]
            elif kind == "tool-call-delta":
                calls.append((chunk.id, chunk.name or "", chunk.arguments_delta))  # type: ignore[union-attr]
        history.append(("assistant", "".join(text), calls))
        if len(calls) == 1:
            call_id, name, raw = calls[0]
            results = [await tools[name](EchoArgs.model_validate(json.loads(raw)))]
        else:
            results = await asyncio.gather(
                *(tools[name](EchoArgs.model_validate(json.loads(raw))) for _, name, raw in calls)
            )
        for (call_id, _, _), result in zip(calls, results, strict=True):
            history.append(("tool", call_id, result))


async def s1(steps: int) -> float:
    responses = script(steps)
    start = time.perf_counter()
    await _loop(responses, {"echo": _echo})
    return (time.perf_counter() - start) / len(responses)


async def s2(calls: int, delay: float) -> float:
    async def sleepy(args: Any) -> str:
        await asyncio.sleep(delay)
        return "ok"

    responses = [
        tool_calls_response([(f"c{i}", "sleepy", {"x": i}) for i in range(calls)]),
        text_response("done"),
    ]
    start = time.perf_counter()
    await _loop(responses, {"sleepy": sleepy})
    return time.perf_counter() - start


async def s3(agents: int, steps: int) -> float:
    scripts = [script(steps) for _ in range(agents)]
    start = time.perf_counter()
    await asyncio.gather(*(_loop(s, {"echo": _echo}) for s in scripts))
    return agents * (steps + 1) / (time.perf_counter() - start)
