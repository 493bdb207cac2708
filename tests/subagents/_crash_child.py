"""A child process for ``test_crash.py``: a parent agent on a SQLite file delegates a task
through ``spawn_agent``; the sub-agent's model hangs. Once both logs are flushed it prints
``child-streaming <child session id> <parent events> <child events>`` and waits to be
killed with SIGKILL.

Usage: ``python _crash_child.py DB_PATH``.
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any

from steerloop import AgentOptions, Runtime, user_message
from steerloop.subagents import install_subagents
from steerloop.testing import HANG, ScriptedAdapter, text_response, tool_call_response

PARENT = "parent"
OPTIONS = AgentOptions(provider="mock", model="m")
CHILD = AgentOptions(provider="child", model="c")


async def main(path: str) -> None:
    rt = await Runtime.open(store=f"sqlite:///{path}")
    parent_model = ScriptedAdapter()
    child_model = ScriptedAdapter()
    rt.llm.register_adapter(["mock"], parent_model)
    rt.llm.register_adapter(["child"], child_model)
    install_subagents(rt, agent_options=CHILD)
    handle = await rt.agents.create(session_id=PARENT, agent_options=OPTIONS)
    agent = handle.agent
    parent_model.add(text_response("warm-up"))
    agent.followup(user_message("first"))
    await agent.when_idle()

    async def hang(request: Any) -> Any:
        (child,) = rt.agents.children(agent)
        await agent.session.flush()
        await child.session.flush()
        parent_n, child_n = len(agent.session.events), len(child.session.events)
        print(f"child-streaming {child.id} {parent_n} {child_n}", flush=True)
        return HANG

    parent_model.add(tool_call_response("c1", "spawn_agent", {"task": "long job"}))
    child_model.add(hang)
    agent.followup(user_message("delegate"))
    await asyncio.Event().wait()  # killed while the sub-agent's stream hangs


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
