"""LlmService.stream(): every failure becomes one terminal ``Finish``."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from steerloop import AbortController
from steerloop.llm import GenerateRequest, LlmService, ModelInfo
from steerloop.llm.chunks import Finish, StreamChunk, TextDelta
from steerloop.testing import ScriptedAdapter, raise_after, text_response


def _request(signal: Any = None, provider: str = "mock") -> GenerateRequest:
    return GenerateRequest(provider=provider, model="m", messages=(), signal=signal)


async def _collect(service: LlmService, request: GenerateRequest) -> list[StreamChunk]:
    return [chunk async for chunk in service.stream(request)]


def _terminal(chunks: list[StreamChunk]) -> Finish:
    assert chunks, "the stream yielded nothing"
    last = chunks[-1]
    assert isinstance(last, Finish)
    assert sum(isinstance(c, Finish) for c in chunks) == 1
    return last


async def test_stream_passes_chunks_through() -> None:
    """A healthy adapter's chunks come out unchanged."""
    service = LlmService()
    script = text_response("hi")
    service.register_adapter(["mock"], ScriptedAdapter([script]))
    assert await _collect(service, _request()) == script


async def test_no_adapter_gives_an_error_finish() -> None:
    """No adapter for the provider → a terminal ``error`` finish, nothing raised."""
    finish = _terminal(await _collect(LlmService(), _request(provider="nobody")))
    assert finish.reason.kind == "error"
    assert finish.reason.failure is not None
    assert finish.reason.failure.code == "NO_ADAPTER"


class _RaisingBeforeStream:
    async def resolve_model(self, provider: str, model: str) -> ModelInfo:
        return ModelInfo()

    async def stream(self, request: GenerateRequest) -> AsyncIterator[StreamChunk]:
        raise ConnectionError("refused")
        yield  # pragma: no cover - makes this an async generator


class _RaisingResolve:
    async def resolve_model(self, provider: str, model: str) -> ModelInfo:
        raise RuntimeError("resolve failed")

    async def stream(self, request: GenerateRequest) -> AsyncIterator[StreamChunk]:
        yield TextDelta(index=0, text="never")  # pragma: no cover


class _RaisingOnCall:
    async def resolve_model(self, provider: str, model: str) -> ModelInfo:
        return ModelInfo()

    def stream(self, request: GenerateRequest) -> AsyncIterator[StreamChunk]:
        raise ValueError("bad request shape")


@pytest.mark.parametrize(
    ("adapter", "text"),
    [
        (_RaisingBeforeStream(), "refused"),
        (_RaisingResolve(), "resolve failed"),
        (_RaisingOnCall(), "bad request shape"),
    ],
    ids=["first-iteration", "resolve_model", "stream-call"],
)
async def test_adapter_raising_before_the_stream_gives_an_error_finish(
    adapter: Any, text: str
) -> None:
    """An adapter failing before its first chunk → one terminal ``error`` finish."""
    service = LlmService()
    service.register_adapter(["mock"], adapter)
    chunks = await _collect(service, _request())
    assert len(chunks) == 1
    finish = _terminal(chunks)
    assert finish.reason.kind == "error"
    assert finish.reason.failure is not None
    assert text in finish.reason.failure.message


async def test_adapter_raising_during_the_stream_gives_an_error_finish() -> None:
    """Chunks before the failure are delivered, then one terminal ``error`` finish."""
    service = LlmService()
    partial = [TextDelta(index=0, text="par")]
    service.register_adapter(["mock"], ScriptedAdapter([raise_after(partial, OSError("reset"))]))
    chunks = await _collect(service, _request())
    assert chunks[:-1] == partial
    finish = _terminal(chunks)
    assert finish.reason.kind == "error"
    assert finish.reason.failure is not None
    assert "reset" in finish.reason.failure.message


async def test_exhausted_script_gives_an_error_finish() -> None:
    """The scripted adapter's ``script exhausted`` failure is normalised too."""
    service = LlmService()
    service.register_adapter(["mock"], ScriptedAdapter([]))
    finish = _terminal(await _collect(service, _request()))
    assert finish.reason.kind == "error"
    assert finish.reason.failure is not None
    assert "script exhausted" in finish.reason.failure.message


async def test_aborted_signal_gives_an_aborted_finish() -> None:
    """A request whose signal is already aborted → a terminal ``aborted`` finish, no chunks."""
    service = LlmService()
    adapter = ScriptedAdapter([text_response("unused")])
    service.register_adapter(["mock"], adapter)
    ctrl = AbortController()
    ctrl.abort("user")
    chunks = await _collect(service, _request(ctrl.signal))
    finish = _terminal(chunks)
    assert len(chunks) == 1
    assert finish.reason.kind == "aborted"


async def test_failure_after_abort_mid_stream_gives_an_aborted_finish() -> None:
    """An adapter that fails after the request was aborted mid-stream → ``aborted`` finish."""
    service = LlmService()
    ctrl = AbortController()

    class _AbortThenFail:
        async def resolve_model(self, provider: str, model: str) -> ModelInfo:
            return ModelInfo()

        async def stream(self, request: GenerateRequest) -> AsyncIterator[StreamChunk]:
            yield TextDelta(index=0, text="a")
            ctrl.abort("user")
            raise ConnectionError("closed by abort")

    service.register_adapter(["mock"], _AbortThenFail())
    chunks = await _collect(service, _request(ctrl.signal))
    assert chunks[0] == TextDelta(index=0, text="a")
    assert _terminal(chunks).reason.kind == "aborted"
