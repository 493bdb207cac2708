"""Image and file blocks in tool results: checked against the size caps and against what the
calling model accepts, before the result is recorded.

A tool result is the model's own request answered, so an attachment that cannot go (too
large, or a kind the model does not take) is replaced by a text note that says why: the
model reads the reason and the call is still answered. Anything that is not a content block
fails the call (it could not be stored).
"""

from __future__ import annotations

from .._media import AttachmentLimits, human_size
from ..messages import (
    Block,
    FileBlock,
    ImageBlock,
    ReasoningBlock,
    TextBlock,
    ToolCallBlock,
    modality_of,
)
from ._define import ToolError, ToolExec, ToolResult

__all__ = ["fit_result"]

_BLOCKS = (TextBlock, ImageBlock, FileBlock, ReasoningBlock, ToolCallBlock)


def fit_result(result: ToolResult, exec: ToolExec, limits: AttachmentLimits) -> ToolResult:
    """``result`` with every attachment the caps or the model refuse replaced by a note."""
    content = result.content
    if isinstance(content, str):
        return result
    blocks = tuple(content)
    for block in blocks:
        if not isinstance(block, _BLOCKS):
            return ToolResult(
                content=f"the tool returned {type(block).__name__}, not a content block",
                is_error=True,
                error=ToolError("TOOL_FAILED"),
                meta=result.meta,
            )
    if not any(isinstance(b, ImageBlock | FileBlock) for b in blocks):
        return result
    fitted: list[Block] = []
    total = 0
    changed = False
    for block in blocks:
        if isinstance(block, ImageBlock | FileBlock):
            note = _refusal(block, exec.input_modalities, limits, total)
            if note is not None:
                fitted.append(TextBlock(f"[{block.describe()} omitted: {note}]"))
                changed = True
                continue
            total += block.size or 0
        fitted.append(block)
    if not changed:
        return result
    return ToolResult(
        content=fitted,
        is_error=result.is_error,
        error=result.error,
        concludes_turn=result.concludes_turn,
        meta=result.meta,
    )


def _refusal(
    block: ImageBlock | FileBlock, accepted: frozenset[str], limits: AttachmentLimits, total: int
) -> str | None:
    if modality_of(block) not in accepted:
        return f"the model does not accept {modality_of(block)}s"
    size = block.size or 0
    if size > limits.block_bytes:
        return f"it is over the limit of {human_size(limits.block_bytes)} per attachment"
    if total + size > limits.message_bytes:
        return f"the result's attachments would exceed {human_size(limits.message_bytes)}"
    return None
