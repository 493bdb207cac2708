"""The in-process host's durability rounds (``_local_feed.Durability``): SSE readers and log pages
of live sessions serve only durable events, and however many of them ask at once, each
session is flushed once per round, one round at a time."""

from __future__ import annotations

import asyncio

import pytest

from steerloop import SessionStorageError
from steerloop.service._local_feed import Durability as _Durability
from steerloop.session import Session, SessionEvent
from steerloop.session._events import TurnStart
from steerloop.session._session import EventSink


class CountingSink(EventSink):
    """A sink whose flush is gated by the test and counted."""

    def __init__(self, fail: bool = False) -> None:
        self.flushes = 0
        self.fail = fail
        self.gate = asyncio.Event()

    async def flush(self) -> None:
        self.flushes += 1
        await self.gate.wait()
        if self.fail:
            raise SessionStorageError("disk full")


def session(session_id: str, sink: EventSink, events: int) -> Session:
    seed = [
        SessionEvent(seq=s, time=1, type="turn/start", data=TurnStart(turn=s))
        for s in range(1, events + 1)
    ]
    return Session._create(session_id, seed=seed, sink=sink, repair=False)


async def test_many_readers_share_one_flush_per_round() -> None:
    """Ten readers of one session and five of another wait for one round: each session is
    flushed once; a reader arriving while the round runs joins the next round (its events
    may have been written after that round's flush began), which flushes once more."""
    durable = _Durability()
    sink_a, sink_b = CountingSink(), CountingSink()
    a, b = session("a", sink_a, 3), session("b", sink_b, 2)
    first = [asyncio.create_task(durable.through("a", a, 3)) for _ in range(10)]
    first += [asyncio.create_task(durable.through("b", b, 2)) for _ in range(5)]
    async with asyncio.timeout(5):
        while sink_a.flushes + sink_b.flushes < 2:
            await asyncio.sleep(0)
    durable.marks["a"] = 0  # as if the round had not covered it yet
    late = asyncio.create_task(durable.through("a", a, 3))
    await asyncio.sleep(0)
    sink_a.gate.set()
    sink_b.gate.set()
    async with asyncio.timeout(5):
        await asyncio.gather(*first, late)
    assert (sink_a.flushes, sink_b.flushes) == (2, 1)
    assert durable.marks == {"a": a.next_seq - 1, "b": b.next_seq - 1}
    await durable.through("a", a, 3)  # already durable: no flush
    assert sink_a.flushes == 2


async def test_a_failed_flush_fails_only_its_own_readers() -> None:
    """A session whose flush fails raises to its readers (they fall back to the stored
    log); the other session of the round is marked durable."""
    durable = _Durability()
    bad, good = CountingSink(fail=True), CountingSink()
    bad.gate.set()
    good.gate.set()
    x, y = session("x", bad, 1), session("y", good, 4)
    results = await asyncio.wait_for(
        asyncio.gather(
            durable.through("x", x, 1), durable.through("y", y, 4), return_exceptions=True
        ),
        5,
    )
    assert isinstance(results[0], SessionStorageError)
    assert results[1] is None
    assert durable.marks == {"y": y.next_seq - 1}
    with pytest.raises(SessionStorageError, match="disk full"):
        await asyncio.wait_for(durable.through("x", x, 1), 5)
