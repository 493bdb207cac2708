"""The LLM seam: adapters by provider and call preparation (``rt.llm``)."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from .._hooks import Disposer
from .._media import MODALITIES
from .._signal import AbortSignal
from ..errors import LlmError
from ._assembler import BlockAssembler
from ._types import (
    CallConfig,
    ClosableAdapter,
    GenerateRequest,
    LlmAdapter,
    LlmFailure,
    ModelInfo,
    RetryPolicy,
)
from .chunks import StreamChunk

__all__ = ["LlmService", "PreparedCall"]

_log = logging.getLogger("steerloop.llm")


@dataclass(frozen=True, slots=True, kw_only=True)
class PreparedCall:
    """A call config frozen for one request, with what the adapter contributes."""

    config: CallConfig
    adapter: LlmAdapter
    adapter_defaults: Mapping[str, Any] = field(default_factory=dict)
    retry_policy: RetryPolicy = field(default_factory=RetryPolicy)
    context_window: int | None = None
    reads_in_history_system: bool = False
    input_modalities: frozenset[str] = MODALITIES

    @property
    def provider(self) -> str:
        assert self.config.provider is not None
        return self.config.provider

    @property
    def model(self) -> str:
        assert self.config.model is not None
        return self.config.model

    def open_stream(self, request: GenerateRequest) -> AsyncIterator[StreamChunk]:
        """Obtain the adapter's iterator (the stream counts as started once this returns)."""
        return aiter(self.adapter.stream(request))

    async def collect(self, request: GenerateRequest) -> BlockAssembler:
        """Stream ``request`` into a ``BlockAssembler`` until it ends or its signal aborts
        (a request outside the loop: a summary, a server's sample); the stream is closed
        either way. The caller reads the assembler's blocks, usage and finish."""
        assembler = BlockAssembler()
        signal = request.signal
        iterator = self.open_stream(request)
        try:
            while signal is None or not signal.aborted:
                try:
                    chunk = await anext(iterator)
                except StopAsyncIteration:
                    break
                assembler.push(chunk)
        finally:
            aclose = getattr(iterator, "aclose", None)
            if aclose is not None:
                await aclose()
        return assembler


class LlmService:
    """Adapter registry and request preparation (``rt.llm``).

    Ownership: registering an adapter hands it to the runtime. ``aclose()`` (called by
    ``Runtime.close()``) closes every adapter still registered, once each; disposing a
    registration takes the adapter back, and closing it is then the caller's business.
    """

    def __init__(self) -> None:
        self._adapters: dict[str, list[LlmAdapter]] = {}

    def register_adapter(
        self, providers: str | list[str] | tuple[str, ...], adapter: LlmAdapter
    ) -> Disposer:
        """Serve ``providers`` (one name or a list) with ``adapter``; the latest registration
        wins."""
        if isinstance(providers, str):
            providers = (providers,)
        if not isinstance(providers, list | tuple) or not providers:
            raise ValueError("providers must be a provider name or a non-empty list of names")
        if not isinstance(adapter, LlmAdapter):
            raise ValueError(
                "an adapter implements LlmAdapter: stream(request) and "
                "resolve_model(provider, model)"
            )
        for name in providers:
            if not isinstance(name, str) or not name:
                raise ValueError("provider names must be non-empty strings")
            self._adapters.setdefault(name, []).append(adapter)

        def dispose() -> None:
            for name in providers:
                stack = self._adapters.get(name, [])
                if adapter in stack:
                    stack.remove(adapter)

        return Disposer(dispose)

    async def aclose(self) -> None:
        """Close every registered adapter that has an ``aclose()`` (its HTTP client), once.

        Never raises: a failing close is logged and the others still run, so the runtime's
        close goes on to the store.
        """
        adapters = {id(a): a for stack in self._adapters.values() for a in stack}
        self._adapters.clear()
        for adapter in adapters.values():
            if isinstance(adapter, ClosableAdapter):
                try:
                    await adapter.aclose()
                except Exception:
                    _log.warning("closing adapter %r failed", adapter, exc_info=True)

    def adapter_for(self, provider: str) -> LlmAdapter | None:
        stack = self._adapters.get(provider)
        return stack[-1] if stack else None

    async def prepare_call(
        self, config: CallConfig, signal: AbortSignal | None = None
    ) -> PreparedCall:
        """Resolve the adapter and model facts for ``config``.

        Raises:
            LlmError: the provider or model is missing, or no adapter serves the provider.
        """
        if not config.provider or not config.model:
            missing = [n for n in ("provider", "model") if not getattr(config, n)]
            raise LlmError(
                LlmFailure(
                    message=f"no {' or '.join(missing)} configured for the request "
                    "(set AgentOptions or route it in agent/request)",
                    code="NO_ROUTE",
                )
            )
        assert config.provider is not None and config.model is not None
        adapter = self.adapter_for(config.provider)
        if adapter is None:
            raise LlmError(
                LlmFailure(
                    message=f"no adapter registered for provider {config.provider!r}",
                    code="NO_ADAPTER",
                )
            )
        info = await adapter.resolve_model(config.provider, config.model)
        if signal is not None:
            signal.throw_if_aborted()
        info = info or _NO_INFO
        defaults = {k: v for k, v in info.defaults.items() if getattr(config, k, None) is None}
        return PreparedCall(
            config=config,
            adapter=adapter,
            adapter_defaults=defaults,
            retry_policy=info.retry_policy,
            context_window=info.context_window,
            reads_in_history_system=info.reads_in_history_system,
            input_modalities=frozenset(info.input_modalities),
        )


_NO_INFO = ModelInfo()
