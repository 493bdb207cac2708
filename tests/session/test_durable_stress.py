"""Durable stress: 40 agents share one SQLite store while a seeded driver steers, injects,
follows up and cancels them; afterwards every stored log reloads equal to the live one.

This joins the loop's concurrency with the store's group commit: whatever interleaving the
writer thread saw, each stored log must be the live log event for event (G-1, G-7), well
formed (``tests/logcheck.py``), and resumable into the same model-visible history.
"""

from __future__ import annotations

import asyncio
import random
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from steerloop import AgentOptions, CancelCause, Runtime, define_tool, user_message
from steerloop.llm import GenerateRequest
from steerloop.testing import ScriptedAdapter, text_response, tool_calls_response

from ..logcheck import log_problems

AGENTS = 40
STEPS = 8
SEED = 7


class Args(BaseModel):
    n: int


async def _tick(args: Args, exec: Any) -> str:
    for _ in range(args.n):
        if exec.signal.aborted:
            return "stopped"
        await asyncio.sleep(0)
    return f"tick {args.n}"


def _model(rng: random.Random, budget: list[int]) -> Any:
    def reply(request: GenerateRequest) -> Any:
        if budget[0] <= 0:
            return text_response("done")
        budget[0] -= 1
        calls = [
            (f"c{budget[0]}-{k}", "tick", {"n": rng.randint(0, 3)})
            for k in range(rng.randint(1, 3))
        ]
        return tool_calls_response(calls)

    return reply


async def _drive(agent: Any, rng: random.Random, budget: list[int]) -> None:
    agent.followup(user_message("start"))
    for round_ in range(6):
        for _ in range(rng.randint(0, 12)):
            await asyncio.sleep(0)
        action = rng.random()
        if action < 0.25:
            agent.steer(user_message(f"steer {round_}"))
        elif action < 0.4:
            agent.inject(user_message(f"context {round_}"))
        elif action < 0.55:
            agent.cancel(CancelCause.user(), keep_inbox=rng.random() < 0.5)
        else:
            agent.followup(user_message(f"more {round_}"))
    await agent.when_idle()
    if agent.inbox.has_pending:
        agent.followup(user_message("finish"))
        await agent.when_idle()


async def test_concurrent_agents_on_one_sqlite_store_reload_equal(tmp_path: Path) -> None:
    """G-1, G-7, C7.2-12: 40 agents with random steers/cancels write through one SQLite store
    (group commit); every stored log equals its live log, is well formed, and resumes into
    the same ``derive_messages()``."""
    url = f"sqlite:///{tmp_path / 'stress.db'}"
    rng = random.Random(SEED)
    live: dict[str, tuple[list[dict[str, Any]], list[Any]]] = {}
    async with await Runtime.open(store=url, max_parallel_tool_calls=3) as rt:
        rt.tools.register(
            define_tool(
                name="tick", description="", parameters=Args, execute=_tick, concurrency_safe=True
            )
        )
        agents = []
        budgets = []
        for i in range(AGENTS):
            budget = [STEPS]
            adapter = ScriptedAdapter([_model(random.Random(SEED + i), budget)] * (STEPS * 4))
            rt.llm.register_adapter([f"p{i}"], adapter)
            handle = await rt.agents.create(
                session_id=f"s{i}", agent_options=AgentOptions(provider=f"p{i}", model="m")
            )
            agents.append(handle.agent)
            budgets.append(budget)
        drivers = [
            _drive(agent, random.Random(rng.random()), budget)
            for agent, budget in zip(agents, budgets, strict=True)
        ]
        await asyncio.wait_for(asyncio.gather(*drivers), 60)
        for agent in agents:
            await agent.session.flush()
            assert log_problems(agent.session) == [], agent.id
            live[agent.id] = (
                [event.to_json() for event in agent.session.events],
                agent.session.derive_messages(),
            )
        store = rt.sessions.persistence
        assert store is not None
        for session_id, (events, _messages) in live.items():
            stored = await store.load(session_id)
            assert [event.to_json() for event in stored] == events, session_id

    kinds = {
        e["data"]["reason"]["kind"]
        for events, _ in live.values()
        for e in events
        if e["type"] == "turn/end"
    }
    assert {"completed", "aborted"} <= kinds  # the run really mixed outcomes
    assert sum(len(events) for events, _ in live.values()) > 2000

    async with await Runtime.open(store=url) as rt:
        rt.llm.register_adapter(["p"], ScriptedAdapter())
        for session_id, (events, messages) in live.items():
            handle = await rt.agents.resume(
                resume_session_id=session_id, agent_options=AgentOptions(provider="p", model="m")
            )
            resumed = handle.agent.session
            assert [e.to_json() for e in resumed.events[: len(events)]] == events
            assert [e.type for e in resumed.events[len(events) :]] == ["session/end-seed"]
            assert resumed.derive_messages() == messages
            await handle.dispose()
