"""``steerloop.testing.wait_all_tasks_blocked``: returns once nothing else can run."""

from __future__ import annotations

import asyncio

import pytest

from steerloop.testing import wait_all_tasks_blocked


async def test_returns_after_a_chain_of_wakeups_has_run_out() -> None:
    """A task that needs many loop iterations to reach its wait has reached it."""
    gate = asyncio.Event()
    steps: list[int] = []

    async def worker() -> None:
        for i in range(50):  # fifty hops through the ready queue before it blocks
            steps.append(i)
            await asyncio.sleep(0)
        await gate.wait()
        steps.append(-1)

    task = asyncio.create_task(worker())
    await wait_all_tasks_blocked()
    assert steps == list(range(50))
    gate.set()
    await wait_all_tasks_blocked()
    assert steps[-1] == -1
    assert task.done()


async def test_follows_futures_and_callbacks_across_tasks() -> None:
    """A wake-up passed from task to task through futures is followed to its end."""
    order: list[str] = []
    first: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    async def relay(name: str, waits: asyncio.Future[None], wakes: asyncio.Future[None]) -> None:
        await waits
        order.append(name)
        wakes.set_result(None)

    futures = [asyncio.get_running_loop().create_future() for _ in range(4)]
    chain = [first, *futures]
    tasks = [asyncio.create_task(relay(f"t{i}", chain[i], chain[i + 1])) for i in range(4)]
    first.set_result(None)
    await wait_all_tasks_blocked()
    assert order == ["t0", "t1", "t2", "t3"]
    await asyncio.gather(*tasks)


async def test_a_task_on_a_timer_counts_as_blocked() -> None:
    """A sleeping task is blocked (as in trio), so this returns before the timer fires."""
    task = asyncio.create_task(asyncio.sleep(30))
    await wait_all_tasks_blocked()
    assert not task.done()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_a_busy_task_is_a_clear_error_not_a_hang() -> None:
    """A task that never blocks makes the wait fail after its bound."""
    stop = False

    async def spin() -> None:
        while not stop:
            await asyncio.sleep(0)

    task = asyncio.create_task(spin())
    with pytest.raises(RuntimeError, match="did not settle within 200 iterations"):
        await wait_all_tasks_blocked(max_iterations=200)
    stop = True
    await task


async def test_rejects_nonsense_bounds() -> None:
    """``settle`` must be at least one and within ``max_iterations``."""
    with pytest.raises(ValueError):
        await wait_all_tasks_blocked(settle=0)
    with pytest.raises(ValueError):
        await wait_all_tasks_blocked(settle=5, max_iterations=4)
