"""Builds the assistant message of one attempt from its chunks."""

from __future__ import annotations

from typing import Any

from ..messages import Block, ReasoningBlock, TextBlock, ToolCallBlock
from ._types import TokenUsage
from .chunks import (
    BlockEnd,
    BlockStart,
    Finish,
    FinishReason,
    ReasoningDelta,
    StreamChunk,
    TextDelta,
    ToolCallDelta,
    UsageChunk,
)

__all__ = ["BlockAssembler"]

_STOP = FinishReason(kind="stop")


class _Partial:
    __slots__ = ("args", "done", "id", "kind", "name", "parts")

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.parts: list[str] = []
        self.id = ""
        self.name = ""
        self.args: list[str] = []
        self.done: Block | None = None


class BlockAssembler:
    """Folds chunks into blocks by index; keeps usage and the finish."""

    def __init__(self) -> None:
        self._blocks: dict[int, _Partial] = {}
        self.usage: TokenUsage | None = None
        self.finish: Finish | None = None

    def push(self, chunk: StreamChunk) -> None:
        if isinstance(chunk, TextDelta):
            self._at(chunk.index, "text").parts.append(chunk.text)
        elif isinstance(chunk, ReasoningDelta):
            self._at(chunk.index, "reasoning").parts.append(chunk.text)
        elif isinstance(chunk, ToolCallDelta):
            part = self._at(chunk.index, "tool-call")
            part.id = chunk.id or part.id
            if chunk.name:
                part.name = chunk.name
            part.args.append(chunk.arguments_delta)
        elif isinstance(chunk, BlockStart):
            self._at(chunk.index, chunk.block_type)
        elif isinstance(chunk, BlockEnd):
            self._at(chunk.index, chunk.block.type).done = chunk.block
        elif isinstance(chunk, UsageChunk):
            self.usage = chunk.usage
        elif isinstance(chunk, Finish):
            self.finish = chunk

    def _at(self, index: int, kind: str) -> _Partial:
        part = self._blocks.get(index)
        if part is None:
            part = self._blocks[index] = _Partial(kind)
        return part

    @property
    def reason(self) -> FinishReason:
        """The finish reason; a stream without a finish counts as ``stop``."""
        return self.finish.reason if self.finish is not None else _STOP

    @property
    def replay_state(self) -> Any:
        return self.finish.replay_state if self.finish is not None else None

    def blocks(self) -> tuple[Block, ...]:
        """Every block in index order (tool calls included)."""
        out: list[Block] = []
        for index in sorted(self._blocks):
            block = self._build(self._blocks[index])
            if block is not None:
                out.append(block)
        return tuple(out)

    def safe_prefix(self) -> tuple[Block, ...]:
        """Text and reasoning received so far; never a tool call from partial JSON."""
        return tuple(
            b for b in self.blocks() if isinstance(b, TextBlock | ReasoningBlock) and b.text
        )

    @staticmethod
    def _build(part: _Partial) -> Block | None:
        if part.done is not None:
            return part.done
        if part.kind == "text":
            return TextBlock("".join(part.parts))
        if part.kind == "reasoning":
            return ReasoningBlock("".join(part.parts))
        if part.kind == "tool-call":
            return ToolCallBlock(part.id, part.name, "".join(part.args))
        return None
