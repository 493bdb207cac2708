"""Long sessions: request size and per-step time at turn 10 vs turn 1,000, with and without
compaction.

Run: ``python bench/context.py [--turns 1000] [--bound 16000] [--keep 4000] [--json]``.

Every turn is a question, one ``fetch`` call whose result is ``--result-chars`` characters
(2 KB by default), then a short answer: two steps. The fake model reports input tokens the
way ``steerloop.context`` estimates them (messages and tool schemas at four characters a
token; per-message counts are cached, so its own cost is one dict lookup per message).
For each configuration (no compaction, then each strategy with ``--bound``/``--keep``) the
table shows, around turn 10 and around the last turn: the messages and reported input tokens
of that turn's last request, and the wall and CPU time per step (mean over the ``--window``
turns ending there; compaction, summary requests included, is part of the step it precedes).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import itertools
import json
import math
import platform
import statistics
import sys
import time
from typing import Any

from steerloop import AgentOptions, Runtime, define_tool, user_message
from steerloop.context import estimate_message_tokens, install_compaction
from steerloop.context._compaction import _SUMMARIZER_PROMPT
from steerloop.llm._types import GenerateRequest, TokenUsage
from steerloop.llm.chunks import StreamChunk, UsageChunk
from steerloop.messages import TextBlock
from steerloop.testing import ScriptedAdapter, text_response, tool_call_response


class Model:
    """The fake provider: question → fetch call → answer; summary request → a recap."""

    def __init__(self) -> None:
        self.calls = itertools.count(1)
        self.cache: dict[str, int] = {}
        self.last: tuple[int, int] = (0, 0)  # messages, input tokens of the latest request

    def tokens(self, request: GenerateRequest) -> int:
        total = 0
        for message in request.messages:
            count = self.cache.get(message.id)
            if count is None:
                count = self.cache[message.id] = estimate_message_tokens([message])
            total += count
        tools = [
            {"name": t.name, "description": t.description, "parameters": dict(t.parameters)}
            for t in request.tools
        ]
        return total + (math.ceil(len(json.dumps(tools)) * 0.25) if tools else 0)

    def __call__(self, request: GenerateRequest) -> list[StreamChunk]:
        first = request.messages[0]
        summary = (
            first.role == "system"
            and isinstance(first.content[0], TextBlock)
            and first.content[0].text == _SUMMARIZER_PROMPT
        )
        tokens = self.tokens(request)
        if summary:
            chunks = text_response("Recap: the user asked questions; fetch answered each.")
        else:
            self.last = (len(request.messages), tokens)
            if request.messages[-1].role == "tool":
                chunks = text_response("answered")
            else:
                chunks = tool_call_response(f"c{next(self.calls)}", "fetch", {"q": "x"})
        usage = UsageChunk(usage=TokenUsage(input_tokens=tokens, output_tokens=20))
        return [*chunks[:-1], usage, chunks[-1]]


class Forever(ScriptedAdapter):
    """A scripted adapter whose script never runs out (and keeps no requests)."""

    def __init__(self, model: Model) -> None:
        super().__init__()
        self.model = model

    async def stream(self, request: GenerateRequest) -> Any:
        for chunk in self.model(request):
            yield chunk


async def run(strategy: str | None, args: argparse.Namespace) -> dict[str, Any]:
    rt = await Runtime.open(store=args.store, persona="answer briefly")
    model = Model()
    rt.llm.register_adapter("mock", Forever(model))
    result = "x" * args.result_chars

    async def fetch(arguments: Any, exec: Any) -> str:
        return result

    rt.tools.register(
        define_tool(name="fetch", description="fetch a page", execute=fetch,
                    parameters={"type": "object", "properties": {"q": {"type": "string"}}})
    )  # fmt: skip
    if strategy is not None:
        install_compaction(
            rt,
            max_context_tokens=args.bound,
            keep_recent_tokens=args.keep,
            strategy=strategy,  # type: ignore[arg-type]
        )
    handle = await rt.agents.create(
        session_id="bench", agent_options=AgentOptions(provider="mock", model="m")
    )
    agent = handle.agent
    samples: dict[int, tuple[float, float, int, int]] = {}
    gc.collect()
    for turn in range(1, args.turns + 1):
        start, cpu = time.perf_counter(), time.process_time()
        agent.followup(user_message(f"question {turn}"))
        await agent.when_idle()
        samples[turn] = (time.perf_counter() - start, time.process_time() - cpu, *model.last)
    compactions = sum(e.type == "context/compacted" for e in agent.session.events)
    events = len(agent.session.events)
    await rt.close()

    def around(last: int) -> dict[str, float]:
        turns = range(max(last - args.window + 1, 1), last + 1)
        return {
            "step_ms": statistics.mean(samples[t][0] for t in turns) / 2 * 1000,
            "step_cpu_ms": statistics.mean(samples[t][1] for t in turns) / 2 * 1000,
            "messages": samples[last][2],
            "input_tokens": samples[last][3],
        }

    return {
        "strategy": strategy or "none",
        "turn_10": around(10),
        f"turn_{args.turns}": around(args.turns),
        "compactions": compactions,
        "events": events,
    }


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--turns", type=int, default=1000)
    parser.add_argument("--bound", type=int, default=16_000)
    parser.add_argument("--keep", type=int, default=4_000)
    parser.add_argument("--result-chars", type=int, default=2048)
    parser.add_argument("--window", type=int, default=10, help="turns averaged per figure")
    parser.add_argument("--store", default="memory://")
    parser.add_argument(
        "--strategies", default="none,drop-tool-results,window,summarize",
        help="comma-separated; 'none' is without compaction",
    )  # fmt: skip
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    # A short unmeasured run first: the first configuration must not pay the warm-up.
    await run(None, argparse.Namespace(**{**vars(args), "turns": 20}))
    rows = []
    for name in args.strategies.split(","):
        rows.append(await run(None if name == "none" else name, args))
    if args.json:
        print(json.dumps({"config": vars(args), "rows": rows}))
        return
    last = f"turn_{args.turns}"
    print(
        f"python {platform.python_version()} on {platform.machine()}, store {args.store}, "
        f"{args.turns} turns × 2 steps, tool results {args.result_chars} chars, "
        f"bound {args.bound} / keep {args.keep} tokens"
    )
    n = str(args.turns)
    print(
        f"{'strategy':<18} {'msgs@10':>8} {'tok@10':>8} {'ms/step@10':>11} {'cpu@10':>7} "
        f"{'msgs@' + n:>10} {'tok@' + n:>10} {'ms/step@' + n:>13} {'cpu@' + n:>9} "
        f"{'compactions':>12}"
    )
    for row in rows:
        a, b = row["turn_10"], row[last]
        print(
            f"{row['strategy']:<18} {a['messages']:>8} {a['input_tokens']:>8} "
            f"{a['step_ms']:>11.2f} {a['step_cpu_ms']:>7.2f} {b['messages']:>10} "
            f"{b['input_tokens']:>10} {b['step_ms']:>13.2f} {b['step_cpu_ms']:>9.2f} "
            f"{row['compactions']:>12}"
        )
    sys.stdout.flush()


if __name__ == "__main__":
    asyncio.run(main())
