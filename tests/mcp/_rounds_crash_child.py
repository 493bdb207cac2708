"""A child process for ``test_rounds.py``: an agent on a SQLite file calls ``r__order`` of
the rounds server, which asks how many (a 2026-07-28 input round); once the request is
durable it prints ``waiting <events>`` and waits to be killed with SIGKILL.

Usage: ``python _rounds_crash_child.py DB_PATH URL``.
"""

from __future__ import annotations

import asyncio
import sys

from steerloop import AgentOptions, Runtime, user_message
from steerloop.mcp import MCPServer, install_mcp
from steerloop.testing import ScriptedAdapter, tool_call_response


async def main(path: str, url: str) -> None:
    rt = await Runtime.open(store=f"sqlite:///{path}")
    script = [tool_call_response("c1", "r__order", {"item": "tea"})]
    rt.llm.register_adapter(["mock"], ScriptedAdapter(script))
    await install_mcp(rt, [MCPServer.http("r", url=url)])
    handle = await rt.agents.create(
        session_id="s", agent_options=AgentOptions(provider="mock", model="m")
    )
    agent = handle.agent
    agent.followup(user_message("order tea"))
    while not agent.pending_inputs:
        await asyncio.sleep(0.01)
    await agent.session.flush()
    print(f"waiting {len(agent.session.events)}", flush=True)
    await asyncio.Event().wait()  # killed here


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2]))
