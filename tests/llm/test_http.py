"""The HTTP helpers both adapters share: giving up a request, closing a response on abort.

The adapters' loopback tests drive them through real SDK streams; these pin the edge cases
of the race itself with stand-in responses.
"""

from __future__ import annotations

import asyncio

import pytest

from steerloop import AbortController, AbortedError
from steerloop.llm._http import ResponseGuard, open_response
from steerloop.testing import wait_all_tasks_blocked

from ..conftest import within


class Response:
    """A stand-in SDK stream: records its closes; ``read`` blocks until closed."""

    def __init__(self) -> None:
        self.closes = 0
        self._closed = asyncio.Event()

    async def close(self) -> None:
        self.closes += 1
        self._closed.set()

    async def read(self) -> None:
        await self._closed.wait()
        raise ConnectionError("the response was closed")


async def test_open_response_without_a_signal_just_awaits() -> None:
    response = Response()

    async def call() -> Response:
        return response

    assert await within(open_response(call(), None)) is response


async def test_abort_before_the_headers_gives_the_request_up() -> None:
    """G-5: the private task waiting for the headers is cancelled; AbortedError carries
    the reason, and no response is left open."""
    ctrl = AbortController()
    started = asyncio.Event()
    cancelled = asyncio.Event()

    async def call() -> Response:
        started.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.set()
            raise
        raise AssertionError("unreachable")

    pending = asyncio.ensure_future(open_response(call(), ctrl.signal))
    await within(started.wait())
    ctrl.abort("stop")
    with pytest.raises(AbortedError):
        await within(pending)
    assert cancelled.is_set()


async def test_a_response_that_arrives_as_the_signal_fires_is_closed() -> None:
    """G-5: the headers and the abort land in the same loop turn: the abort wins and the
    response it would have returned is closed, not leaked."""
    ctrl = AbortController()
    response = Response()

    async def call() -> Response:
        ctrl.abort("late")  # the abort fires while the call completes
        return response

    with pytest.raises(AbortedError):
        await within(open_response(call(), ctrl.signal))
    assert response.closes == 1


async def test_an_already_aborted_signal_sends_nothing() -> None:
    ctrl = AbortController()
    ctrl.abort("early")
    ran = False

    async def call() -> Response:
        nonlocal ran
        ran = True
        return Response()

    with pytest.raises(AbortedError):
        await within(open_response(call(), ctrl.signal))
    await wait_all_tasks_blocked()
    assert not ran


async def test_request_failures_propagate_unchanged() -> None:
    ctrl = AbortController()

    async def call() -> Response:
        raise ConnectionRefusedError("no server")

    with pytest.raises(ConnectionRefusedError, match="no server"):
        await within(open_response(call(), ctrl.signal))


async def test_guard_closes_the_response_on_abort_and_wakes_a_blocked_read() -> None:
    """G-5: an abort while a read is blocked closes the response; the read fails, and the
    final close() settles the scheduled close."""
    ctrl = AbortController()
    response = Response()
    guard = ResponseGuard(response, ctrl.signal)
    reading = asyncio.ensure_future(response.read())
    await wait_all_tasks_blocked()
    ctrl.abort("stop")
    with pytest.raises(ConnectionError):
        await within(reading)
    await within(guard.close())
    assert response.closes == 2  # the abort's close, then the final one (idempotent in SDKs)


async def test_guard_without_an_abort_closes_once_at_the_end() -> None:
    ctrl = AbortController()
    response = Response()
    guard = ResponseGuard(response, ctrl.signal)
    await within(guard.close())
    ctrl.abort("after the end")  # the listener is gone: nothing more happens
    await wait_all_tasks_blocked()
    assert response.closes == 1
