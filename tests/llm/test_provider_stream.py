"""``provider_stream``: the lifecycle every adapter shares, driven with a minimal
``ProviderCall`` over an in-memory SDK-like stream (the adapters' own tests drive it over
loopback HTTP)."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import AsyncIterator, Awaitable, Iterable, Sequence
from typing import Any

import pytest

from steerloop import AbortController
from steerloop.llm import LlmFailure
from steerloop.llm._provider_stream import ProviderCall, provider_stream
from steerloop.llm.chunks import Finish, FinishReason, StreamChunk, TextDelta


class _Response:
    def __init__(self, request_id: str | None) -> None:
        self.headers = {"x-id": request_id} if request_id else {}


class _SdkStream:
    """Yields ``events``; then raises ``fail`` if given. ``closed`` counts close() calls.

    Shaped like the OpenAI SDK's stream: ``_iterator`` is made at once and refers back to the
    stream (a reference cycle), and ``__aiter__`` is a generator of its own over it."""

    def __init__(self, events: Sequence[Any], fail: Exception | None = None) -> None:
        self.events = list(events)
        self.fail = fail
        self.closed = 0
        self.outer_closed = False  # the generator __aiter__ gave has run its finally
        self.iterator_closed = False  # the stream's own generator has run its finally
        self.response = _Response("req-1")
        self._iterator = self._iterate()

    async def __aiter__(self) -> AsyncIterator[Any]:
        try:
            async for event in self._iterator:
                yield event
        finally:
            self.outer_closed = True

    async def _iterate(self) -> AsyncIterator[Any]:
        try:
            for event in self.events:
                await asyncio.sleep(0)
                yield event
            if self.fail is not None:
                raise self.fail
        finally:
            self.iterator_closed = True

    async def close(self) -> None:
        self.closed += 1


class _Call:
    request_id_header = "x-id"

    def __init__(self, streams: list[_SdkStream], *, pauses: int = 0) -> None:
        self.streams = streams
        self.opened: list[_SdkStream] = []
        self.pauses = pauses
        self.done = False

    async def _open(self) -> _SdkStream:
        stream = self.streams.pop(0)
        self.opened.append(stream)
        return stream

    def open(self) -> Awaitable[Any]:
        return self._open()

    def feed(self, event: Any) -> Iterable[StreamChunk]:
        return [TextDelta(index=0, text=str(event))]

    def end(self, request_id: str | None) -> list[StreamChunk] | None:
        if self.pauses:
            self.pauses -= 1
            return None
        return [Finish(reason=FinishReason(kind="stop"))]

    def failure(self, exc: Exception) -> LlmFailure | None:
        if isinstance(exc, KeyError):
            return None  # not the SDK's: the template must let it through
        return LlmFailure(message=str(exc), code="CONNECTION", retryable=True)


async def collect(call: ProviderCall, signal: Any = None, **kw: Any) -> list[StreamChunk]:
    return [c async for c in provider_stream(call, signal, **kw)]


def test_the_fake_call_is_a_provider_call() -> None:
    call: ProviderCall = _Call([])  # type-checks against the protocol
    assert call.request_id_header == "x-id"


async def test_events_then_the_decoder_finish_and_one_close() -> None:
    stream = _SdkStream(["a", "b"])
    chunks = await collect(_Call([stream]))
    assert [getattr(c, "text", c.kind) for c in chunks] == ["a", "b", "finish"]
    assert stream.closed == 1


class _DoneAfterFirst(_Call):
    """A decoder that knows the response is complete after its first event."""

    def feed(self, event: Any) -> Iterable[StreamChunk]:
        self.done = True
        return super().feed(event)


async def test_the_sdk_iterator_left_by_a_complete_response_is_closed_in_the_request() -> None:
    """A response complete before its stream ends (``call.done``) leaves the loop with the
    SDK's iterators suspended; the template closes both (what ``aiter`` gave and the stream's
    own, which a reference cycle would leave to the collector) before it returns.

    Counterexample this pins (seen once in CI): left to the collector, the Responses SDK's
    iterator was finalized after its client had closed and failed there ("async generator
    already executing"). Measured with the collector off.
    """
    stream = _SdkStream(["a", "b", "c"])
    collecting = gc.isenabled()
    gc.disable()
    try:
        chunks = await collect(_DoneAfterFirst([stream]))
        assert stream.outer_closed and stream.iterator_closed
    finally:
        if collecting:
            gc.enable()
    assert [getattr(c, "text", c.kind) for c in chunks] == ["a", "finish"]
    assert stream.closed == 1


async def test_a_transport_failure_gets_the_request_id() -> None:
    stream = _SdkStream(["a"], fail=OSError("reset"))
    chunks = await collect(_Call([stream]))
    finish = chunks[-1]
    assert isinstance(finish, Finish) and finish.reason.kind == "error"
    assert finish.reason.failure == LlmFailure(
        message="reset", code="CONNECTION", retryable=True, request_id="req-1"
    )
    assert stream.closed == 1


async def test_an_exception_the_call_disowns_is_raised_after_the_close() -> None:
    stream = _SdkStream(["a"], fail=KeyError("bug"))
    with pytest.raises(KeyError):
        await collect(_Call([stream]))
    assert stream.closed == 1


async def test_an_aborted_signal_opens_nothing() -> None:
    ctrl = AbortController()
    ctrl.abort("user")
    call = _Call([_SdkStream(["a"])])
    (finish,) = await collect(call, ctrl.signal)
    assert isinstance(finish, Finish) and finish.reason.kind == "aborted"
    assert finish.reason.failure is not None and finish.reason.failure.code == "ABORTED"
    assert call.opened == []


async def test_an_abort_mid_stream_wins_over_the_failure_it_causes() -> None:
    ctrl = AbortController()
    stream = _SdkStream(["a"], fail=OSError("closed by the guard"))
    chunks = []
    async for chunk in provider_stream(_Call([stream]), ctrl.signal):
        chunks.append(chunk)
        ctrl.abort("user")
    assert [c.kind for c in chunks] == ["text-delta", "finish"]
    last = chunks[-1]
    assert isinstance(last, Finish) and last.reason.kind == "aborted"
    assert stream.closed >= 1


async def test_a_continued_turn_reopens_up_to_max_opens() -> None:
    """``end`` returning None sends the request again into the same stream; past
    ``max_opens`` the stream ends with PAUSED."""
    call = _Call([_SdkStream(["a"]), _SdkStream(["b"])], pauses=1)
    chunks = await collect(call, max_opens=2)
    assert [getattr(c, "text", c.kind) for c in chunks] == ["a", "b", "finish"]
    looping = _Call([_SdkStream(["a"]), _SdkStream(["b"])], pauses=5)
    chunks = await collect(looping, max_opens=2)
    last = chunks[-1]
    assert isinstance(last, Finish) and last.reason.failure is not None
    assert last.reason.failure.code == "PAUSED"
    assert all(s.closed == 1 for s in looping.opened)
