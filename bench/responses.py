"""Time to first chunk through ``OpenAIResponsesAdapter`` vs the ``openai`` SDK alone.

Run: ``python bench/responses.py [--requests 200] [--deltas 200]``. A loopback server
(``tests/llm/sse_server.py``) answers every request with the same documented Responses
event stream (``tests/llm/responses_wire.py``): created, a reasoning item with a
one-delta summary, then a message of ``--deltas`` text deltas, then ``response.completed``.

Per request, both sides are timed from the call to the first text delta (the SDK's
``response.output_text.delta`` event; the adapter's ``TextDelta`` chunk) and to the end of
the stream. The two run alternately, request by request, on one event loop, each with its
own client and ``max_retries=0``; the server closes every connection (``Connection:
close``), so both pay one TCP connect per request. Medians and p90 in milliseconds, and
the adapter's overhead per request.
"""

from __future__ import annotations

import argparse
import asyncio
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import openai
from tests.llm.responses_wire import Wire, reply
from tests.llm.sse_server import RecordedRequest, Reply, SSEServer

from steerloop.llm import GenerateRequest
from steerloop.llm.chunks import TextDelta
from steerloop.llm.openai import OpenAIResponsesAdapter
from steerloop.messages import TextBlock, UserMessage


def scripted(deltas: int) -> Any:
    def answer(_request: RecordedRequest) -> Reply:
        wire = Wire()
        events = wire.created()
        events += wire.reasoning(0, [["Think."]], id="rs_1", encrypted="gAAAA-enc")
        events += wire.message(1, ["tok "] * deltas)
        events.append(wire.completed(Wire.usage(100, deltas, cached=50, reasoning=10)))
        return reply(events)

    return answer


async def via_sdk(client: openai.AsyncOpenAI) -> tuple[float, float]:
    start = time.perf_counter()
    first = 0.0
    stream = await client.responses.create(
        model="o4-mini",
        input=[{"role": "user", "content": "u1"}],
        stream=True,
        store=False,
        include=["reasoning.encrypted_content"],
    )
    async for event in stream:
        if not first and event.type == "response.output_text.delta":
            first = time.perf_counter() - start
    return first, time.perf_counter() - start


async def via_adapter(adapter: OpenAIResponsesAdapter) -> tuple[float, float]:
    request = GenerateRequest(
        provider="openai",
        model="o4-mini",
        messages=(UserMessage(id="m1", content=(TextBlock("u1"),)),),
        session_id="bench",
    )
    start = time.perf_counter()
    first = 0.0
    async for chunk in adapter.stream(request):
        if not first and isinstance(chunk, TextDelta):
            first = time.perf_counter() - start
    return first, time.perf_counter() - start


def summary(values: list[float]) -> str:
    ms = sorted(v * 1000 for v in values)
    p90 = ms[min(len(ms) - 1, int(len(ms) * 0.9))]
    return f"median {statistics.median(ms):7.3f}  p90 {p90:7.3f}"


async def main(requests: int, deltas: int) -> None:
    server = await SSEServer.start()
    client = openai.AsyncOpenAI(base_url=server.url, api_key="k", max_retries=0)
    adapter = OpenAIResponsesAdapter(base_url=server.url, api_key="k")
    results: dict[str, list[tuple[float, float]]] = {"sdk": [], "adapter": []}
    try:
        for i in range(requests + 10):  # the first 10 of each warm up (imports, pools)
            order = ("sdk", "adapter") if i % 2 == 0 else ("adapter", "sdk")
            for name in order:
                server.add(scripted(deltas))
                got = await (via_sdk(client) if name == "sdk" else via_adapter(adapter))
                if i >= 10:
                    results[name].append(got)
    finally:
        await client.close()
        await adapter.aclose()
        await server.stop()
    print(
        f"python {platform.python_version()} on {platform.machine()}, openai {openai.__version__}; "
        f"{requests} requests each, {deltas} text deltas per stream, loopback HTTP/1.1"
    )
    for name, rows in results.items():
        print(f"{name:8} first text chunk: {summary([r[0] for r in rows])} ms")
        print(f"{name:8} whole stream:     {summary([r[1] for r in rows])} ms")
    first = [a[0] - s[0] for a, s in zip(results["adapter"], results["sdk"], strict=True)]
    whole = [a[1] - s[1] for a, s in zip(results["adapter"], results["sdk"], strict=True)]
    print(
        f"adapter - sdk per request: first chunk {statistics.median(first) * 1000:+.3f} ms, "
        f"whole stream {statistics.median(whole) * 1000:+.3f} ms (medians of paired differences)"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--deltas", type=int, default=200)
    args = parser.parse_args()
    asyncio.run(main(args.requests, args.deltas))
