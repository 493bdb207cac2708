"""pydantic-ai: ``FunctionModel`` (an async function, so no thread hop) as the fake model,
a ``tool_plain`` async function as ``echo``; ``Agent.run`` (non-streaming)."""

from __future__ import annotations

import asyncio
import time

from _harness import echo_text
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.usage import UsageLimits

NAME = "pydantic-ai"
UNLIMITED = UsageLimits(request_limit=None)


def _model(steps: int, calls: int = 1) -> FunctionModel:
    """Request ``i`` < ``steps`` asks for ``calls`` echo calls; then it answers ``done``."""
    counter = [0]

    async def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        i = counter[0]
        counter[0] = i + 1
        if i >= steps:
            return ModelResponse(parts=[TextPart("done")])
        return ModelResponse(
            parts=[
                ToolCallPart(
                    tool_name=info.function_tools[0].name,
                    args=f'{{"x": {i}}}',
                    tool_call_id=f"c{i}_{k}",
                )
                for k in range(calls)
            ]
        )

    return FunctionModel(respond)


echo_agent: Agent[None, str] = Agent()


@echo_agent.tool_plain
async def echo(x: int) -> str:
    return await echo_text(x)


def _sleepy_agent(delay: float) -> Agent[None, str]:
    agent: Agent[None, str] = Agent()

    @agent.tool_plain
    async def sleepy(x: int) -> str:
        await asyncio.sleep(delay)
        return "ok"

    return agent


async def s1(steps: int) -> float:
    model = _model(steps)
    start = time.perf_counter()
    await echo_agent.run("go", model=model, usage_limits=UNLIMITED)
    return (time.perf_counter() - start) / (steps + 1)


async def s2(calls: int, delay: float) -> float:
    agent = _sleepy_agent(delay)
    model = _model(1, calls)
    start = time.perf_counter()
    await agent.run("go", model=model, usage_limits=UNLIMITED)
    return time.perf_counter() - start


async def s3(agents: int, steps: int) -> float:
    models = [_model(steps) for _ in range(agents)]
    start = time.perf_counter()
    await asyncio.gather(*(echo_agent.run("go", model=m, usage_limits=UNLIMITED) for m in models))
    return agents * (steps + 1) / (time.perf_counter() - start)
