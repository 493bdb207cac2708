"""openai-agents: a custom ``Model`` (``get_response``) as the fake model, a
``function_tool`` as ``echo``; ``Runner.run`` (non-streaming) with tracing disabled."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

from _harness import echo_text
from agents import Agent, Model, ModelResponse, RunConfig, Runner, Usage, function_tool
from openai.types.responses import (
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
)

NAME = "openai-agents"
RUN_CONFIG = RunConfig(tracing_disabled=True)


class FakeModel(Model):
    """Request ``i`` < ``steps`` asks for ``calls`` tool calls; then it answers ``done``."""

    def __init__(self, steps: int, tool: str = "echo", calls: int = 1) -> None:
        self.steps = steps
        self.tool = tool
        self.calls = calls
        self.count = 0

    async def get_response(self, *args: Any, **kwargs: Any) -> ModelResponse:
        i = self.count
        self.count = i + 1
        output: list[Any]
        if i >= self.steps:
            output = [
                ResponseOutputMessage(
                    id=f"m{i}",
                    content=[ResponseOutputText(text="done", type="output_text", annotations=[])],
                    role="assistant",
                    status="completed",
                    type="message",
                )
            ]
        else:
            output = [
                ResponseFunctionToolCall(
                    arguments=f'{{"x": {i}}}',
                    call_id=f"c{i}_{k}",
                    name=self.tool,
                    type="function_call",
                    id=f"fc{i}_{k}",
                )
                for k in range(self.calls)
            ]
        return ModelResponse(output=output, usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        raise NotImplementedError


@function_tool
async def echo(x: int) -> str:
    """Echo x."""
    return await echo_text(x)


ECHO_AGENT: Agent[Any] = Agent(name="bench", instructions="", tools=[echo])
MAX_TURNS = 1_000_000


async def s1(steps: int) -> float:
    agent = ECHO_AGENT.clone(model=FakeModel(steps))
    start = time.perf_counter()
    await Runner.run(agent, "go", max_turns=MAX_TURNS, run_config=RUN_CONFIG)
    return (time.perf_counter() - start) / (steps + 1)


async def s2(calls: int, delay: float) -> float:
    @function_tool
    async def sleepy(x: int) -> str:
        """Sleep."""
        await asyncio.sleep(delay)
        return "ok"

    agent: Agent[Any] = Agent(
        name="bench", instructions="", tools=[sleepy], model=FakeModel(1, "sleepy", calls)
    )
    start = time.perf_counter()
    await Runner.run(agent, "go", max_turns=MAX_TURNS, run_config=RUN_CONFIG)
    return time.perf_counter() - start


async def s3(agents: int, steps: int) -> float:
    clones = [ECHO_AGENT.clone(model=FakeModel(steps)) for _ in range(agents)]
    start = time.perf_counter()
    await asyncio.gather(
        *(Runner.run(a, "go", max_turns=MAX_TURNS, run_config=RUN_CONFIG) for a in clones)
    )
    return agents * (steps + 1) / (time.perf_counter() - start)
