"""Connection exhaustion against a real ``steerloop serve`` under a 1,024-descriptor limit.

Run: ``python bench/edge.py [--attackers 1300] [--mode slowloris|streams|both] [--src DIR]``.

Starts ``steerloop serve`` (SQLite, a scripted model) with ``ulimit -n 1024``, opens
``--attackers`` hostile connections — ``slowloris``: each sends a partial request head and
one more header byte every few seconds; ``streams``: each opens an idle SSE stream of one
session — then, while they are held, times 20 legitimate ``GET /v1/sessions`` (each bounded
by 5 s) and reports how many answered and with what, how many hostile connections the server
refused or timed out, and how much the server wrote to its log. ``--src`` runs another
tree's ``src`` (to compare with the code before a change). Prints figures measured in this
run; nothing is asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]


async def start_server(
    src: Path, workdir: Path, extra: list[str]
) -> tuple[subprocess.Popen[bytes], int, Path]:
    port_probe = socket.socket()
    port_probe.bind(("127.0.0.1", 0))
    port = port_probe.getsockname()[1]
    port_probe.close()
    log = workdir / "server.log"
    env = dict(os.environ, PYTHONPATH=f"{src}:{ROOT}")
    command = [
        sys.executable,
        "-m",
        "steerloop.cli",
        "serve",
        "--store",
        f"sqlite:///{workdir / 's.db'}",
        "--port",
        str(port),
        "--profiles",
        "tests.service.profiles:profiles",
        *extra,
    ]

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (1024, 1024))

    with log.open("wb") as out:
        proc = subprocess.Popen(
            command, cwd=workdir, env=env, stdout=out, stderr=subprocess.STDOUT, preexec_fn=limit
        )
    async with httpx.AsyncClient(timeout=2) as client:
        for _ in range(200):
            try:
                if (await client.get(f"http://127.0.0.1:{port}/healthz")).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            await asyncio.sleep(0.1)
        else:
            raise RuntimeError(f"the server did not start: {log.read_text()[-2000:]}")
        await client.post(f"http://127.0.0.1:{port}/v1/sessions", json={"session_id": "s"})
    return proc, port, log


class Hostile:
    """The hostile connections and what became of them."""

    def __init__(self) -> None:
        self.writers: list[asyncio.StreamWriter] = []
        self.outcomes: dict[str, int] = {}

    def note(self, outcome: str) -> None:
        self.outcomes[outcome] = self.outcomes.get(outcome, 0) + 1

    async def one(self, port: int, mode: str, stop: asyncio.Event) -> None:
        try:
            reader, writer = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), 10)
        except (OSError, TimeoutError):
            self.note("connect failed")
            return
        self.writers.append(writer)
        try:
            if mode == "streams":
                writer.write(
                    b"GET /v1/sessions/s/events HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                    b"Accept: text/event-stream\r\n\r\n"
                )
                head = await asyncio.wait_for(reader.readuntil(b"\r\n"), 30)
                self.note(head.decode(errors="replace").strip())
                await stop.wait()
                return
            writer.write(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-a: ")
            while not stop.is_set():
                await writer.drain()
                read = asyncio.ensure_future(reader.read(200))
                stopped = asyncio.ensure_future(stop.wait())
                done, _ = await asyncio.wait(
                    {read, stopped}, timeout=3, return_when="FIRST_COMPLETED"
                )
                if read in done:
                    data = read.result()
                    stopped.cancel()
                    self.note(data.split(b"\r\n", 1)[0].decode(errors="replace") or "closed")
                    return
                read.cancel()
                stopped.cancel()
                writer.write(b"a")
            self.note("held to the end")
        except (OSError, asyncio.IncompleteReadError, TimeoutError) as exc:
            self.note(type(exc).__name__)

    def close(self) -> None:
        for writer in self.writers:
            writer.close()


async def legit(port: int, n: int = 20) -> dict[str, int]:
    answers: dict[str, int] = {}
    for _ in range(n):
        try:
            async with httpx.AsyncClient(timeout=5) as client:
                status = (await client.get(f"http://127.0.0.1:{port}/v1/sessions")).status_code
            key = str(status)
        except httpx.HTTPError as exc:
            key = type(exc).__name__
        answers[key] = answers.get(key, 0) + 1
    return answers


async def run(args: argparse.Namespace) -> None:
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 20000), hard))
    src = Path(args.src).resolve() if args.src else ROOT / "src"
    with tempfile.TemporaryDirectory() as tmp:
        proc, port, log = await start_server(src, Path(tmp), args.serve_args)
        try:
            hostile = Hostile()
            stop = asyncio.Event()
            started = time.monotonic()
            tasks = [
                asyncio.ensure_future(hostile.one(port, args.mode, stop))
                for _ in range(args.attackers)
            ]
            await asyncio.sleep(args.hold)
            answers = await legit(port)
            stop.set()
            await asyncio.gather(*tasks)
            hostile.close()
            took = time.monotonic() - started
            print(f"src {src}; {args.attackers} hostile ({args.mode}) for {took:.0f} s")
            print(f"  legitimate GET /v1/sessions x20: {answers}")
            print(f"  hostile outcomes: {dict(sorted(hostile.outcomes.items()))}")
            print(f"  server log: {log.stat().st_size:,} bytes; most written lines:")
            lines = Counter(log.read_text(errors="replace").splitlines())
            for line, count in lines.most_common(args.top):
                print(f"    {count:>7} x {line[:110]}")
        finally:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--attackers", type=int, default=1300)
    parser.add_argument("--mode", choices=["slowloris", "streams"], default="slowloris")
    parser.add_argument("--hold", type=float, default=15.0, help="seconds before the check")
    parser.add_argument("--src", help="the src directory of the tree to serve")
    parser.add_argument("--top", type=int, default=3, help="log lines to show")
    parser.add_argument("serve_args", nargs="*", help="more `steerloop serve` flags")
    asyncio.run(run(parser.parse_args()))


if __name__ == "__main__":
    main()
