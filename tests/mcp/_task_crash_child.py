"""A child process for ``test_tasks.py``: an agent on a SQLite file calls the hostile
server's task tool; once the task's handle is durable it prints ``task <id>`` and waits to be
killed with SIGKILL (the task goes on: its state is in the server's STATE_DIR).

Usage: ``python _task_crash_child.py DB_PATH STATE_DIR``.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from steerloop import AgentOptions, Runtime, user_message
from steerloop.mcp import install_mcp
from steerloop.session._session import SessionEventPayload
from steerloop.testing import ScriptedAdapter, tool_call_response

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from tests.mcp.helpers import hostile


async def main(path: str, state: str) -> None:
    rt = await Runtime.open(store=f"sqlite:///{path}")
    rt.llm.register_adapter(
        ["mock"], ScriptedAdapter([tool_call_response("c1", "x__job", {"text": "report"})])
    )
    await install_mcp(rt, [hostile(Path(state))])
    agent = (
        await rt.agents.create(
            session_id="s", agent_options=AgentOptions(provider="mock", model="m")
        )
    ).agent
    durable = asyncio.Event()
    tasks: list[asyncio.Task[None]] = []

    async def flushed(task_id: str) -> None:
        await agent.session.flush()
        print(f"task {task_id}", flush=True)
        durable.set()

    def on_event(payload: SessionEventPayload) -> None:
        if payload.event.type == "mcp/task-created":
            tasks.append(asyncio.ensure_future(flushed(payload.event.data.task_id)))

    rt.hooks.on("session/event", on_event)
    agent.followup(user_message("u1"))
    await durable.wait()
    await asyncio.Event().wait()  # killed here


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2]))
