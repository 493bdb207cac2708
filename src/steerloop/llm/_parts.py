"""Image and file blocks in each provider's wire format (one function per format and kind).

Every format takes the bytes inline as base64 (a block read back from a store has had its
bytes loaded before the request is built; a block without bytes here is a bug). Text files
go as text where a format has no text document (OpenAI chat completions takes only PDF
files; the Responses API would extract a text file's text itself, so sending the text is
the same to the model and works with every OpenAI-compatible server).
"""

from __future__ import annotations

import base64
from collections.abc import Callable, Iterable
from typing import Any

from .._media import is_text_media_type
from ..messages import Block, FileBlock, ImageBlock, TextBlock

__all__ = [
    "anthropic_part",
    "chat_part",
    "content_parts",
    "file_label",
    "has_binary",
    "responses_part",
]


def has_binary(blocks: Iterable[Block]) -> bool:
    """Whether ``blocks`` hold an image or a file (else a message stays a plain string)."""
    return any(isinstance(b, ImageBlock | FileBlock) for b in blocks)


def content_parts(
    blocks: Iterable[Block],
    text_type: str,
    binary_part: Callable[[ImageBlock | FileBlock], dict[str, Any]],
) -> list[dict[str, Any]]:
    """A message's text and attachments as a format's content parts, in order."""
    parts: list[dict[str, Any]] = []
    for block in blocks:
        if isinstance(block, TextBlock):
            if block.text:
                parts.append({"type": text_type, "text": block.text})
        elif isinstance(block, ImageBlock | FileBlock):
            parts.append(binary_part(block))
    return parts


_DEFAULT_NAMES = {"application/pdf": "attachment.pdf"}


def _data(block: ImageBlock | FileBlock) -> bytes:
    if block.data is None:
        raise ValueError(f"{block.describe()} has no bytes in hand (they load before a request)")
    return block.data


def _base64(block: ImageBlock | FileBlock) -> str:
    return base64.b64encode(_data(block)).decode("ascii")


def _data_url(block: ImageBlock | FileBlock) -> str:
    return f"data:{block.media_type};base64,{_base64(block)}"


def file_label(block: FileBlock) -> str:
    """The file's name, or a default one for its type."""
    return block.name or _DEFAULT_NAMES.get(block.media_type, "attachment.txt")


def _file_text(block: FileBlock) -> str:
    """A text file as text, headed by its name (the model should know where it ends)."""
    text = _data(block).decode("utf-8")
    return f'<file name="{file_label(block)}" type="{block.media_type}">\n{text}\n</file>'


def chat_part(block: ImageBlock | FileBlock) -> dict[str, Any]:
    """OpenAI chat completions: ``image_url`` (a data URL or the URL), ``file`` (a PDF as a
    data URL), or a text file as ``text``."""
    if isinstance(block, ImageBlock):
        url = block.url if block.url is not None else _data_url(block)
        return {"type": "image_url", "image_url": {"url": url}}
    if is_text_media_type(block.media_type):
        return {"type": "text", "text": _file_text(block)}
    return {"type": "file", "file": {"filename": file_label(block), "file_data": _data_url(block)}}


def responses_part(block: ImageBlock | FileBlock) -> dict[str, Any]:
    """OpenAI Responses: ``input_image`` / ``input_file``, or a text file as ``input_text``."""
    if isinstance(block, ImageBlock):
        url = block.url if block.url is not None else _data_url(block)
        return {"type": "input_image", "image_url": url, "detail": "auto"}
    if is_text_media_type(block.media_type):
        return {"type": "input_text", "text": _file_text(block)}
    return {"type": "input_file", "filename": file_label(block), "file_data": _data_url(block)}


def anthropic_part(block: ImageBlock | FileBlock) -> dict[str, Any]:
    """Anthropic Messages: ``image`` (base64 or URL source) or ``document`` (a base64 PDF, or
    a text file as a plain-text source), titled with the file's name."""
    if isinstance(block, ImageBlock):
        if block.url is not None:
            return {"type": "image", "source": {"type": "url", "url": block.url}}
        source = {"type": "base64", "media_type": block.media_type, "data": _base64(block)}
        return {"type": "image", "source": source}
    if is_text_media_type(block.media_type):
        text = _data(block).decode("utf-8")
        document: dict[str, Any] = {
            "type": "document",
            "source": {"type": "text", "media_type": "text/plain", "data": text},
        }
    else:
        document = {
            "type": "document",
            "source": {"type": "base64", "media_type": "application/pdf", "data": _base64(block)},
        }
    document["title"] = file_label(block)
    return document
