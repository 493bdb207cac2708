"""A steerable agent driven by a scripted model: no API key, no server.

Shows what makes steerloop different:
1. three concurrency-safe tools run in parallel and finish out of order, yet their results
   are committed in the model's order;
2. a steer sent while the tools run is seen by the very next step of the same turn;
3. a cancel mid-stream keeps a clean history (the safe text prefix, nothing half-done);
4. a follow-up after the cancel runs a normal turn.

Run: ``python examples/quickstart.py``
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from pydantic import BaseModel

from steerloop import AgentOptions, CancelCause, Runtime, define_tool, user_message
from steerloop.llm.chunks import BlockStart, TextDelta
from steerloop.testing import ScriptedAdapter, hang_after, text_response, tool_calls_response


class Lookup(BaseModel):
    city: str
    delay_ms: int


async def weather(args: Lookup, exec: Any) -> str:
    print(f"  ⚙ {exec.call_id} weather({args.city}) started")
    await asyncio.sleep(args.delay_ms / 1000)
    print(f"  ✓ {exec.call_id} weather({args.city}) finished after {args.delay_ms} ms")
    return json.dumps({"city": args.city, "sky": "clear", "c": 21})


def render(event: Any) -> str | None:
    d = event.data
    kind = event.type
    if kind == "user/message":
        return f"user      │ {d.content[0].text}"
    if kind == "assistant/message":
        text = " ".join(b.text for b in d.message.content if b.type == "text")
        calls = ", ".join(f"{b.name}#{b.id}" for b in d.message.tool_calls)
        tag = " (interrupted)" if d.interrupted else ""
        return f"assistant │ {text}{' → ' + calls if calls else ''}{tag}"
    if kind == "tool/result":
        return f"tool      │ {d.message.call_id}: {d.message.content[0].text}"
    if kind == "turn/end":
        return f"── turn {d.turn} ended: {d.reason.kind}"
    return None


async def main() -> None:
    steer_seen: list[str] = []

    def second_request(request: Any) -> Any:
        last = request.messages[-1]
        steer_seen.append(last.content[0].text if last.role == "user" else "")
        return text_response("Paris is clear at 21°C; I'll keep it short as you asked.")

    adapter = ScriptedAdapter(
        [
            tool_calls_response(
                [
                    ("c1", "weather", {"city": "Paris", "delay_ms": 60}),
                    ("c2", "weather", {"city": "Oslo", "delay_ms": 10}),
                    ("c3", "weather", {"city": "Lima", "delay_ms": 30}),
                ],
                text="Checking three cities at once.",
            ),
            second_request,
            hang_after(
                [
                    BlockStart(index=0, block_type="text"),
                    TextDelta(index=0, text="Let me write a very long essay about"),
                ]
            ),
            text_response("Sure — short answer: pack a light jacket."),
        ]
    )

    async with await Runtime.open() as rt:
        rt.llm.register_adapter(["scripted"], adapter)
        rt.tools.register(
            define_tool(
                name="weather",
                description="Weather for a city",
                parameters=Lookup,
                execute=weather,
                concurrency_safe=True,
            )
        )

        def show(payload: Any) -> None:
            line = render(payload.event)
            if line:
                print(line)

        rt.hooks.on("session/event", show)
        handle = await rt.agents.create(
            session_id="quickstart", agent_options=AgentOptions(provider="scripted", model="demo")
        )
        agent = handle.agent

        print("1) parallel tools, committed in model order; 2) a steer while they run")
        agent.followup(user_message("What's the weather in Paris, Oslo and Lima?"))
        await asyncio.sleep(0.02)  # the tools are running now
        agent.steer(user_message("Only tell me about Paris, please."))
        await agent.when_idle()
        print(f"   the step after the tools saw the steer: {steer_seen[0]!r}")

        print("3) cancel mid-stream")
        agent.followup(user_message("Write me an essay."))
        await asyncio.sleep(0.01)
        agent.cancel(CancelCause.user())
        await agent.when_idle()

        print("4) a normal turn after the cancel")
        agent.followup(user_message("Just tell me what to wear."))
        await agent.when_idle()

        history = agent.session.derive_messages()
        print(
            f"log: {len(agent.session.events)} events · model-visible history: "
            f"{len(history)} messages ({', '.join(m.role for m in history)})"
        )


if __name__ == "__main__":
    asyncio.run(main())
