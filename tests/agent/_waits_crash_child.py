"""A child process for ``test_durable_waits_crash.py``: an agent on a SQLite file whose call
``c1`` waits durably — ``client``: for a client's result (a client tool); ``input``: for a
person's answer, asked with ``resume`` state as a transport driving the 2026-07-28 input
rounds would ask it. Once the wait is durable it prints ``waiting <events>`` and waits to
be killed with SIGKILL.

Usage: ``python _waits_crash_child.py DB_PATH client|input``.
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any

from steerloop import AgentOptions, Runtime, define_tool, user_message
from steerloop.agent._agent import live_agent
from steerloop.agent._client_calls import ClientTool
from steerloop.session._input_events import InputRequest
from steerloop.testing import ScriptedAdapter, tool_call_response

SCHEMA = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}


async def ask(args: Any, exec: Any) -> str:
    request = InputRequest(
        id="in-c1",
        server="srv",
        message="how many?",
        schema=SCHEMA,
        call_id=exec.call_id,
        turn=exec.turn,
        resume={"request_state": "rs-1"},
    )
    answer = await live_agent(exec.agent).inputs.wait(request, exec.signal)
    return f"live {answer.content}"  # never: the process is killed while it waits


async def main(path: str, mode: str) -> None:
    rt = await Runtime.open(store=f"sqlite:///{path}")
    tool = "pick_color" if mode == "client" else "ask"
    rt.llm.register_adapter(["mock"], ScriptedAdapter([tool_call_response("c1", tool, {})]))
    rt.tools.register(
        define_tool(name="ask", description="asks", parameters={"type": "object"}, execute=ask)
    )
    handle = await rt.agents.create(
        session_id="s", agent_options=AgentOptions(provider="mock", model="m")
    )
    agent = handle.agent
    agent.client_calls.offer([ClientTool("pick_color", "pick", {"type": "object"})])
    agent.followup(user_message("u1"))
    while not (agent.client_calls.pending or agent.pending_inputs):
        await asyncio.sleep(0.01)
    await agent.session.flush()
    print(f"waiting {len(agent.session.events)}", flush=True)
    await asyncio.Event().wait()  # killed here


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2]))
