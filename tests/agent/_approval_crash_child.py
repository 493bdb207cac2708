"""A child process for ``test_approvals_crash.py``: an agent on a SQLite file whose tool call
is held by ``install_approval(rt, "ask")``; once the request is durable it prints
``pending <events>`` and waits to be killed with SIGKILL.

Usage: ``python _approval_crash_child.py DB_PATH``.
"""

from __future__ import annotations

import asyncio
import sys

from steerloop import AgentOptions, Runtime, define_tool, user_message
from steerloop.testing import ScriptedAdapter, tool_call_response
from steerloop.tools import ApprovalHookPayload
from steerloop.workspace import install_approval


async def main(path: str) -> None:
    rt = await Runtime.open(store=f"sqlite:///{path}")
    rt.llm.register_adapter(["mock"], ScriptedAdapter([tool_call_response("c1", "write", {})]))

    def write(args: object, exec: object) -> str:
        print("the body ran", flush=True)  # never: the call is held
        return "written"

    rt.tools.register(
        define_tool(name="write", description="writes", parameters={"type": "object"},
                    execute=write)
    )  # fmt: skip
    install_approval(rt, "ask")
    agent = (
        await rt.agents.create(
            session_id="s", agent_options=AgentOptions(provider="mock", model="m")
        )
    ).agent
    flushed = asyncio.Event()

    async def durable() -> None:
        await agent.session.flush()
        print(f"pending {len(agent.session.events)}", flush=True)
        flushed.set()

    tasks = []

    def on_request(payload: ApprovalHookPayload) -> None:
        tasks.append(asyncio.ensure_future(durable()))

    rt.hooks.on("tools/approval-requested", on_request)
    agent.followup(user_message("u1"))
    await flushed.wait()
    await asyncio.Event().wait()  # killed here


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
