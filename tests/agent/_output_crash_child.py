"""A child process for ``test_output_resume.py``: a structured ``run`` on a SQLite file,
killed with SIGKILL in the middle of its turn.

Modes: ``retrying`` — the first answer was invalid, the retry message was claimed, and the
model hangs on the second request; ``recorded`` — the valid answer's ``turn/output`` is
written and a later ``agent/turn-stopping`` listener hangs before ``turn/end``. Once the log
is flushed the child prints ``ready <events>`` and waits to be killed.

Usage: ``python _output_crash_child.py DB_PATH MODE``.
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any

import pydantic

from steerloop import AgentOptions, Runtime
from steerloop.testing import HANG, ScriptedAdapter, tool_call_response

OPTIONS = AgentOptions(provider="mock", model="m")


class Weather(pydantic.BaseModel):
    city: str
    celsius: float


async def main(path: str, mode: str) -> None:
    rt = await Runtime.open(store=f"sqlite:///{path}")
    model = ScriptedAdapter()
    rt.llm.register_adapter(["mock"], model)
    agent = (await rt.agents.create(session_id="s", agent_options=OPTIONS)).agent

    async def ready(*_: Any) -> None:
        await agent.session.flush()
        print(f"ready {len(agent.session.events)}", flush=True)

    async def hang_request(request: Any) -> Any:
        await ready()
        return HANG

    async def hang_stopping(payload: Any) -> None:
        await ready()
        await asyncio.Event().wait()

    if mode == "retrying":
        model.add(tool_call_response("c1", "final_result", {"city": "Paris"}), hang_request)
    else:
        model.add(tool_call_response("c1", "final_result", {"city": "Paris", "celsius": 21.5}))
    run = asyncio.ensure_future(agent.run("weather?", output_type=Weather, output_retries=2))
    await asyncio.sleep(0)  # the run registered its listeners and sent the message
    if mode == "recorded":
        rt.hooks.on("agent/turn-stopping", hang_stopping)  # after the run's own listener
    await run  # never returns: killed first


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2]))
