"""The adapter seam: ``LlmAdapter`` is one required protocol; ``prepare_call`` resolves it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from steerloop import AbortController
from steerloop.llm import CallConfig, GenerateRequest, LlmError, LlmService, ModelInfo
from steerloop.llm.chunks import StreamChunk
from steerloop.testing import ScriptedAdapter, text_response


class _StreamOnly:
    async def stream(self, request: GenerateRequest) -> AsyncIterator[StreamChunk]:
        for chunk in text_response("x"):
            yield chunk


class _Resolving(ScriptedAdapter):
    def __init__(self) -> None:
        super().__init__([])
        self.resolved: list[tuple[str, str]] = []

    async def resolve_model(self, provider: str, model: str) -> ModelInfo:
        self.resolved.append((provider, model))
        return ModelInfo(context_window=1234, defaults={"max_tokens": 99, "temperature": 0.5})


@pytest.mark.parametrize(
    "adapter", [_StreamOnly(), object(), "mock"], ids=["no-resolve", "obj", "str"]
)
def test_register_refuses_what_is_not_an_adapter(adapter: Any) -> None:
    """Both methods are required: nothing is probed later, so a half adapter is refused at
    registration with a message naming the protocol."""
    service = LlmService()
    with pytest.raises(ValueError, match="LlmAdapter"):
        service.register_adapter(["mock"], adapter)
    assert service.adapter_for("mock") is None


async def test_prepare_call_resolves_the_model() -> None:
    """resolve_model is awaited; its defaults apply only where the config leaves a gap."""
    service = LlmService()
    adapter = _Resolving()
    service.register_adapter(["p"], adapter)
    prepared = await service.prepare_call(CallConfig(provider="p", model="m", temperature=0.1))
    assert adapter.resolved == [("p", "m")]
    assert prepared.adapter is adapter and prepared.context_window == 1234
    assert dict(prepared.adapter_defaults) == {"max_tokens": 99}


@pytest.mark.parametrize(
    ("config", "code"),
    [
        (CallConfig(provider="p"), "NO_ROUTE"),
        (CallConfig(provider="nobody", model="m"), "NO_ADAPTER"),
    ],
)
async def test_prepare_call_failures(config: CallConfig, code: str) -> None:
    service = LlmService()
    service.register_adapter(["p"], ScriptedAdapter([]))
    with pytest.raises(LlmError) as info:
        await service.prepare_call(config)
    assert info.value.failure.code == code


async def test_prepare_call_after_an_abort_raises() -> None:
    service = LlmService()
    service.register_adapter(["p"], ScriptedAdapter([]))
    ctrl = AbortController()
    ctrl.abort("user")
    with pytest.raises(Exception) as info:
        await service.prepare_call(CallConfig(provider="p", model="m"), ctrl.signal)
    assert type(info.value).__name__ == "AbortedError"
