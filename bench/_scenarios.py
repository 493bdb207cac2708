"""The four scenarios as ``Scenario`` objects over the installed systems."""

from __future__ import annotations

import os
import tempfile
from types import ModuleType

from _harness import Scenario
from systems import PEERS, floor, load, steerloop_system

__all__ = ["peers", "s1", "s2", "s3", "s4"]


def peers() -> tuple[list[ModuleType], dict[str, str]]:
    """Installed peer modules, and a skip note for each missing one."""
    found, missing = [], {}
    for module, (label, _dist) in PEERS.items():
        mod, note = load(module)
        if mod is None:
            missing[label] = note
        else:
            found.append(mod)
    return found, missing


def _systems(mods: list[ModuleType]) -> list[ModuleType]:
    return [floor, steerloop_system, *mods]


def s1(steps: int = 200, with_peers: bool = True) -> Scenario:
    mods = _systems(peers()[0] if with_peers else [])

    def measure(mod: ModuleType):  # type: ignore[no-untyped-def]
        async def run() -> float:
            return await mod.s1(steps) * 1e6

        return run

    return Scenario(
        name="S1 per step",
        unit="µs/step",
        config=f"1 agent, {steps} steps × 1 async echo call + final answer, in-memory",
        systems={m.NAME: measure(m) for m in mods},
        baseline=floor.NAME,
        ratio_of="× floor",
    )


def s2(calls: int = 16, delay: float = 0.05, with_peers: bool = True) -> Scenario:
    mods = _systems(peers()[0] if with_peers else [])

    def measure(mod: ModuleType):  # type: ignore[no-untyped-def]
        async def run() -> float:
            return await mod.s2(calls, delay) / delay

        return run

    return Scenario(
        name="S2 parallel tools",
        unit="× 50 ms",
        config=f"1 step, {calls} tool calls each sleeping {delay * 1000:.0f} ms; pool {calls}",
        systems={m.NAME: measure(m) for m in mods},
        baseline=floor.NAME,
        ratio_of="× floor",
    )


def s3(agents: int = 200, steps: int = 20, with_peers: bool = True) -> Scenario:
    mods = _systems(peers()[0] if with_peers else [])

    def measure(mod: ModuleType):  # type: ignore[no-untyped-def]
        async def run() -> float:
            return await mod.s3(agents, steps)  # type: ignore[no-any-return]

        return run

    return Scenario(
        name="S3 many agents",
        unit="steps/s",
        config=f"{agents} agents × ({steps} echo steps + final answer), concurrent, in-memory",
        systems={m.NAME: measure(m) for m in mods},
        baseline=floor.NAME,
        ratio_of="× floor",
    )


def s4(steps: int = 200, turns: int = 20) -> Scenario:
    directory = tempfile.mkdtemp(prefix="steerloop-bench-s4-")
    counter = [0]

    async def memory() -> float:
        return await steerloop_system.s1(steps, None, turns) * 1e6

    async def sqlite() -> float:
        counter[0] += 1
        path = os.path.join(directory, f"s4-{counter[0]}.db")
        try:
            return await steerloop_system.s1(steps, f"sqlite:///{path}", turns) * 1e6
        finally:
            for suffix in ("", "-wal", "-shm"):
                if os.path.exists(path + suffix):
                    os.remove(path + suffix)

    return Scenario(
        name="S4 durable",
        unit="µs/step",
        config=(
            f"S1's {steps} steps as {turns} turns of {steps // turns}, "
            f"await session.flush() after each turn; SQLite in {directory}"
        ),
        systems={"steerloop in-memory": memory, "steerloop SQLite": sqlite},
        baseline="steerloop in-memory",
        ratio_of="× in-memory",
    )
