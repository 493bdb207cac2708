"""Every scenario from one command, one table: ``python bench/run_all.py``.

Options: ``--quick`` (fewer repeats), ``--no-peers`` (steerloop and the floor only),
``--only S1,S3``, ``--no-memory``. Peers (pydantic-ai, openai-agents, langgraph) are the
``bench`` extra: ``pip install -e '.[bench]'``; a missing one is skipped with a note.
All figures of a scenario come from the same process and the same repeats; ratios are
taken per repeat (each repeat runs every system back to back, rotating the order).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys

import _scenarios
from _harness import Row, environment, print_table, run_repeats

HERE = os.path.dirname(os.path.abspath(__file__))


def _memory(system: str, runs: int) -> dict[str, object] | str:
    proc = subprocess.run(
        [
            sys.executable,
            os.path.join(HERE, "memory.py"),
            "--system",
            system,
            "--runs",
            str(runs),
            "--json",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        return (proc.stdout + proc.stderr).strip().splitlines()[-1]
    return json.loads(proc.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--no-peers", action="store_true")
    parser.add_argument("--no-memory", action="store_true")
    parser.add_argument("--only", default="S1,S2,S3,S4")
    args = parser.parse_args()
    only = {s.strip().upper() for s in args.only.split(",")}
    with_peers = not args.no_peers
    repeats = (
        {"S1": 3, "S2": 3, "S3": 2, "S4": 3} if args.quick else {"S1": 9, "S2": 5, "S3": 3, "S4": 5}
    )
    print(environment())
    rows: list[Row] = []
    _found, missing = _scenarios.peers()
    if with_peers:
        for label, note in missing.items():
            print(f"note: {label} {note}")
    if "S1" in only:
        rows += await run_repeats(_scenarios.s1(with_peers=with_peers), repeats["S1"])
    if "S2" in only:
        rows += await run_repeats(_scenarios.s2(with_peers=with_peers), repeats["S2"])
    if "S3" in only:
        rows += await run_repeats(_scenarios.s3(with_peers=with_peers), repeats["S3"])
    if "S4" in only:
        rows += await run_repeats(_scenarios.s4(), repeats["S4"])
    if with_peers:
        for label, note in missing.items():
            for scenario in ("S1 per step", "S2 parallel tools", "S3 many agents"):
                if scenario[:2] in only:
                    rows.append(Row(scenario, label, "", note=note))
    print()
    print_table(rows)
    if "S3" in only and not args.no_memory:
        print()
        print("S3 memory (each system in a fresh process; RSS after gc.collect()):")
        systems = ["floor", "steerloop"]
        if with_peers:
            systems += [m.NAME for m in _found]
        for system in systems:
            runs = 6 if system == "steerloop" else 1
            got = _memory(system, runs)
            if isinstance(got, str):
                print(f"- {system}: {got}")
                continue
            line = (
                f"- {system}: peak RSS {got['peak_rss_first_run_mib']} MiB "
                f"(after imports {got['rss_before_mib']} MiB)"
            )
            if runs > 1:
                line += (
                    f"; RSS after each of {runs} runs {got['rss_after_each_run_mib']} MiB; "
                    f"tracemalloc retained after runs 4–6 "
                    f"{got['traced_retained_after_each_run_mib']} MiB"
                )
            print(line)


if __name__ == "__main__":
    asyncio.run(main())
