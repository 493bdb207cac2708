"""S3 memory: peak RSS of one S3 run in a fresh process, and growth across repeated runs.

Run: ``python bench/memory.py [--system steerloop] [--runs 6] [--json]``.

Each run is S3 (``--agents`` agents × ``--steps`` steps, concurrently) with a fresh runtime.
After every run: ``gc.collect()``, then RSS. Runs after the first half also trace
allocations (``tracemalloc``, started after the first half); with no leak, memory retained
after a run stays flat: the traced figure does not grow with the run count.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import tracemalloc

from _harness import peak_rss_mib, rss_mib
from systems import PEERS, floor, load, steerloop_system


def _module(system: str):  # type: ignore[no-untyped-def]
    if system == "steerloop":
        return steerloop_system
    if system == "floor":
        return floor
    for module, (label, _dist) in PEERS.items():
        if label == system:
            mod, note = load(module)
            if mod is None:
                raise SystemExit(note)
            return mod
    raise SystemExit(f"unknown system {system!r}")


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--system", default="steerloop")
    parser.add_argument("--runs", type=int, default=6)
    parser.add_argument("--agents", type=int, default=200)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--json", action="store_true", help="print one JSON line only")
    args = parser.parse_args()
    mod = _module(args.system)
    gc.collect()
    before = rss_mib()
    rss: list[float] = []
    traced: list[float] = []
    peak_first = 0.0
    half = max(1, args.runs // 2)
    for run in range(args.runs):
        if run == half:
            tracemalloc.start()
        await mod.s3(args.agents, args.steps)
        gc.collect()
        if run == 0:
            peak_first = peak_rss_mib()
        rss.append(rss_mib())
        if tracemalloc.is_tracing():
            traced.append(tracemalloc.get_traced_memory()[0] / 2**20)
    result = {
        "system": args.system,
        "agents": args.agents,
        "steps": args.steps,
        "rss_before_mib": round(before, 1),
        "peak_rss_first_run_mib": round(peak_first, 1),
        "rss_after_each_run_mib": [round(r, 1) for r in rss],
        "traced_retained_after_each_run_mib": [round(t, 3) for t in traced],
    }
    if args.json:
        print(json.dumps(result))
        return
    print(
        f"{args.system}: S3 = {args.agents} agents × {args.steps} steps; RSS after imports "
        f"{before:.1f} MiB; peak RSS during the first run {peak_first:.1f} MiB"
    )
    print("RSS after gc, per run (MiB): " + ", ".join(f"{r:.1f}" for r in rss))
    print(
        f"tracemalloc (started before run {half + 1}), retained after gc per run (MiB): "
        + ", ".join(f"{t:.3f}" for t in traced)
    )


if __name__ == "__main__":
    asyncio.run(main())
