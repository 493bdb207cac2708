"""AbortController / AbortSignal: cooperative cancellation primitives."""

from __future__ import annotations

import asyncio
import gc
import logging

import pytest

from steerloop import AbortController, AbortedError
from steerloop.testing import wait_all_tasks_blocked


def test_first_abort_wins() -> None:
    """The first ``abort(reason)`` wins; later calls change nothing (CONTRACTS preamble)."""
    ctrl = AbortController()
    signal = ctrl.signal
    assert not signal.aborted
    assert signal.reason is None
    ctrl.abort("first")
    ctrl.abort("second")
    assert signal.aborted
    assert signal.reason == "first"


def test_abort_without_reason_is_still_aborted() -> None:
    """``abort()`` with no reason aborts; the reason is ``None``."""
    ctrl = AbortController()
    ctrl.abort()
    assert ctrl.signal.aborted
    assert ctrl.signal.reason is None


def test_listeners_called_once_synchronously_in_order() -> None:
    """Listeners run synchronously inside ``abort()``, in registration order, exactly once."""
    ctrl = AbortController()
    calls: list[tuple[str, object]] = []
    ctrl.signal.add_listener(lambda r: calls.append(("a", r)))
    ctrl.signal.add_listener(lambda r: calls.append(("b", r)))
    ctrl.signal.add_listener(lambda r: calls.append(("c", r)))
    assert calls == []
    ctrl.abort("why")
    assert calls == [("a", "why"), ("b", "why"), ("c", "why")]
    ctrl.abort("again")
    assert calls == [("a", "why"), ("b", "why"), ("c", "why")]


def test_listener_added_after_abort_runs_at_once() -> None:
    """A listener registered on an aborted signal is called immediately with the reason."""
    ctrl = AbortController()
    ctrl.abort("done")
    calls: list[object] = []
    dispose = ctrl.signal.add_listener(calls.append)
    assert calls == ["done"]
    dispose()  # disposing afterwards is harmless
    dispose()
    assert calls == ["done"]


def test_disposed_listener_is_not_called() -> None:
    """The disposer removes the listener; calling it twice is a no-op."""
    ctrl = AbortController()
    calls: list[str] = []
    dispose_a = ctrl.signal.add_listener(lambda _: calls.append("a"))
    ctrl.signal.add_listener(lambda _: calls.append("b"))
    dispose_a()
    dispose_a()
    ctrl.abort()
    assert calls == ["b"]


def test_listener_disposing_itself_does_not_skip_the_next() -> None:
    """A listener that disposes itself while the abort fires does not make the next one skip."""
    ctrl = AbortController()
    calls: list[str] = []
    disposers: dict[str, object] = {}

    def a(_: object) -> None:
        calls.append("a")
        disposers["a"]()  # type: ignore[operator]

    disposers["a"] = ctrl.signal.add_listener(a)
    ctrl.signal.add_listener(lambda _: calls.append("b"))
    ctrl.signal.add_listener(lambda _: calls.append("c"))
    ctrl.abort()
    assert calls == ["a", "b", "c"]


def test_listener_disposing_a_later_one_during_abort_prevents_it() -> None:
    """A listener disposed (by an earlier listener) before its turn is not called."""
    ctrl = AbortController()
    calls: list[str] = []
    later: dict[str, object] = {}
    ctrl.signal.add_listener(lambda _: (calls.append("a"), later["b"]()))  # type: ignore[operator, func-returns-value]
    later["b"] = ctrl.signal.add_listener(lambda _: calls.append("b"))
    ctrl.signal.add_listener(lambda _: calls.append("c"))
    ctrl.abort()
    assert calls == ["a", "c"]


def test_listener_added_during_abort_runs_at_once() -> None:
    """A listener registered by another listener during the abort runs immediately, once."""
    ctrl = AbortController()
    calls: list[str] = []

    def a(_: object) -> None:
        calls.append("a")
        ctrl.signal.add_listener(lambda _: calls.append("nested"))
        calls.append("a-end")

    ctrl.signal.add_listener(a)
    ctrl.signal.add_listener(lambda _: calls.append("b"))
    ctrl.abort()
    assert calls == ["a", "nested", "a-end", "b"]


def test_raising_listener_is_contained_and_logged(caplog: pytest.LogCaptureFixture) -> None:
    """A raising listener is logged; the others still run and the abort stands."""
    ctrl = AbortController()
    calls: list[str] = []

    def boom(_: object) -> None:
        raise RuntimeError("listener boom")

    ctrl.signal.add_listener(boom)
    ctrl.signal.add_listener(lambda _: calls.append("after"))
    with caplog.at_level(logging.ERROR, logger="steerloop"):
        ctrl.abort("r")
    assert calls == ["after"]
    assert ctrl.signal.aborted
    assert any("listener boom" in (r.exc_text or "") for r in caplog.records)


def test_throw_if_aborted() -> None:
    """``throw_if_aborted`` is silent before the abort and raises ``AbortedError(reason)`` after."""
    ctrl = AbortController()
    ctrl.signal.throw_if_aborted()
    ctrl.abort({"kind": "user"})
    with pytest.raises(AbortedError) as info:
        ctrl.signal.throw_if_aborted()
    assert info.value.reason == {"kind": "user"}
    # Every later checkpoint raises again.
    with pytest.raises(AbortedError):
        ctrl.signal.throw_if_aborted()


