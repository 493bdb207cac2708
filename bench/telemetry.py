"""Cost of ``steerloop.telemetry`` on the S1 workload, three ways in the same run.

Run: ``python bench/telemetry.py [--steps 2000] [--repeats 7]``. One agent, ``steps`` steps
of one async ``echo`` call each plus a final answer, in-memory store (S1). Modes, run
interleaved so drift hits all alike: ``none`` (no telemetry), ``installed`` (``install_otel``
with no SDK configured: the API's no-op providers) and ``sdk`` (an SDK ``TracerProvider``
with a ``SimpleSpanProcessor`` into an ``InMemorySpanExporter`` and a ``MeterProvider`` with
an ``InMemoryMetricReader``). Prints µs per step, wall clock and this process's CPU time
(the latter is steadier on a shared machine), and each mode's median ratio to ``none``.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import platform
import statistics
import time
from typing import Any

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from pydantic import BaseModel

from steerloop import AgentOptions, Runtime, define_tool, user_message
from steerloop.telemetry import install_otel
from steerloop.testing import ScriptedAdapter, text_response, tool_call_response


class EchoArgs(BaseModel):
    x: int


async def _echo(args: EchoArgs, _exec: Any) -> str:
    await asyncio.sleep(0)
    return f"echo {args.x}"


ECHO = define_tool(
    name="echo", description="echo", parameters=EchoArgs, execute=_echo, concurrency_safe=True
)


async def run(steps: int, mode: str) -> tuple[float, float]:
    """Wall and CPU seconds per step of one S1 run with telemetry ``mode``."""
    rt = await Runtime.open()
    rt.tools.register(ECHO)
    script = [tool_call_response(f"c{i}", "echo", {"x": i}) for i in range(steps)]
    rt.llm.register_adapter(["mock"], ScriptedAdapter([*script, text_response("done")]))
    exporter = InMemorySpanExporter()
    if mode == "installed":
        install_otel(rt)
    elif mode == "sdk":
        tracer_provider = TracerProvider()
        tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
        meter_provider = MeterProvider(metric_readers=[InMemoryMetricReader()])
        install_otel(rt, tracer_provider=tracer_provider, meter_provider=meter_provider)
    handle = await rt.agents.create(
        session_id="s1", agent_options=AgentOptions(provider="mock", model="m")
    )
    gc.collect()
    start, cpu = time.perf_counter(), time.process_time()
    handle.agent.followup(user_message("go"))
    await handle.agent.when_idle()
    elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu
    await rt.close()
    if mode == "sdk":
        # invoke_agent + (steps + 1) chat spans + steps execute_tool spans
        assert len(exporter.get_finished_spans()) == 2 * steps + 2
    return elapsed / (steps + 1), cpu / (steps + 1)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    print(
        f"python {platform.python_version()} · S1: {args.steps} steps × 1 echo call + final "
        f"answer, in-memory store · repeats: {args.repeats} (modes interleaved)"
    )
    modes = ("none", "installed", "sdk")
    wall: dict[str, list[float]] = {m: [] for m in modes}
    cpu: dict[str, list[float]] = {m: [] for m in modes}
    await run(200, "sdk")  # warm-up: imports, caches
    for _ in range(args.repeats):
        for mode in modes:
            w, c = await run(args.steps, mode)
            wall[mode].append(w * 1e6)
            cpu[mode].append(c * 1e6)
    for label, results in (("wall", wall), ("cpu", cpu)):
        base = statistics.median(results["none"])
        for mode in modes:
            values = results[mode]
            median = statistics.median(values)
            print(
                f"{label:>4} {mode:>9}: µs/step min {min(values):.1f} · median {median:.1f} · "
                f"max {max(values):.1f} · median / none {median / base:.3f}"
            )


if __name__ == "__main__":
    asyncio.run(main())
