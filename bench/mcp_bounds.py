"""The event loop's worst stall while a hostile MCP server's huge messages arrive.

Run: ``python bench/mcp_bounds.py [--repeats 3]``. The server is tests/mcp/hostile_server.py
over stdio. Three cases: a tool result of 200,000 content blocks, an 8 MiB text result, and
a tool list of 10,000 tools (after ``tools/list_changed``). Each is received twice in one
run: by steerloop (``install_mcp``: its own stdio transport, the sliced decoder in a worker
thread, the cut before validation) and by the SDK's client alone (its stdio transport and
validation on the event loop, what steerloop did before). A 5 ms ticker measures how late
the loop ran it, at worst; the table gives the medians of the repeats and the ratio.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != HERE]

from mcp.client import Client  # noqa: E402
from mcp.client.stdio import StdioServerParameters  # noqa: E402

from steerloop import Runtime  # noqa: E402
from steerloop._signal import AbortController  # noqa: E402
from steerloop.mcp import MCPServer, install_mcp  # noqa: E402
from steerloop.tools import ToolExec  # noqa: E402

SERVER = HERE.parent / "tests" / "mcp" / "hostile_server.py"
TICK = 0.005

CASES: dict[str, tuple[str, dict[str, Any]]] = {
    "200,000 blocks": ("blocks", {"n": 200_000}),
    "8 MiB text": ("big", {"mib": 8}),
    "10,000 tools": ("flood", {}),
}


async def worst_stall(work: Callable[[], Awaitable[Any]]) -> tuple[float, float]:
    """``(worst lateness of a 5 ms tick, seconds of work)`` while ``work`` runs."""
    loop = asyncio.get_running_loop()
    worst = 0.0

    async def tick() -> None:
        nonlocal worst
        while True:
            before = loop.time()
            await asyncio.sleep(TICK)
            worst = max(worst, loop.time() - before - TICK)

    ticker = asyncio.ensure_future(tick())
    await asyncio.sleep(0)
    start = time.perf_counter()
    try:
        await work()
    finally:
        elapsed = time.perf_counter() - start
        ticker.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await ticker
    return worst, elapsed


async def steerloop_case(state: Path, tool: str, args: dict[str, Any]) -> tuple[float, float]:
    rt = await Runtime.open()
    try:
        server = MCPServer.stdio("x", command=sys.executable, args=[str(SERVER), str(state)])
        with open(os.devnull, "w") as errlog:
            installed = await install_mcp(rt, [server], errlog=errlog)
        body = rt.tools.get(f"x__{tool}")
        assert body is not None
        exec = ToolExec(
            call_id="c1",
            name=body.name,
            arguments=args,
            raw_arguments="",
            signal=AbortController().signal,
            agent=None,  # type: ignore[arg-type]
        )

        async def work() -> None:
            await rt.tool_pipeline.dispatch(exec, body)
            if tool == "flood":
                # What the next model request does after list_changed: re-list (refused).
                await installed._servers["x"].refresh()

        return await worst_stall(work)
    finally:
        await rt.close()


async def sdk_case(state: Path, tool: str, args: dict[str, Any]) -> tuple[float, float]:
    params = StdioServerParameters(command=sys.executable, args=[str(SERVER), str(state)])
    async with Client(params, cache=None) as client:

        async def work() -> None:
            await client.call_tool(tool, args)
            if tool == "flood":
                await client.list_tools()

        return await worst_stall(work)


async def main(repeats: int) -> None:
    # What the machine alone does to a 5 ms tick (other processes, the OS), for scale.
    idle = statistics.median(
        [(await worst_stall(lambda: asyncio.sleep(2.0)))[0] for _ in range(repeats)]
    )
    rows: list[tuple[str, float, float, float, float]] = []
    for label, (tool, args) in CASES.items():
        ours: list[tuple[float, float]] = []
        theirs: list[tuple[float, float]] = []
        for _ in range(repeats):
            with tempfile.TemporaryDirectory() as tmp:
                ours.append(await steerloop_case(Path(tmp), tool, args))
            with tempfile.TemporaryDirectory() as tmp:
                theirs.append(await sdk_case(Path(tmp), tool, args))
        rows.append(
            (
                label,
                statistics.median(s for s, _ in ours),
                statistics.median(t for _, t in ours),
                statistics.median(s for s, _ in theirs),
                statistics.median(t for _, t in theirs),
            )
        )
    load = os.getloadavg()[0]
    print(f"python {platform.python_version()}, {platform.machine()}, load {load:.2f}")
    print(f"an idle loop's worst stall over 2 s on this machine now: {idle * 1000:.0f} ms")
    head = ("case", "steerloop stall", "(total)", "SDK alone stall", "(total)", "ratio")
    print(f"{head[0]:<16} {head[1]:>16} {head[2]:>9} {head[3]:>16} {head[4]:>9} {head[5]:>7}")
    for label, ours_stall, ours_time, sdk_stall, sdk_time in rows:
        ratio = sdk_stall / ours_stall if ours_stall > 0 else float("inf")
        print(
            f"{label:<16} {ours_stall * 1000:>13.0f} ms {ours_time:>8.2f}s "
            f"{sdk_stall * 1000:>13.0f} ms {sdk_time:>8.2f}s {ratio:>6.0f}x"
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    asyncio.run(main(parser.parse_args().repeats))
