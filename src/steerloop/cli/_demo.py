"""``steerloop demo``: an offline scenario driven by a scripted model.

It shows, on the embedded store, what a steerable loop does: parallel tools that finish
out of order but commit in the model's order, a steer that the next step sees, a cancel
that leaves a clean history, and a resume from the durable log.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from pydantic import BaseModel, Field
from rich.console import Console
from rich.rule import Rule
from rich.text import Text

from .. import hooks as h
from .._cancel import CancelCause
from .._runtime import Runtime
from ..agent._factory import AgentScope
from ..agent._options import AgentOptions
from ..llm.chunks import BlockStart, StreamChunk, TextDelta
from ..messages import user_message
from ..session._session import SessionEventPayload
from ..testing import ScriptedAdapter, hang_after, text_response, tool_calls_response
from ..tools._define import ToolExec, define_tool
from ._naming import new_session_id
from ._render import EventRenderer

__all__ = ["run_demo"]

_CITIES = {"Paris": (0.6, 21, "clear"), "Oslo": (0.15, 9, "rain"), "Lima": (0.35, 18, "cloudy")}


class WeatherArgs(BaseModel):
    city: str = Field(description="City name")


async def _weather(args: WeatherArgs, exec: ToolExec, console: Console) -> str:
    delay, temp, sky = _CITIES.get(args.city, (0.1, 15, "unknown"))
    await exec.signal.race(asyncio.sleep(delay))
    console.print(Text(f"    … {args.city} finished after {int(delay * 1000)} ms", style="dim"))
    return json.dumps({"city": args.city, "temp_c": temp, "sky": sky})


def _script(console: Console) -> list[Any]:
    def answer_steered(request: Any) -> Any:
        last = request.messages[-1]
        steered = last.role == "user" and "one line" in str(last.content[0])
        text = (
            "Paris 21 °C clear · Oslo 9 °C rain · Lima 18 °C cloudy."
            if steered
            else "Paris is clear at 21 °C, Oslo rainy at 9 °C and Lima cloudy at 18 °C."
        )
        return text_response(text)

    essay: list[StreamChunk] = [
        BlockStart(index=0, block_type="text"),
        TextDelta(index=0, text="A long report on the climate of three cities. First, Paris"),
    ]
    return [
        tool_calls_response(
            [
                ("c1", "weather", {"city": "Paris"}),
                ("c2", "weather", {"city": "Oslo"}),
                ("c3", "weather", {"city": "Lima"}),
            ],
            text="I'll look up all three cities at once.",
        ),
        answer_steered,
        hang_after(essay),
        text_response("You're welcome — pack an umbrella for Oslo."),
    ]


async def run_demo(store: str, console: Console) -> str:
    """Run the scenario on ``store``; returns the demo's session id."""
    session_id = new_session_id("demo")
    adapter = ScriptedAdapter(_script(console))
    options = AgentOptions(provider="scripted", model="demo")
    renderer = EventRenderer(console)

    async def weather(args: WeatherArgs, exec: ToolExec) -> str:
        return await _weather(args, exec, console)

    tool = define_tool(
        name="weather",
        description="Current weather for a city",
        parameters=WeatherArgs,
        execute=weather,
        concurrency_safe=True,
    )

    def show(payload: SessionEventPayload) -> None:
        renderer.render(payload.event)

    def setup(scope: AgentScope) -> None:
        scope.tools.register(tool)
        scope.hooks.on(h.SESSION_EVENT, show)

    async with await Runtime.open(store=store) as rt:
        rt.llm.register_adapter(["scripted"], adapter)
        handle = await rt.agents.create(session_id=session_id, agent_options=options, setup=setup)
        agent = handle.agent

        console.print(Rule("1 · parallel tools, results in the model's order"))
        agent.followup(user_message("What's the weather in Paris, Oslo and Lima?"))
        await asyncio.sleep(0.05)
        console.print(Rule("2 · a steer while the tools run", style="dim"))
        agent.steer(user_message("Keep the answer to one line."))
        await agent.when_idle()

        console.print(Rule("3 · cancel mid-answer"))
        agent.followup(user_message("Now write me a long report."))
        await asyncio.sleep(0.2)
        agent.cancel(CancelCause.user())
        await agent.when_idle()
        console.print(
            Text(
                "    the interrupted text stays in history; nothing half-done remains", style="dim"
            )
        )
        await handle.dispose()

        console.print(Rule("4 · resume from the durable log"))
        handle = await rt.agents.resume(
            resume_session_id=session_id, agent_options=options, setup=setup
        )
        agent = handle.agent
        history = agent.session.derive_messages()
        console.print(
            Text(
                f"    restored {len(agent.session.events)} events, "
                f"{len(history)} model-visible messages",
                style="dim",
            )
        )
        agent.followup(user_message("Thanks!"))
        await agent.when_idle()
        await agent.session.flush()
    return session_id
