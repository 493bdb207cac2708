"""Added latency of one MCP tool call over stdio against calling the same function in-process.

Run: ``python bench/mcp_calls.py [--calls 300] [--repeats 5]``. Both sides go through steerloop's
tool pipeline (validation, dispatch with a timeout, result normalisation) with the same
input schema; the in-process tool runs ``echo_text`` directly, the MCP tool
``bench__echo`` sends ``tools/call`` to bench/_mcp_echo_server.py (the SDK's own server,
a subprocess) over stdio, which runs the same function. Calls are sequential; the table
gives the median time per call of each side and their difference, the added latency.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import os
import platform
import statistics
import sys
import time
from importlib.metadata import version
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent

from steerloop import Runtime, define_tool  # noqa: E402
from steerloop._signal import AbortController  # noqa: E402
from steerloop.mcp import MCPServer, install_mcp  # noqa: E402
from steerloop.tools import Tool, ToolExec  # noqa: E402

SERVER = HERE / "_mcp_echo_server.py"
_spec = importlib.util.spec_from_file_location("_mcp_echo_server", SERVER)
assert _spec is not None and _spec.loader is not None
_server_module = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_server_module)
echo_text = _server_module.echo_text


async def per_call(rt: Runtime, tool: Tool, calls: int) -> float:
    """Seconds per call of ``tool`` through the pipeline's dispatch, ``calls`` in a row."""
    controller = AbortController()
    start = time.perf_counter()
    for i in range(calls):
        exec = ToolExec(
            call_id=f"c{i}",
            name=tool.name,
            arguments=tool.validate({"text": f"hello {i}"}),
            raw_arguments="",
            signal=controller.signal,
            agent=None,
        )
        result = await rt.tool_pipeline.dispatch(exec, tool)
        if result.is_error:
            raise RuntimeError(f"{tool.name} failed: {result.content}")
    return (time.perf_counter() - start) / calls


async def main(calls: int, repeats: int) -> None:
    rt = await Runtime.open()
    with open(os.devnull, "w") as devnull:
        # -P: the server's folder (bench/) is not put first on its sys.path.
        server = MCPServer.stdio("bench", command=sys.executable, args=["-P", str(SERVER)])
        installed = await install_mcp(rt, [server], errlog=devnull)
    remote = rt.tools.get("bench__echo")
    assert remote is not None

    def local_body(args: Any, _exec: Any) -> str:
        return echo_text(args["text"])

    local = define_tool(
        name="echo",
        description=remote.description,
        parameters=dict(remote.parameters),
        execute=local_body,
        concurrency_safe=True,
        timeout=remote.timeout,
    )
    await per_call(rt, remote, 20)  # warm-up: imports, first-call caches
    await per_call(rt, local, 20)
    inproc: list[float] = []
    over_stdio: list[float] = []
    for _ in range(repeats):
        inproc.append(await per_call(rt, local, calls))
        over_stdio.append(await per_call(rt, remote, calls))
    await installed.close()
    await rt.close()
    a, b = statistics.median(inproc), statistics.median(over_stdio)
    load = os.getloadavg()
    print(
        f"python {platform.python_version()}, {platform.system()} {platform.machine()}, "
        f"{os.cpu_count()} cpus, load avg {load[0]:.2f}; mcp {version('mcp')}; "
        f"{calls} sequential calls x {repeats} repeats, median of repeats"
    )
    print(f"{'side':<28}{'per call':>12}")
    print(f"{'in-process function':<28}{a * 1e6:>10.1f}us")
    print(f"{'MCP over stdio':<28}{b * 1e6:>10.1f}us")
    print(f"{'added latency':<28}{(b - a) * 1e6:>10.1f}us")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--repeats", type=int, default=5)
    ns = parser.parse_args()
    asyncio.run(main(ns.calls, ns.repeats))
