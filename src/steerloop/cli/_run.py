"""``steerloop run``: one turn, rendered or streamed as JSON lines."""

from __future__ import annotations

import asyncio
import json
import signal
import sys
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

from rich.console import Console

from .._cancel import CancelCause
from ..messages import user_message
from ..tools._define import ToolExec
from ._render import EventRenderer
from ._session_setup import open_live
from ._settings import Settings

__all__ = ["run_once"]


async def _ask_on_terminal(exec: ToolExec) -> bool:
    prompt = f"allow {exec.name}({exec.raw_arguments})? [y/N] "
    answer = await asyncio.to_thread(input, prompt)
    return answer.strip().lower() in ("y", "yes")


async def run_once(
    settings: Settings,
    prompt: str,
    *,
    model: str | None,
    session_id: str | None,
    approve: str,
    json_lines: bool,
    console: Console,
) -> str:
    """Run ``prompt`` as one turn; returns the turn's end reason kind."""
    renderer = EventRenderer(console)

    def show(payload: Any) -> None:
        if json_lines:
            sys.stdout.write(json.dumps(payload.event.to_json(), ensure_ascii=False) + "\n")
            sys.stdout.flush()
        else:
            renderer.render(payload.event)

    def setup(scope: Any) -> None:
        scope.hooks.on("session/event", show)

    async with AsyncExitStack() as stack:
        live = await open_live(
            stack, settings, model=model, session_id=session_id, approve=approve,
            ask=_ask_on_terminal, workspace=Path.cwd(), setup=setup,
        )
        agent = live.agent
        loop = asyncio.get_running_loop()
        loop.add_signal_handler(signal.SIGINT, agent.cancel, CancelCause.user())
        try:
            first_new = len(agent.session.events)
            agent.followup(user_message(prompt))
            await agent.when_idle()
            await agent.session.flush()
        finally:
            loop.remove_signal_handler(signal.SIGINT)
        ends = [e for e in agent.session.events[first_new:] if e.type == "turn/end"]
        if not json_lines:
            console.print(f"[dim]session {agent.id} · {live.provider}/{live.model}[/dim]")
        return ends[-1].data.reason.kind if ends else "error"
