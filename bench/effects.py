"""The cost of write-ahead intent: ``python bench/effects.py [--repeats N] [--steps N]
[--postgres URL] [--dir DIR]``.

S1's work (one agent, ``--steps`` model requests each asking for one call of an async
``echo`` tool, then a final answer), but ``echo`` is side-effecting: not concurrency-safe,
so each step's call starts only after a fence made its ``tool/call`` durable (on SQLite a
``synchronous=FULL`` commit, on PostgreSQL a fenced commit of the lease). Measured against
the same run with ``durable_dispatch=False`` (the call starts at once, the group commit
stores it later), per store, ratios per repeat. The in-memory rows show what the gate
costs where nothing can be made durable, beside S1's own (safe) ``echo``.

Every run opens a fresh store (a new SQLite file in ``--dir``, default a temporary
directory; a throwaway PostgreSQL schema, dropped at the end) and flushes once at the end
of the turn, so both variants end with everything durable.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import tempfile
import time
import uuid
from typing import Any

from _harness import EchoArgs, Scenario, echo_text, environment, print_table, run_repeats

from steerloop import AgentOptions, Runtime, define_tool, user_message
from steerloop.testing import ScriptedAdapter, text_response, tool_call_response

OPTIONS = AgentOptions(provider="mock", model="m")
POSTGRES_URL = "postgresql://postgres@127.0.0.1:5432/test"


async def _echo(args: EchoArgs, _exec: Any) -> str:
    return await echo_text(args.x)


def echo_tool(*, safe: bool, durable: bool | None) -> Any:
    return define_tool(
        name="echo",
        description="echo",
        parameters=EchoArgs,
        execute=_echo,
        concurrency_safe=safe,
        durable_dispatch=durable,
    )


async def per_step(store: str | None, steps: int, *, safe: bool, durable: bool | None) -> float:
    """Seconds per step of one turn of ``steps`` echo calls and a final answer."""
    rt = await Runtime.open(store=store)
    try:
        rt.tools.register(echo_tool(safe=safe, durable=durable))
        adapter = ScriptedAdapter(
            [tool_call_response(f"c{i}", "echo", {"x": i}) for i in range(steps)]
            + [text_response("done")]
        )
        rt.llm.register_adapter(["mock"], adapter)
        agent = (await rt.agents.create(session_id="effects", agent_options=OPTIONS)).agent
        await agent.session.flush()
        start = time.perf_counter()
        agent.followup(user_message("go"))
        await agent.when_idle()
        await agent.session.flush()
        elapsed = time.perf_counter() - start
    finally:
        await rt.close()
    return elapsed / (steps + 1)


def store_scenario(name: str, make_url: Any, steps: int, config: str) -> Scenario:
    async def unfenced() -> float:
        return await per_step(make_url(), steps, safe=False, durable=False) * 1e6

    async def fenced() -> float:
        return await per_step(make_url(), steps, safe=False, durable=None) * 1e6

    return Scenario(
        name=name,
        unit="µs/step",
        config=config,
        systems={"no fence (durable_dispatch=False)": unfenced, "fence per step": fenced},
        baseline="no fence (durable_dispatch=False)",
        ratio_of="× no fence",
    )


def memory_scenario(steps: int) -> Scenario:
    async def s1() -> float:
        return await per_step(None, steps, safe=True, durable=None) * 1e6

    async def unfenced() -> float:
        return await per_step(None, steps, safe=False, durable=False) * 1e6

    async def fenced() -> float:
        return await per_step(None, steps, safe=False, durable=None) * 1e6

    return Scenario(
        name="effects, in-memory",
        unit="µs/step",
        config=f"1 agent, {steps} steps × 1 echo call + final answer, no store",
        systems={
            "S1 (safe echo)": s1,
            "exclusive echo, no fence": unfenced,
            "exclusive echo, gate": fenced,
        },
        baseline="exclusive echo, no fence",
        ratio_of="× no fence",
    )


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--dir", default=None)
    parser.add_argument("--postgres", default=POSTGRES_URL, help="'' to leave PostgreSQL out")
    args = parser.parse_args()
    print(environment())
    directory = args.dir or tempfile.mkdtemp(prefix="steerloop-bench-effects-")
    files = iter(range(1_000_000))

    def sqlite_url() -> str:
        return f"sqlite:///{os.path.join(directory, f'effects-{next(files)}.db')}"

    schemas: list[str] = []

    def postgres_url() -> str:
        schema = f"steerloop_bench_effects_{uuid.uuid4().hex[:10]}"
        schemas.append(schema)
        return f"{args.postgres}?schema={schema}"

    steps = args.steps
    rows = await run_repeats(memory_scenario(steps), args.repeats)
    rows += await run_repeats(
        store_scenario(
            "effects, SQLite",
            sqlite_url,
            steps,
            f"the same, SQLite file in {directory} (WAL; the fence is a synchronous=FULL commit)",
        ),
        args.repeats,
    )
    if args.postgres:
        try:
            rows += await run_repeats(
                store_scenario(
                    "effects, PostgreSQL",
                    postgres_url,
                    steps,
                    "the same, PostgreSQL on 127.0.0.1 (the fence is a fenced commit)",
                ),
                args.repeats,
            )
        finally:
            await drop(args.postgres, schemas)
    print_table(rows)


async def drop(url: str, schemas: list[str]) -> None:
    import asyncpg

    conn = await asyncpg.connect(url)
    try:
        for schema in schemas:
            await conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
    finally:
        await conn.close()


if __name__ == "__main__":
    asyncio.run(main())
