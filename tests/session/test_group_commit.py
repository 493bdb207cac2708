"""The group committer both database stores drive (``store._group``), on its own."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from steerloop import SessionConflictError, SessionStorageError
from steerloop.session.store._group import (
    Append,
    Barrier,
    Close,
    GroupCommitter,
    Publish,
    Stop,
    Waiter,
)


async def test_a_failed_writer_is_dropped_and_its_close_releases_before_it_settles() -> None:
    """Sticky failure and close ordering: a failed writer's later events never reach the
    backend; its close settles with the failure only after its lease was released, and
    the failure is forgotten afterwards; a healthy writer's events and barrier go through."""
    group = GroupCommitter("test")
    group.fail(1, (SessionConflictError, "lease taken over"))
    group.fail(1, (SessionStorageError, "a later failure"))  # the first one wins
    order: list[str] = []
    closing, flushing, reading = Waiter(), Waiter(), Waiter()
    ops: list[Any] = [
        Publish(2, "b", {"id": "b"}, 0, [(1, "{}")]),
        Append(1, ("a", 5, "{}")),
        Append(2, ("b", 2, "{}")),
        Barrier(2, flushing),
        Barrier(None, reading),
        Close(1, closing, lambda: order.append("released")),
    ]
    batch = group.plan(ops)
    assert list(batch.units) == [2]
    unit = batch.units[2]
    assert unit.publish is ops[0] and unit.rows == [("b", 2, "{}")] and unit.first_seq() == 1
    assert batch.durable
    assert group.finish(batch) is None
    assert order == ["released"] and not closing.future.done()
    group.deliver()  # on the waiters' own loop: settled at once
    assert closing.future.done() and flushing.future.done()
    with pytest.raises(SessionConflictError, match="lease taken over"):
        await closing.future
    await flushing.future
    await reading.future
    assert 1 not in group.failed


async def test_a_read_barrier_alone_needs_no_sync_and_a_stop_is_left_to_the_driver() -> None:
    """A barrier without a writer only orders a read (no durable commit); a stop is handed
    back to the driver with the sync error, settled once the backend is closed."""
    group = GroupCommitter("test")
    reading = Waiter()
    assert not group.plan([Barrier(None, reading)]).durable
    stop = Stop(Waiter())
    batch = group.plan([Append(3, ("c", 1, "{}")), stop])
    assert batch.durable
    assert group.finish(batch, "syncing failed") is stop
    assert group.stop_error == "syncing failed"
    assert not stop.waiter.future.done()


async def test_settlements_from_another_thread_reach_the_loop_in_one_wake_up() -> None:
    """A writer thread's settlements are posted to each waiter's loop, not set from the
    thread; a cancelled waiter is skipped."""
    group = GroupCommitter("test")
    first, second, cancelled = Waiter(), Waiter(), Waiter()
    cancelled.future.cancel()
    for waiter in (first, second, cancelled):
        group.resolve(waiter, None)
    group.resolve(second, SessionStorageError("disk full"))  # already settled: ignored
    await asyncio.get_running_loop().run_in_executor(None, group.deliver)
    await asyncio.wait_for(first.future, 5)
    await second.future
    assert cancelled.future.cancelled()
