"""Shared pieces of the scenarios: the work every system does, timing, and the table.

Every system in a scenario does the same work with its own fake-model interface: the
model answers request ``i`` with one call of the async ``echo`` tool (arguments
``{"x": i}``) until the step budget is spent, then with the text ``done``; ``echo``
validates ``x: int``, yields to the event loop once and returns ``"echo {x}"``.
Numbers are only compared within one run: each repeat measures every system back to
back (in rotating order) and ratios are taken per repeat.
"""

from __future__ import annotations

import asyncio
import gc
import os
import platform
import resource
import statistics
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel

__all__ = [
    "EchoArgs",
    "Row",
    "Scenario",
    "echo_text",
    "environment",
    "peak_rss_mib",
    "print_table",
    "rss_mib",
    "run_repeats",
    "timed",
]


class EchoArgs(BaseModel):
    x: int


async def echo_text(x: int) -> str:
    """The body of ``echo`` in every system: one event-loop yield, then the text."""
    await asyncio.sleep(0)
    return f"echo {x}"


async def timed(run: Callable[[], Awaitable[Any]]) -> float:
    """Seconds ``run()`` took, after a full collection so garbage of earlier runs is gone."""
    gc.collect()
    start = time.perf_counter()
    await run()
    return time.perf_counter() - start


@dataclass
class Row:
    """One table row: a system's figures in one scenario, one value per repeat."""

    scenario: str
    system: str
    unit: str
    values: list[float] = field(default_factory=list)
    ratios: list[float] = field(default_factory=list)
    ratio_of: str = ""
    config: str = ""
    note: str = ""


Measure = Callable[[], Awaitable[float]]


@dataclass
class Scenario:
    """A scenario: systems measured back to back each repeat, ratios against ``baseline``."""

    name: str
    unit: str
    config: str
    systems: dict[str, Measure]
    baseline: str
    ratio_of: str
    notes: dict[str, str] = field(default_factory=dict)
    warmup: int = 1


async def run_repeats(scenario: Scenario, repeats: int) -> list[Row]:
    """Measure every system ``repeats`` times, rotating the order; ratios per repeat."""
    names = list(scenario.systems)
    rows = {
        n: Row(
            scenario.name,
            n,
            scenario.unit,
            ratio_of=scenario.ratio_of,
            config=scenario.config,
            note=scenario.notes.get(n, ""),
        )
        for n in names
    }
    for _ in range(scenario.warmup):
        for name in names:
            await scenario.systems[name]()
    for r in range(repeats):
        order = names[r % len(names) :] + names[: r % len(names)]
        got = {name: await scenario.systems[name]() for name in order}
        for name in names:
            rows[name].values.append(got[name])
            rows[name].ratios.append(got[name] / got[scenario.baseline])
    return [rows[n] for n in names]


def _fmt(value: float) -> str:
    if value >= 100:
        return f"{value:,.0f}"
    if value >= 10:
        return f"{value:.1f}"
    return f"{value:.2f}"


def _triple(values: Sequence[float]) -> str:
    return f"{_fmt(min(values))} / {_fmt(statistics.median(values))} / {_fmt(max(values))}"


def print_table(rows: Sequence[Row], file: Any = None) -> None:
    """A Markdown table: min / median / max of each figure and of its same-run ratio."""
    out = file or sys.stdout
    print(
        "| scenario | system | figure (min / median / max) | ratio, same run "
        "(min / median / max) | configuration |",
        file=out,
    )
    print("|---|---|---|---|---|", file=out)
    for row in rows:
        if not row.values:
            print(f"| {row.scenario} | {row.system} | skipped | | {row.note} |", file=out)
            continue
        ratio = f"{_triple(row.ratios)} {row.ratio_of}" if row.ratio_of else ""
        config = row.config + (f"; {row.note}" if row.note else "")
        print(
            f"| {row.scenario} | {row.system} | {_triple(row.values)} {row.unit} | {ratio} "
            f"| {config} |",
            file=out,
        )


def rss_mib() -> float:
    """Current resident set size of this process (Linux ``VmRSS``), MiB."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def peak_rss_mib() -> float:
    """Peak resident set size of this process image so far (Linux ``VmHWM``), MiB.

    Not ``ru_maxrss``: that survives ``exec`` and would report the parent's peak.
    """
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def environment() -> str:
    from importlib.metadata import PackageNotFoundError, version

    versions = []
    for name in ("steerloop", "pydantic", "pydantic-ai-slim", "openai-agents", "langgraph"):
        try:
            versions.append(f"{name} {version(name)}")
        except PackageNotFoundError:
            versions.append(f"{name} -")
    load = os.getloadavg()
    return (
        f"python {platform.python_version()} ({platform.python_implementation()}), "
        f"{platform.system()} {platform.machine()}, {os.cpu_count()} cpus, "
        f"load avg {load[0]:.2f}/{load[1]:.2f}/{load[2]:.2f}; " + ", ".join(versions)
    )
