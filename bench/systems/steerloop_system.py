"""steerloop: ``ScriptedAdapter`` as the fake model, ``define_tool`` for ``echo``."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from _harness import EchoArgs, echo_text

from steerloop import AgentOptions, Runtime, define_tool, user_message
from steerloop.testing import (
    ScriptedAdapter,
    text_response,
    tool_call_response,
    tool_calls_response,
)

NAME = "steerloop"
OPTIONS = AgentOptions(provider="mock", model="m")


async def _echo(args: EchoArgs, _exec: Any) -> str:
    return await echo_text(args.x)


ECHO = define_tool(
    name="echo", description="echo", parameters=EchoArgs, execute=_echo, concurrency_safe=True
)


def script(steps: int) -> list[Any]:
    return [tool_call_response(f"c{i}", "echo", {"x": i}) for i in range(steps)] + [
        text_response("done")
    ]


async def open_runtime(store: str | None = None, **kwargs: Any) -> Runtime:
    rt = await Runtime.open(store=store, **kwargs)
    rt.tools.register(ECHO)
    return rt


async def s1(steps: int, store: str | None = None, turns: int = 1) -> float:
    """Seconds per step; with ``turns`` > 1 the steps are split into that many turns, each
    followed by ``await session.flush()`` (a durable acknowledgement per turn)."""
    rt = await open_runtime(store)
    per_turn = steps // turns
    adapter = ScriptedAdapter()
    for t in range(turns):
        adapter.add(
            *[tool_call_response(f"c{t}_{i}", "echo", {"x": i}) for i in range(per_turn)],
            text_response("done"),
        )
    rt.llm.register_adapter(["mock"], adapter)
    handle = await rt.agents.create(session_id="s1", agent_options=OPTIONS)
    agent = handle.agent
    await agent.session.flush()
    start = time.perf_counter()
    for _ in range(turns):
        agent.followup(user_message("go"))
        await agent.when_idle()
        await agent.session.flush()
    elapsed = time.perf_counter() - start
    await rt.close()
    return elapsed / (turns * (per_turn + 1))


async def s2(calls: int, delay: float) -> float:
    async def sleepy(args: Any, _exec: Any) -> str:
        await asyncio.sleep(delay)
        return "ok"

    rt = await Runtime.open(max_parallel_tool_calls=calls)
    rt.llm.register_adapter(
        ["mock"],
        ScriptedAdapter(
            [
                tool_calls_response([(f"c{i}", "sleepy", {"x": i}) for i in range(calls)]),
                text_response("done"),
            ]
        ),
    )
    rt.tools.register(
        define_tool(
            name="sleepy",
            description="sleep",
            parameters=EchoArgs,
            execute=sleepy,
            concurrency_safe=True,
        )
    )
    handle = await rt.agents.create(session_id="s2", agent_options=OPTIONS)
    start = time.perf_counter()
    handle.agent.followup(user_message("go"))
    await handle.agent.when_idle()
    elapsed = time.perf_counter() - start
    await rt.close()
    return elapsed


async def s3(agents: int, steps: int) -> float:
    rt = await open_runtime()
    handles = []
    for n in range(agents):
        adapter = ScriptedAdapter(script(steps))
        rt.llm.register_adapter([f"mock{n}"], adapter)
        handles.append(
            await rt.agents.create(
                session_id=f"s3-{n}", agent_options=AgentOptions(provider=f"mock{n}", model="m")
            )
        )
    start = time.perf_counter()
    for h in handles:
        h.agent.followup(user_message("go"))
    await asyncio.gather(*(h.agent.when_idle() for h in handles))
    elapsed = time.perf_counter() - start
    await rt.close()
    return agents * (steps + 1) / elapsed
