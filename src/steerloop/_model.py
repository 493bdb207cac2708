"""Records the session log and the model seam share: failures, usage and stream chunks.

They sit below both layers: the log stores them verbatim and adapters produce them. Their public
homes are ``steerloop.llm`` (``LlmFailure``, ``TokenUsage``) and ``steerloop.llm.chunks``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, TypeAlias

from ._records import fast_init
from .messages import Block, block_to_json

__all__ = [
    "BlockEnd",
    "BlockStart",
    "Finish",
    "FinishReason",
    "LlmFailure",
    "ReasoningDelta",
    "StreamChunk",
    "TextDelta",
    "TokenUsage",
    "ToolCallDelta",
    "UsageChunk",
    "chunk_to_json",
]


@fast_init
@dataclass(frozen=True, slots=True, kw_only=True)
class LlmFailure:
    """Facts of a failed model request, recorded verbatim in the log."""

    message: str
    code: str
    status: int | None = None
    retryable: bool | None = None
    provider_retry_after_ms: int | None = None
    request_id: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {k: v for k, v in dataclasses.asdict(self).items() if v is not None}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> LlmFailure:
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})


@fast_init
@dataclass(frozen=True, slots=True, kw_only=True)
class TokenUsage:
    """Disjoint token counts of one attempt."""

    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int | None = None
    cache_write_tokens: int | None = None
    reasoning_tokens: int | None = None

    def to_json(self) -> dict[str, Any]:
        return {k: v for k, v in dataclasses.asdict(self).items() if v is not None}


BlockType = Literal["text", "reasoning", "tool-call"]
FinishKind = Literal["stop", "tool-calls", "max-tokens", "error", "aborted"]


@fast_init
@dataclass(frozen=True, slots=True, kw_only=True)
class BlockStart:
    index: int
    block_type: BlockType
    kind: Literal["block-start"] = "block-start"


@fast_init
@dataclass(frozen=True, slots=True, kw_only=True)
class TextDelta:
    index: int
    text: str
    kind: Literal["text-delta"] = "text-delta"


@fast_init
@dataclass(frozen=True, slots=True, kw_only=True)
class ReasoningDelta:
    index: int
    text: str
    kind: Literal["reasoning-delta"] = "reasoning-delta"


@fast_init
@dataclass(frozen=True, slots=True, kw_only=True)
class ToolCallDelta:
    index: int
    id: str
    arguments_delta: str
    name: str | None = None
    kind: Literal["tool-call-delta"] = "tool-call-delta"


@fast_init
@dataclass(frozen=True, slots=True, kw_only=True)
class BlockEnd:
    index: int
    block: Block
    kind: Literal["block-end"] = "block-end"


@fast_init
@dataclass(frozen=True, slots=True, kw_only=True)
class UsageChunk:
    usage: TokenUsage
    kind: Literal["usage"] = "usage"


@fast_init
@dataclass(frozen=True, slots=True, kw_only=True)
class FinishReason:
    """Why a stream ended; ``failure`` is set for ``error`` and ``aborted``."""

    kind: FinishKind
    failure: LlmFailure | None = None


@fast_init
@dataclass(frozen=True, slots=True, kw_only=True)
class Finish:
    reason: FinishReason
    replay_state: Any = None
    kind: Literal["finish"] = "finish"


StreamChunk: TypeAlias = (
    BlockStart | TextDelta | ReasoningDelta | ToolCallDelta | BlockEnd | UsageChunk | Finish
)


def chunk_to_json(chunk: StreamChunk) -> dict[str, Any]:
    """The JSON form stored in a ``StreamRecord``."""
    if isinstance(chunk, BlockStart):
        return {"kind": chunk.kind, "index": chunk.index, "block_type": chunk.block_type}
    if isinstance(chunk, TextDelta | ReasoningDelta):
        return {"kind": chunk.kind, "index": chunk.index, "text": chunk.text}
    if isinstance(chunk, ToolCallDelta):
        out: dict[str, Any] = {
            "kind": chunk.kind,
            "index": chunk.index,
            "id": chunk.id,
            "arguments_delta": chunk.arguments_delta,
        }
        if chunk.name is not None:
            out["name"] = chunk.name
        return out
    if isinstance(chunk, BlockEnd):
        return {"kind": chunk.kind, "index": chunk.index, "block": block_to_json(chunk.block)}
    if isinstance(chunk, UsageChunk):
        return {"kind": chunk.kind, "usage": chunk.usage.to_json()}
    if isinstance(chunk, Finish):
        reason: dict[str, Any] = {"kind": chunk.reason.kind}
        if chunk.reason.failure is not None:
            reason["failure"] = chunk.reason.failure.to_json()
        out = {"kind": chunk.kind, "reason": reason}
        if chunk.replay_state is not None:
            out["replay_state"] = chunk.replay_state
        return out
    raise ValueError(f"not a stream chunk: {chunk!r}")