async def test_wait_returns_once_aborted() -> None:
    """``wait()`` blocks until the abort, then returns; several waiters all wake."""
    ctrl = AbortController()
    w1 = asyncio.ensure_future(ctrl.signal.wait())
    w2 = asyncio.ensure_future(ctrl.signal.wait())
    await wait_all_tasks_blocked()
    assert not w1.done() and not w2.done()
    ctrl.abort("x")
    await asyncio.wait_for(asyncio.gather(w1, w2), 1)


async def test_wait_on_aborted_signal_returns_immediately() -> None:
    """``wait()`` on an already aborted signal returns without blocking."""
    ctrl = AbortController()
    ctrl.abort()
    await asyncio.wait_for(ctrl.signal.wait(), 1)


async def test_cancelled_waiter_does_not_break_other_waiters() -> None:
    """Cancelling one ``wait()`` leaves the signal usable for the other waiters."""
    ctrl = AbortController()
    w1 = asyncio.ensure_future(ctrl.signal.wait())
    w2 = asyncio.ensure_future(ctrl.signal.wait())
    await wait_all_tasks_blocked()
    w1.cancel()
    with pytest.raises(asyncio.CancelledError):
        await w1
    ctrl.abort()
    await asyncio.wait_for(w2, 1)
    await asyncio.wait_for(ctrl.signal.wait(), 1)


async def test_race_returns_the_result_when_the_awaitable_wins() -> None:
    """``race`` returns the awaitable's result and leaves no listener behind."""
    ctrl = AbortController()
    gate = asyncio.Event()

    async def work() -> str:
        await gate.wait()
        return "ok"

    racing = asyncio.ensure_future(ctrl.signal.race(work()))
    await wait_all_tasks_blocked()
    gate.set()
    assert await asyncio.wait_for(racing, 1) == "ok"
    # A later abort is harmless: the race's listener was disposed.
    ctrl.abort()


async def test_race_propagates_the_awaitables_exception() -> None:
    """An exception of the awaitable propagates out of ``race``."""
    ctrl = AbortController()

    async def work() -> None:
        await asyncio.sleep(0)
        raise KeyError("inner")

    with pytest.raises(KeyError):
        await ctrl.signal.race(work())


async def test_race_raises_when_the_signal_wins_without_cancelling_the_loser() -> None:
    """An abort makes ``race`` raise ``AbortedError``; the losing awaitable keeps running."""
    ctrl = AbortController()
    gate = asyncio.Event()
    loser = asyncio.ensure_future(_wait_then(gate, "late"))
    racing = asyncio.ensure_future(ctrl.signal.race(loser))
    await wait_all_tasks_blocked()
    ctrl.abort("stop")
    with pytest.raises(AbortedError) as info:
        await asyncio.wait_for(racing, 1)
    assert info.value.reason == "stop"
    assert not loser.cancelled() and not loser.done()
    gate.set()
    assert await asyncio.wait_for(loser, 1) == "late"


async def test_race_on_aborted_signal_raises_at_once() -> None:
    """``race`` on an already aborted signal raises before awaiting anything."""
    ctrl = AbortController()
    ctrl.abort("early")
    fut: asyncio.Future[int] = asyncio.get_running_loop().create_future()
    with pytest.raises(AbortedError):
        await ctrl.signal.race(fut)
    assert not fut.cancelled()


async def test_race_closes_a_coroutine_it_will_never_run() -> None:
    """A coroutine handed to an already aborted signal is closed, not left unawaited."""
    ctrl = AbortController()
    ctrl.abort("early")
    started = False

    async def body() -> None:
        nonlocal started
        started = True

    coro = body()
    with pytest.raises(AbortedError):
        await ctrl.signal.race(coro)
    # closed: no "never awaited" warning when collected
    assert coro.cr_frame is None  # type: ignore[attr-defined]
    assert not started


async def test_race_consumes_the_failure_of_a_coroutine_that_lost() -> None:
    """The task ``race`` wrapped around a losing coroutine keeps running; when it fails
    later its exception is consumed, so the loop never reports it as never retrieved."""
    ctrl = AbortController()
    gate = asyncio.Event()
    reported: list[object] = []
    loop = asyncio.get_running_loop()
    loop.set_exception_handler(lambda _loop, context: reported.append(context))

    async def fails_later() -> None:
        await gate.wait()
        raise ValueError("late failure")

    racing = asyncio.ensure_future(ctrl.signal.race(fails_later()))
    await wait_all_tasks_blocked()
    ctrl.abort("stop")
    with pytest.raises(AbortedError):
        await asyncio.wait_for(racing, 1)
    gate.set()
    await wait_all_tasks_blocked()
    gc.collect()
    await wait_all_tasks_blocked()
    loop.set_exception_handler(None)
    assert reported == []


async def test_race_with_finished_future_returns_its_result() -> None:
    """A future that is already done wins immediately."""
    ctrl = AbortController()
    fut: asyncio.Future[int] = asyncio.get_running_loop().create_future()
    fut.set_result(7)
    assert await ctrl.signal.race(fut) == 7


async def _wait_then(gate: asyncio.Event, value: str) -> str:
    await gate.wait()
    return value


def test_same_function_registered_twice_is_disposed_per_registration() -> None:
    """Each registration has its own disposer, even for the same function."""
    ctrl = AbortController()
    calls: list[object] = []
    first = ctrl.signal.add_listener(calls.append)
    ctrl.signal.add_listener(calls.append)
    first()
    ctrl.abort("r")
    assert calls == ["r"]
