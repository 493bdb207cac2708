"""A child process for ``test_effects_crash.py``'s SIGSTOP scenario: agents on a PostgreSQL
store calling an exclusive tool step after step, until their leases are lost.

Usage: ``python _effects_stop_child.py STORE_URL DIR SESSIONS``. It runs ``SESSIONS``
agents (``stop-0``, ``stop-1``, …) at once; each model request asks for one more call of
``effect``, whose body first appends ``<time.time()> <session> <call id>`` to
``DIR/starts.log`` (the moment the tool started acting), then takes a few random
milliseconds. Once every agent is idle (its turn ended: a refused fence stops it) it prints
``idle`` and waits to be killed.
"""

from __future__ import annotations

import asyncio
import os
import random
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from steerloop import AgentOptions, Runtime, define_tool, user_message
from steerloop.llm._types import GenerateRequest
from steerloop.testing import ScriptedAdapter, tool_call_response
from steerloop.tools import ToolExec

OPTIONS = AgentOptions(provider="mock", model="m")
STEPS = 100_000


async def main(url: str, directory: str, sessions: int) -> None:
    starts = Path(directory) / "starts.log"
    rng = random.Random(os.getpid())

    async def effect(args: Any, exec: ToolExec) -> str:
        line = f"{time.time():.6f} {exec.agent.id} {exec.call_id}\n"
        fd = os.open(starts, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, line.encode())
        finally:
            os.close(fd)
        await asyncio.sleep(rng.uniform(0, 0.003))
        return "acted"

    rt = await Runtime.open(store=url)
    rt.tools.register(
        define_tool(name="effect", description="changes the world", parameters={"type": "object"},
                    execute=effect)
    )  # fmt: skip
    agents = []
    for n in range(sessions):
        adapter = ScriptedAdapter()

        def ask(request: GenerateRequest, adapter: ScriptedAdapter = adapter) -> Any:
            adapter.requests.clear()  # nobody reads them; each holds the whole history
            return tool_call_response(f"c{uuid.uuid4().hex[:8]}", "effect", {})

        adapter.add(*[ask] * STEPS)
        rt.llm.register_adapter([f"mock{n}"], adapter)
        options = AgentOptions(provider=f"mock{n}", model="m")
        agents.append((await rt.agents.create(session_id=f"stop-{n}", agent_options=options)).agent)
    for agent in agents:
        agent.followup(user_message("act"))
    await asyncio.gather(*(agent.when_idle() for agent in agents))
    print("idle", flush=True)
    await asyncio.Event().wait()  # killed here


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3])))
