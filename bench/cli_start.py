"""How fast the command line starts: ``steerloop --version``, ``--help``, and ``steerloop run``
from its start to the moment its first request reaches the model server.

Run: ``python bench/cli_start.py [--repeats 15]`` (targets on a quiet machine: ``--version``
and ``--help`` <= 150 ms, ``run`` to its first request <= 400 ms).

Each figure is wall time of a fresh process (``python -m steerloop.cli``, as the ``steerloop``
script runs it), min / median / max over the repeats; ``python -c pass`` on the same machine
is the floor every process pays (interpreter and site start-up), and each figure is also given
as a ratio to it, measured in the same run. ``run`` talks to a loopback OpenAI-compatible
server (provider ``local`` through ``STEERLOOP_OPENAI_BASE_URL``) with an in-memory store and
no workspace tools: the time until the server has read the request's headers, then the
process is killed (its answer is not part of the start).
"""

from __future__ import annotations

import argparse
import os
import platform
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CLI = [sys.executable, "-m", "steerloop.cli"]


def _env(home: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("STEERLOOP_")}
    for name in ("DEEPSEEK_API_KEY", "OPENAI_API_KEY", "ANTHROPIC_API_KEY", "OPENAI_BASE_URL"):
        env.pop(name, None)
    env.update(
        HOME=str(home),
        XDG_CONFIG_HOME=str(home / "config"),
        XDG_DATA_HOME=str(home / "data"),
        PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT / "src"), env.get("PYTHONPATH")])),
        **extra,
    )
    return env


def timed(argv: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    return time.perf_counter() - start


def first_request(env: dict[str, str], cwd: Path) -> float:
    """Seconds from starting ``steerloop run`` to its request's headers at a loopback server."""
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    arrived: list[float] = []

    def accept() -> None:
        conn, _ = listener.accept()
        with conn:
            data = b""
            while b"\r\n\r\n" not in data:
                chunk = conn.recv(65536)
                if not chunk:
                    return
                data += chunk
            arrived.append(time.perf_counter())

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    run_env = {**env, "STEERLOOP_OPENAI_BASE_URL": f"http://127.0.0.1:{port}/v1",
               "STEERLOOP_OPENAI_MODEL": "m"}  # fmt: skip
    argv = [*CLI, "run", "hi", "--store", "memory://", "--no-tools", "--no-retry"]
    start = time.perf_counter()
    proc = subprocess.Popen(argv, env=run_env, cwd=cwd, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)  # fmt: skip
    thread.join(timeout=60)
    proc.kill()
    proc.wait()
    listener.close()
    if not arrived:
        raise RuntimeError("steerloop run sent no request within 60 s")
    return arrived[0] - start


def _row(name: str, values: list[float], floor: float) -> str:
    ms = sorted(v * 1000 for v in values)
    return (
        f"| {name} | {ms[0]:.0f} / {statistics.median(ms):.0f} / {ms[-1]:.0f} ms "
        f"| {statistics.median(values) / floor:.2f} × floor |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=15)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp)
        env = _env(home)
        floors, version, helps, runs = [], [], [], []
        timed([*CLI, "--version"], env)  # warm the file cache and bytecode
        first_request(env, home)
        for _ in range(args.repeats):  # interleaved: load changes hit every figure alike
            floors.append(timed([sys.executable, "-c", "pass"], env))
            version.append(timed([*CLI, "--version"], env))
            helps.append(timed([*CLI, "--help"], env))
            runs.append(first_request(env, home))
    floor = statistics.median(floors)
    load = os.getloadavg()
    print(f"python {platform.python_version()}, {platform.system()} {platform.machine()}, "
          f"{os.cpu_count()} cores, load {load[0]:.2f} / {load[1]:.2f}, "
          f"{args.repeats} repeats (min / median / max)\n")  # fmt: skip
    print("| measurement | wall time | ratio, same run |")
    print("|---|---|---|")
    print(_row("python -c pass (floor)", floors, floor))
    print(_row("steerloop --version", version, floor))
    print(_row("steerloop --help", helps, floor))
    print(_row("steerloop run, start to first request", runs, floor))


if __name__ == "__main__":
    main()
