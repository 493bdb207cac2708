"""Replay a recorded session as an eval: would another model have done the same?

A scripted "production" model answers two turns (parallel tool calls, a steer sent while the
tools run); the session is exported as a bundle (a cassette), imported into a fresh store,
and replayed with a scripted "candidate" that looks the cities up one at a time and, in the
second turn, asks for something the recording never fetched. Its tool calls are answered from
the recording (no tool runs), the steer reaches it at the step it reached the original, and
the report says where it diverged.

Run: ``python examples/replay_eval.py``
"""

from __future__ import annotations

import asyncio
import re
import tempfile
from pathlib import Path

from steerloop import AgentOptions, Runtime, tool, user_message
from steerloop.evals import TurnRun, export_bundle, load_bundle, replay
from steerloop.llm import TokenUsage
from steerloop.llm.chunks import StreamChunk, UsageChunk
from steerloop.testing import (
    ScriptedAdapter,
    text_response,
    tool_call_response,
    tool_calls_response,
)

TEMPS = {"Paris": 21, "Oslo": 9, "Lima": 18}


@tool(concurrency_safe=True)
async def weather(city: str) -> str:
    """Current temperature of a city in °C.

    Args:
        city: The city.
    """
    await asyncio.sleep(0.05)
    return f"{city}: {TEMPS[city]} °C"


def used(chunks: list[StreamChunk], input_tokens: int, output_tokens: int) -> list[StreamChunk]:
    """``chunks`` with the usage a provider would report."""
    usage = UsageChunk(usage=TokenUsage(input_tokens=input_tokens, output_tokens=output_tokens))
    return [*chunks[:-1], usage, chunks[-1]]


PRODUCTION = [
    used(
        tool_calls_response(
            [("c1", "weather", {"city": "Paris"}), ("c2", "weather", {"city": "Oslo"})]
        ),
        310,
        42,
    ),
    used(text_response("Paris is 70 °F, Oslo 48 °F."), 402, 15),
    used(tool_call_response("c3", "weather", {"city": "Lima"}), 431, 20),
    used(text_response("Lima is 64 °F."), 470, 9),
]
CANDIDATE = [
    used(tool_call_response("k1", "weather", {"city": "Paris"}), 305, 18),
    used(tool_call_response("k2", "weather", {"city": "Oslo"}), 350, 18),
    used(text_response("Paris 70 °F, Oslo 48 °F."), 398, 12),
    used(tool_call_response("k3", "weather", {"city": "Lima, Peru"}), 420, 21),
    used(text_response("I could not get Lima's weather."), 455, 10),
]


def numbers_kept(recorded: TurnRun, new: TurnRun) -> float:
    """A toy score: the share of the recorded answer's numbers the new answer also gives."""
    wanted = re.findall(r"\d+", recorded.text)
    return sum(n in new.text for n in wanted) / len(wanted) if wanted else 1.0


async def record(store: str, bundle: Path) -> None:
    async with Runtime.open(store=store) as rt:
        rt.tools.register(weather)
        rt.llm.register_adapter(["prod"], ScriptedAdapter(PRODUCTION))
        handle = await rt.agents.create(
            session_id="support-42", agent_options=AgentOptions(provider="prod", model="big")
        )
        agent = handle.agent
        agent.followup(user_message("What's the weather in Paris and Oslo?"))
        await asyncio.sleep(0.02)  # the tools are running
        agent.steer(user_message("In Fahrenheit, please."))
        await agent.when_idle()
        await agent.run("And Lima?")
        await handle.dispose()
        assert rt.sessions.persistence is not None
        with open(bundle, "w", encoding="utf-8") as out:
            await export_bundle(rt.sessions.persistence, "support-42", out)


async def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        bundle = Path(tmp) / "support-42.bundle"
        await record(f"sqlite:///{tmp}/production.db", bundle)
        async with Runtime.open(store="memory://") as rt:  # no tools registered: none can run
            session_id = await load_bundle(bundle, rt)
            rt.llm.register_adapter(["cheap"], ScriptedAdapter(CANDIDATE))
            report = await replay(
                rt,
                session_id,
                agent_options=AgentOptions(provider="cheap", model="small"),
                score=numbers_kept,
            )
    print(report.to_markdown())


if __name__ == "__main__":
    asyncio.run(main())
