"""Normalised stream chunks every adapter yields, and their JSON form."""

from .._model import (
    BlockEnd,
    BlockStart,
    Finish,
    FinishReason,
    ReasoningDelta,
    StreamChunk,
    TextDelta,
    ToolCallDelta,
    UsageChunk,
    chunk_to_json,
)
from .._model import BlockType as BlockType
from .._model import FinishKind as FinishKind

__all__ = [
    "BlockEnd",
    "BlockStart",
    "Finish",
    "FinishReason",
    "ReasoningDelta",
    "StreamChunk",
    "TextDelta",
    "ToolCallDelta",
    "UsageChunk",
    "chunk_to_json",
]
