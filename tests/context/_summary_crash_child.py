"""A child process for ``test_crash.py``: an agent with ``summarize`` compaction on a SQLite
file; when the summary request arrives it flushes, prints ``summarizing <seq> <digest>`` and
hangs until the parent kills it with SIGKILL.

Usage: ``python _summary_crash_child.py DB_PATH``.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import sys
from typing import Any

from steerloop import AgentOptions, Runtime, user_message
from steerloop.context import install_compaction
from steerloop.testing import HANG, ScriptedAdapter

sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[2]))

from tests.context._model import fetch_tool, is_summary_request, make_model

SESSION = "crash"


def digest(events: Any) -> str:
    h = hashlib.sha256()
    for event in events:
        h.update(json.dumps(event.to_json(), sort_keys=True, separators=(",", ":")).encode())
        h.update(b"\n")
    return h.hexdigest()


async def main(path: str) -> None:
    rt = await Runtime.open(store=f"sqlite:///{path}", persona="be brief")
    model = make_model()
    agent: Any = None

    async def entry(request: Any) -> Any:
        if is_summary_request(request):
            await agent.session.flush()
            events = list(agent.session.events)
            print(f"summarizing {len(events)} {digest(events)}", flush=True)
            return HANG
        return model(request)

    rt.llm.register_adapter("mock", ScriptedAdapter([entry] * 100))
    rt.tools.register(fetch_tool())
    install_compaction(rt, max_context_tokens=1_500, keep_recent_tokens=700, strategy="summarize")
    handle = await rt.agents.create(
        session_id=SESSION, agent_options=AgentOptions(provider="mock", model="m")
    )
    agent = handle.agent
    for turn in range(1, 30):
        agent.followup(user_message(f"question {turn}"))
        await agent.when_idle()
    print("never summarized 0 0", flush=True)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
