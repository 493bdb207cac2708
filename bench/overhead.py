"""Per-step overhead of the loop against a bare asyncio loop doing the same work.

Run: ``python bench/overhead.py [--steps 2000] [--repeats 5]``. Prints ratios measured in
this run, never absolute targets: (1) steerloop's time per step (one scripted tool call of
an async ``echo`` tool, then the next request) divided by the floor's, where the floor is a
hand-written asyncio loop streaming the same chunks, parsing the same arguments and
awaiting the same tool; (2) the wall time of one step with 16 parallel 50 ms tools as a
ratio to 50 ms; (3) the same per-step time when the turn is awaited with ``agent.run`` (its
watch listens, owner-scoped, to every ``session/event``), and the bus's cost per
``session/event`` emission while two owner-scoped listeners (one of another agent) wait.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import statistics
import time
from collections.abc import AsyncIterator
from typing import Any

from pydantic import BaseModel

from steerloop import AgentOptions, Runtime, define_tool, user_message
from steerloop.llm.chunks import StreamChunk
from steerloop.testing import (
    ScriptedAdapter,
    text_response,
    tool_call_response,
    tool_calls_response,
)


class EchoArgs(BaseModel):
    x: int


async def echo(args: EchoArgs, _exec: Any) -> str:
    await asyncio.sleep(0)
    return f"echo {args.x}"


def script_for(steps: int) -> list[Any]:
    return [tool_call_response(f"c{i}", "echo", {"x": i}) for i in range(steps)] + [
        text_response("done")
    ]


async def run_steerloop(steps: int, via_run: bool = False) -> float:
    rt = await Runtime.open()
    rt.llm.register_adapter(["mock"], ScriptedAdapter(script_for(steps)))
    rt.tools.register(
        define_tool(
            name="echo",
            description="echo",
            parameters=EchoArgs,
            execute=echo,
            concurrency_safe=True,
        )
    )
    handle = await rt.agents.create(
        session_id="bench", agent_options=AgentOptions(provider="mock", model="m")
    )
    start = time.perf_counter()
    if via_run:
        await handle.agent.run(user_message("go"))
    else:
        handle.agent.followup(user_message("go"))
        await handle.agent.when_idle()
    elapsed = time.perf_counter() - start
    await rt.close()
    return elapsed / (steps + 1)


def scoped_emit_cost(events: int) -> float:
    """Seconds per ``session/event`` emission with two owner-scoped listeners registered."""
    from types import SimpleNamespace

    from steerloop._hooks import HookBus
    from steerloop.session._session import SessionEventPayload

    bus = HookBus()
    seen: list[object] = []
    bus.on("session/event", seen.append, owner="a")
    bus.on("session/event", seen.append, owner="b")
    session: Any = SimpleNamespace(id="a")
    event: Any = None
    payload = SessionEventPayload(session, event)
    emit = bus.emit
    start = time.perf_counter()
    for _ in range(events):
        emit("session/event", payload)
    elapsed = time.perf_counter() - start
    assert len(seen) == events
    return elapsed / events


async def _fake_model(chunks: list[StreamChunk]) -> AsyncIterator[StreamChunk]:
    for chunk in chunks:
        yield chunk


async def run_floor(steps: int) -> float:
    """The same model + tool work in a minimal loop: stream, collect, parse, call, record."""
    script = script_for(steps)
    history: list[Any] = [("user", "go")]
    start = time.perf_counter()
    for response in script:
        calls: list[tuple[str, str, str]] = []
        text: list[str] = []
        async for chunk in _fake_model(response):
            kind = chunk.kind
            if kind == "text-delta":
                text.append(chunk.text)  # type: ignore[union-attr]
            elif kind == "tool-call-delta":
                calls.append((chunk.id, chunk.name or "", chunk.arguments_delta))  # type: ignore[union-attr]
        history.append(("assistant", "".join(text), calls))
        for call_id, _name, raw in calls:
            result = await echo(EchoArgs.model_validate(json.loads(raw)), None)
            history.append(("tool", call_id, result))
    return (time.perf_counter() - start) / len(script)


async def run_parallel(n: int, delay: float) -> float:
    async def sleepy(args: Any, _exec: Any) -> str:
        await asyncio.sleep(delay)
        return "ok"

    rt = await Runtime.open(max_parallel_tool_calls=n)
    rt.llm.register_adapter(
        ["mock"],
        ScriptedAdapter(
            [
                tool_calls_response([(f"c{i}", "sleepy", {}) for i in range(n)]),
                text_response("done"),
            ]
        ),
    )
    rt.tools.register(
        define_tool(
            name="sleepy",
            description="sleep",
            parameters={"type": "object"},
            execute=sleepy,
            concurrency_safe=True,
        )
    )
    handle = await rt.agents.create(
        session_id="par", agent_options=AgentOptions(provider="mock", model="m")
    )
    start = time.perf_counter()
    handle.agent.followup(user_message("go"))
    await handle.agent.when_idle()
    elapsed = time.perf_counter() - start
    await rt.close()
    return elapsed


def summary(values: list[float]) -> str:
    return f"min {min(values):.3g} · median {statistics.median(values):.3g} · max {max(values):.3g}"


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    print(
        f"python {platform.python_version()} · store: in-memory · steps per run: {args.steps} "
        f"· repeats: {args.repeats}"
    )
    ours, floor = [], []
    for _ in range(args.repeats):
        floor.append(await run_floor(args.steps))
        ours.append(await run_steerloop(args.steps))
    ratios = [o / f for o, f in zip(ours, floor, strict=True)]
    print(f"per step, steerloop (µs): {summary([o * 1e6 for o in ours])}")
    print(f"per step, bare asyncio floor (µs): {summary([f * 1e6 for f in floor])}")
    print(f"overhead ratio steerloop/floor: {summary(ratios)}")
    via_run = [await run_steerloop(args.steps, via_run=True) for _ in range(args.repeats)]
    print(f"per step, awaited with agent.run (µs): {summary([v * 1e6 for v in via_run])}")
    emits = [scoped_emit_cost(100_000) for _ in range(args.repeats)]
    print(
        "per session/event emit, 2 owner-scoped listeners (ns): "
        f"{summary([e * 1e9 for e in emits])}"
    )
    walls = [await run_parallel(16, 0.05) for _ in range(args.repeats)]
    print(f"16 parallel 50 ms tools (pool 16), wall / 50 ms: {summary([w / 0.05 for w in walls])}")


if __name__ == "__main__":
    asyncio.run(main())
