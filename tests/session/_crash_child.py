"""A child process for ``test_crash.py``: runs a scripted agent on a SQLite file until the
parent kills it with SIGKILL.

Usage: ``python _crash_child.py MODE DB_PATH``. Every line it prints is flushed at once
and names what is durable at that moment: ``<word> <n> <seq> <digest>`` where every event
up to ``seq`` was acknowledged by ``await session.flush()`` and ``digest`` is the sha256 of
their JSON (see ``digest``). Modes:

* ``tool``: one finished turn, then a turn whose model asks for two exclusive calls
  ``c1``/``c2``; the body of ``c1`` flushes, prints ``tool-running`` and waits forever.
* ``stream``: one finished turn, then a turn whose model stream delivers a few chunks and
  hangs; the script entry flushes and prints ``streaming`` first.
* ``turns``: turn after turn (two parallel tool calls, then an answer), printing
  ``flushed <n>`` after each turn's flush, until killed.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import random
import sys
from collections.abc import Sequence
from typing import Any

from steerloop import AgentOptions, Runtime, define_tool, user_message
from steerloop.llm.chunks import BlockStart, TextDelta
from steerloop.session import SessionEvent
from steerloop.testing import ScriptedAdapter, hang_after, text_response, tool_calls_response

SESSION = "crash"
OPTIONS = AgentOptions(provider="mock", model="m")


def digest(events: Sequence[SessionEvent]) -> str:
    """The sha256 of the events' JSON forms, one canonical line each."""
    h = hashlib.sha256()
    for event in events:
        h.update(json.dumps(event.to_json(), sort_keys=True, separators=(",", ":")).encode())
        h.update(b"\n")
    return h.hexdigest()


async def report(agent: Any, word: str, n: int) -> None:
    await agent.session.flush()
    events = list(agent.session.events)
    print(f"{word} {n} {len(events)} {digest(events)}", flush=True)


async def main(mode: str, path: str) -> None:
    rt = await Runtime.open(store=f"sqlite:///{path}")
    adapter = ScriptedAdapter()
    rt.llm.register_adapter(["mock"], adapter)
    handle = await rt.agents.create(session_id=SESSION, agent_options=OPTIONS)
    agent = handle.agent
    rng = random.Random(os.getpid())

    async def slow(args: Any, exec: Any) -> str:
        if exec.call_id == "c1":
            await report(agent, "tool-running", 0)
            await asyncio.Event().wait()
        return "slow done"

    async def fast(args: Any, exec: Any) -> str:
        await asyncio.sleep(rng.uniform(0, 0.004))  # spreads the parent's kill points
        return f"fast {exec.call_id}"

    rt.tools.register(
        define_tool(name="slow", description="slow", parameters={"type": "object"}, execute=slow)
    )
    rt.tools.register(
        define_tool(
            name="fast",
            description="fast",
            parameters={"type": "object"},
            execute=fast,
            concurrency_safe=True,
        )
    )

    if mode in ("tool", "stream"):
        adapter.add(text_response("warm-up"))
        agent.followup(user_message("first"))
        await agent.when_idle()
        if mode == "tool":
            adapter.add(tool_calls_response([("c1", "slow", {}), ("c2", "slow", {})]))
        else:

            async def stream_entry(request: Any) -> Any:
                await report(agent, "streaming", 0)
                return hang_after(
                    [BlockStart(index=0, block_type="text"), TextDelta(index=0, text="partial")]
                )

            adapter.add(stream_entry)
        agent.followup(user_message("second"))
        await asyncio.Event().wait()  # killed while the tool runs / the stream hangs

    assert mode == "turns", mode
    for n in range(1, 100_000):
        adapter.add(
            tool_calls_response([(f"a{n}", "fast", {"n": n}), (f"b{n}", "fast", {})]),
            text_response(f"answer {n} " + "x" * (n % 7) * 100),
        )
        agent.followup(user_message(f"prompt {n}"))
        await agent.when_idle()
        await report(agent, "flushed", n)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2]))
