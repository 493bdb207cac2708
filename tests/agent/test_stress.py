"""Stress: 200 agents × 20 tool steps in one event loop, with random steers and cancels.

Every agent has its own ``ScriptedAdapter`` (provider ``p<i>``) whose script entries are one
callable: it answers with 1-4 parallel tool calls while the agent's budget lasts, then with
text. A seeded driver per agent steers, injects, follows up and cancels at random points
(yielding a random number of loop iterations between actions) and follows up again whenever
the agent went idle with budget left. When everything has settled, every log must be well
formed (``tests/logcheck.py``).
"""

from __future__ import annotations

import asyncio
import random
from collections import Counter
from typing import Any

import pytest
from pydantic import BaseModel

from steerloop import AgentOptions, CancelCause, Runtime, define_tool, user_message
from steerloop.llm import GenerateRequest
from steerloop.testing import ScriptedAdapter, text_response, tool_calls_response

from ..logcheck import log_problems

AGENTS = 200
STEPS = 20
SEED = 20240607
# A hang guard, not a speed claim (speed belongs in bench/): generous for a loaded machine.
HANG_GUARD = 300.0

pytestmark = pytest.mark.timeout(600)


class TickArgs(BaseModel):
    n: int


async def _tick(args: TickArgs, exec: Any) -> str:
    for _ in range(args.n):
        await asyncio.sleep(0)
    return f"tick {args.n}"


async def _watch(args: TickArgs, exec: Any) -> str:
    """Yields ``n`` times unless the call's signal aborts first (then it stops early)."""
    for _ in range(args.n):
        if exec.signal.aborted:
            return "stopped"
        await asyncio.sleep(0)
    return "watched"


async def _defer(args: TickArgs, exec: Any) -> str:
    await asyncio.sleep(0)
    exec.defer_context(user_message(f"deferred from {exec.call_id}"))
    return "deferred"


async def _fail(args: TickArgs, exec: Any) -> str:
    await asyncio.sleep(0)
    raise RuntimeError("tool failed on purpose")


async def _exclusive(args: TickArgs, exec: Any) -> str:
    await asyncio.sleep(0)
    return "exclusive"


TOOLS = [
    define_tool(
        name="tick", description="yield n times", parameters=TickArgs, execute=_tick,
        concurrency_safe=True,
    ),
    define_tool(
        name="watch", description="yield until aborted", parameters=TickArgs, execute=_watch,
        concurrency_safe=True,
    ),
    define_tool(
        name="defer", description="defer context", parameters=TickArgs, execute=_defer,
        concurrency_safe=True,
    ),
    define_tool(
        name="fail", description="raise", parameters=TickArgs, execute=_fail,
        concurrency_safe=True,
    ),
    define_tool(name="exclusive", description="a barrier", parameters=TickArgs, execute=_exclusive),
]  # fmt: skip
# Mostly safe, parallel tools; now and then a failure, a deferral or an exclusive barrier.
TOOL_WEIGHTS = {"tick": 70, "watch": 15, "defer": 5, "fail": 5, "exclusive": 5}


class Model:
    """One agent's scripted model: tool calls while the budget lasts, then text."""

    def __init__(self, index: int, rng: random.Random) -> None:
        self.index = index
        self.rng = rng
        self.budget = STEPS
        self.calls = 0
        self.requests = 0

    def __call__(self, request: GenerateRequest) -> Any:
        self.requests += 1
        if self.budget <= 0:
            return self._respond(text_response(f"done {self.index}"))
        self.budget -= 1
        names = self.rng.choices(list(TOOL_WEIGHTS), weights=list(TOOL_WEIGHTS.values()), k=4)
        calls = []
        for name in names[: self.rng.randint(1, 4)]:
            self.calls += 1
            calls.append((f"a{self.index}-c{self.calls}", name, {"n": self.rng.randint(0, 3)}))
        text = "working" if self.rng.random() < 0.3 else None
        return self._respond(tool_calls_response(calls, text=text))

    def _respond(self, chunks: list[Any]) -> Any:
        # Now and then the model "thinks" for a few loop iterations, so cancels also land
        # while a request is in flight.
        if self.rng.random() < 0.3:
            return _later(chunks, self.rng.randint(1, 3))
        return chunks


