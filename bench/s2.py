"""Scenario S2 alone: ``python bench/s2.py [--repeats N]`` (see ``_scenarios.py``)."""

from __future__ import annotations

import argparse
import asyncio

import _scenarios
from _harness import environment, print_table, run_repeats


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    print(environment())
    print_table(await run_repeats(_scenarios.s2(), args.repeats))


if __name__ == "__main__":
    asyncio.run(main())
