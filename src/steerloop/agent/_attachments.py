"""Image and file blocks at the loop's two gates: the size caps when a message is sent, and
the model's input modalities before a request (``UNSUPPORTED_INPUT``, nothing sent)."""

from __future__ import annotations

from collections.abc import Sequence

from .._media import AttachmentLimits, human_size
from ..errors import LlmError
from ..llm._types import LlmFailure
from ..messages import FileBlock, ImageBlock, Message, ToolResultMessage, modality_of

__all__ = ["check_limits", "refuse_unsupported"]

_KINDS = {"image": "images", "file": "files (PDF)", "text": "text"}


def check_limits(message: Message, limits: AttachmentLimits) -> None:
    """Refuse a message whose attachments are over the caps (each block, and all together).

    Raises:
        ValueError: names the block and the cap.
    """
    total = 0
    for block in message.content:
        if not isinstance(block, ImageBlock | FileBlock):
            continue
        size = block.size or 0
        if size > limits.block_bytes:
            raise ValueError(
                f"{block.describe()} is over the limit of {human_size(limits.block_bytes)} "
                "per attachment"
            )
        total += size
    if total > limits.message_bytes:
        raise ValueError(
            f"the message's attachments ({human_size(total)}) are over the limit of "
            f"{human_size(limits.message_bytes)} per message"
        )


def refuse_unsupported(
    messages: Sequence[Message], accepted: frozenset[str], model: str, where: str
) -> None:
    """Raise ``UNSUPPORTED_INPUT`` naming the first block of ``messages`` whose kind the model
    does not accept (``where`` says which messages these are)."""
    for message in messages:
        for block in message.content:
            if isinstance(block, ImageBlock | FileBlock) and modality_of(block) not in accepted:
                owner = (
                    f"the result of tool call {message.call_id}"
                    if isinstance(message, ToolResultMessage)
                    else f"a {message.role} message"
                )
                raise LlmError(
                    LlmFailure(
                        message=(
                            f"{model} does not accept {_KINDS[modality_of(block)]}: "
                            f"{block.describe()} "
                            f"in {owner} ({where}); nothing was sent"
                        ),
                        code="UNSUPPORTED_INPUT",
                        retryable=False,
                    )
                )