async def _later(chunks: list[Any], turns: int) -> list[Any]:
    for _ in range(turns):
        await asyncio.sleep(0)
    return chunks


async def _drive(agent: Any, model: Model, rng: random.Random, stats: Counter[str]) -> None:
    """Random host actions until the model's budget is spent, then settle."""
    agent.followup(user_message(f"start {model.index}"))
    for i in range(10_000):
        if model.budget <= 0:
            break
        roll = rng.random()
        if roll < 0.10:
            agent.steer(user_message(f"steer {model.index}.{i}"))
            stats["steer"] += 1
        elif roll < 0.14:
            agent.inject(user_message(f"inject {model.index}.{i}"))
            stats["inject"] += 1
        elif roll < 0.17:
            agent.followup(user_message(f"followup {model.index}.{i}"))
            stats["followup"] += 1
        elif roll < 0.21:
            keep = rng.random() < 0.3
            cause = CancelCause.user() if rng.random() < 0.7 else CancelCause.hook("stress")
            agent.cancel(cause, keep_inbox=keep)
            stats["cancel"] += 1
        for _ in range(rng.randint(0, 12)):
            await asyncio.sleep(0)
        if agent.status == "idle" and model.budget > 0:
            agent.followup(user_message(f"again {model.index}.{i}"))
            stats["again"] += 1
    await agent.when_idle()


async def test_many_agents_with_steers_and_cancels_keep_their_logs_well_formed() -> None:
    """200 agents × 20 tool steps in one loop: every log stays well formed (turn/step
    balance C7.3-12 / EVENTS §1, tool pairing C7.9-12, model-order results C7.9-11, no
    double claim, provider-valid history C7.8-11)."""
    master = random.Random(SEED)
    rt = await Runtime.open(max_parallel_tool_calls=4)
    try:
        for tool in TOOLS:
            rt.tools.register(tool)
        agents: list[Any] = []
        models: list[Model] = []
        rngs: list[random.Random] = []
        for index in range(AGENTS):
            model = Model(index, random.Random(master.random()))
            rt.llm.register_adapter([f"p{index}"], ScriptedAdapter([model] * (STEPS * 20)))
            handle = await rt.agents.create(
                session_id=f"stress-{index}",
                agent_options=AgentOptions(provider=f"p{index}", model="m"),
            )
            agents.append(handle.agent)
            models.append(model)
            rngs.append(random.Random(master.random()))
        stats: Counter[str] = Counter()
        await asyncio.wait_for(
            asyncio.gather(
                *(_drive(a, m, r, stats) for a, m, r in zip(agents, models, rngs, strict=True))
            ),
            HANG_GUARD,
        )
        # A host action of the last round may have latched one more turn: settle everything.
        await asyncio.wait_for(asyncio.gather(*(a.when_idle() for a in agents)), HANG_GUARD)

        problems = [p for agent in agents for p in log_problems(agent.session)]
        assert problems == [], "\n".join(problems[:40])
        for agent, model in zip(agents, models, strict=True):
            assert model.budget == 0, f"{agent.id} never spent its budget"
            assert agent.status == "idle"
            steps = sum(e.type == "step/start" for e in agent.session.events)
            assert steps >= STEPS, f"{agent.id} ran only {steps} steps"

        totals = Counter(e.type for a in agents for e in a.session.events)
        ends = Counter(
            e.data.reason.kind for a in agents for e in a.session.events if e.type == "turn/end"
        )
        # The run really exercised what it claims to: parallel tools, steers, cancels.
        assert totals["tool/result"] >= AGENTS * STEPS
        assert stats["steer"] > 0 and stats["cancel"] > 0
        assert ends["aborted"] > 0 and ends["completed"] > 0
    finally:
        await asyncio.wait_for(rt.close(), HANG_GUARD)
