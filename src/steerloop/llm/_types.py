"""Records of the LLM seam: call config, requests, failures, usage, adapters."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from .._media import MODALITIES
from .._model import LlmFailure, TokenUsage
from .._records import fast_init
from ..messages import Message

if TYPE_CHECKING:
    from .._signal import AbortSignal
    from .chunks import StreamChunk

__all__ = [
    "CallConfig",
    "ClosableAdapter",
    "GenerateRequest",
    "LlmAdapter",
    "LlmFailure",
    "ModelInfo",
    "RetryPolicy",
    "TokenUsage",
    "ToolSchema",
]


@fast_init
@dataclass(frozen=True, slots=True, kw_only=True)
class CallConfig:
    """The frozen route of one request; return ``config.replace(...)`` from ``agent/request``.

    ``tool_choice`` is ``"auto"``, ``"none"``, ``"required"``, ``{"name": TOOL}`` (that tool)
    or a provider's own mapping, sent verbatim; with ``parallel_tool_calls`` it is sent only
    on a request that offers tools, each adapter in its wire format. ``extra`` holds provider
    fields carried verbatim.

    ``output_schema`` (a JSON schema whose root is an object) asks the model for a JSON answer
    matching it, the provider's native way; set it only where ``ModelInfo.json_schema_output``
    says the model supports that. It is per turn: ``from_json`` (which restores the route of
    the last logged header for a later request) leaves it out, so it never outlives its turn.
    """

    provider: str | None = None
    model: str | None = None
    max_tokens: int | None = None
    reasoning_effort: str | None = None
    temperature: float | None = None
    top_p: float | None = None
    tool_choice: str | Mapping[str, Any] | None = None
    parallel_tool_calls: bool | None = None
    extra: Mapping[str, Any] | None = None
    output_schema: Mapping[str, Any] | None = None

    def replace(self, **changes: Any) -> CallConfig:
        return dataclasses.replace(self, **changes)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if value is not None:
                out[f.name] = dict(value) if isinstance(value, Mapping) else value
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> CallConfig:
        names = {f.name for f in dataclasses.fields(cls)} - _PER_TURN
        return cls(**{k: v for k, v in data.items() if k in names})


_PER_TURN = frozenset({"output_schema"})


@fast_init
@dataclass(frozen=True, slots=True, kw_only=True)
class RetryPolicy:
    """Advice for an ``agent/request-error`` listener; the loop itself never retries."""

    max_attempts: int = 4
    base_delay_ms: int = 500
    max_delay_ms: int = 30_000


@fast_init
@dataclass(frozen=True, slots=True, kw_only=True)
class ModelInfo:
    """What an adapter knows about a model: limits and adapter defaults.

    ``json_schema_output``: the adapter sends ``CallConfig.output_schema`` the provider's
    native way (OpenAI ``response_format``); otherwise structured output uses a tool.

    ``input_modalities``: what the model takes in messages (``"text"``, ``"image"``,
    ``"file"``); a request holding a block of another kind is never sent (the turn ends
    ``UNSUPPORTED_INPUT``). Unknown to an adapter: everything.
    """

    context_window: int | None = None
    max_output_tokens: int | None = None
    defaults: Mapping[str, Any] = field(default_factory=dict)
    reads_in_history_system: bool = False
    retry_policy: RetryPolicy = field(default_factory=RetryPolicy)
    json_schema_output: bool = False
    input_modalities: frozenset[str] = MODALITIES


@fast_init
@dataclass(frozen=True, slots=True, kw_only=True)
class ToolSchema:
    """A tool as the model sees it."""

    name: str
    description: str
    parameters: Mapping[str, Any]


@fast_init
@dataclass(frozen=True, slots=True, kw_only=True)
class GenerateRequest:
    """One frozen model request; ``messages`` is exactly ``session.derive_messages()``."""

    provider: str
    model: str
    messages: tuple[Message, ...]
    tools: tuple[ToolSchema, ...] = ()
    max_tokens: int | None = None
    reasoning_effort: str | None = None
    session_id: str | None = None
    signal: AbortSignal | None = None
    config: CallConfig | None = None


@runtime_checkable
class LlmAdapter(Protocol):
    """A provider: streams chunks for a request and resolves model facts."""

    def stream(self, request: GenerateRequest) -> AsyncIterator[StreamChunk]: ...

    async def resolve_model(self, provider: str, model: str) -> ModelInfo | None: ...


@runtime_checkable
class ClosableAdapter(Protocol):
    """An adapter holding resources (an HTTP client) that ``aclose()`` releases."""

    async def aclose(self) -> None: ...
