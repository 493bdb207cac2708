"""The event loop's worst stall while a hostile streamable-HTTP MCP server's messages arrive.

Run: ``python bench/mcp_http_bounds.py [--repeats 3]``. The server is
tests/mcp/http_hostile_server.py (the SDK's server, 2026-07-28, with raw hostile answers).
Cases: a result of 200,000 content blocks as a JSON body and as one SSE event (received by
steerloop, whose transport decodes and cuts it in a worker thread, and by the SDK's client
alone, which decodes it on the loop), and an endless JSON body (steerloop stops at the
default ``max_message_bytes``, 32 MiB; the SDK alone would read it until memory runs out, so
it is not run). Same 5 ms ticker as ``mcp_bounds.py``; medians of the repeats.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import os
import platform
import socket
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != HERE]

from mcp.client import Client  # noqa: E402

from steerloop._signal import AbortController  # noqa: E402
from steerloop.mcp import MCPServer  # noqa: E402
from steerloop.mcp._connection import Connection  # noqa: E402

# bench/mcp.py would shadow the SDK on the path: the ticker is loaded from its file.
_spec = importlib.util.spec_from_file_location("mcp_bounds", HERE / "mcp_bounds.py")
assert _spec is not None and _spec.loader is not None
_bounds = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_bounds)
worst_stall = _bounds.worst_stall

SERVER = HERE.parent / "tests" / "mcp" / "http_hostile_server.py"
CASES: dict[str, tuple[str, dict[str, Any], bool]] = {
    "200,000 blocks, JSON": ("blocks_json", {"n": 200_000}, True),
    "200,000 blocks, SSE": ("blocks_sse", {"n": 200_000}, True),
    "endless JSON body": ("endless_json", {}, False),
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def started(state: Path) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, str(SERVER), str(state), str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    for _ in range(600):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return process, f"http://127.0.0.1:{port}/mcp"
        except OSError:
            await asyncio.sleep(0.1)
    process.kill()
    raise RuntimeError("the server did not start")


async def steerloop_case(url: str, tool: str, args: dict[str, Any]) -> tuple[float, float]:
    connection = Connection(MCPServer.http("w", url=url), lambda: None)
    try:
        await connection.list_tools()

        async def work() -> None:
            try:
                await connection.call(tool, args, AbortController().signal)
            except Exception as exc:  # the endless body: refused at the cap
                assert "max_message_bytes" in str(exc), exc

        return await worst_stall(work)
    finally:
        await connection.close()


async def sdk_case(url: str, tool: str, args: dict[str, Any]) -> tuple[float, float]:
    async with Client(url, cache=None) as client:
        await client.list_tools()

        async def work() -> None:
            try:
                await client.call_tool(tool, args)
            except Exception as exc:  # the SDK's own SSE event cap (1 MiB) refuses it
                print(f"SDK alone, {tool}: {exc}")

        return await worst_stall(work)


async def main(repeats: int) -> None:
    rows: list[tuple[str, float, float, float | None]] = []
    with tempfile.TemporaryDirectory() as tmp:
        process, url = await started(Path(tmp))
        try:
            for label, (tool, args, sdk_too) in CASES.items():
                ours = [await steerloop_case(url, tool, args) for _ in range(repeats)]
                runs = range(repeats if sdk_too else 0)
                theirs = [await sdk_case(url, tool, args) for _ in runs]
                rows.append(
                    (
                        label,
                        statistics.median(s for s, _ in ours),
                        statistics.median(t for _, t in ours),
                        statistics.median(s for s, _ in theirs) if theirs else None,
                    )
                )
        finally:
            process.kill()
            process.wait(10)
    load = os.getloadavg()[0]
    print(f"python {platform.python_version()}, {platform.machine()}, load {load:.2f}")
    print(f"{'case':<22} {'steerloop stall':>16} {'(total)':>9} {'SDK alone stall':>16}")
    for label, stall, total, sdk in rows:
        theirs = "not run" if sdk is None else f"{sdk * 1000:.0f} ms"
        print(f"{label:<22} {stall * 1000:>13.0f} ms {total:>8.2f}s {theirs:>16}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    asyncio.run(main(parser.parse_args().repeats))
