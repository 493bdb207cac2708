"""One MCP content item as a steerloop block: text, images and embedded resources as image
and file blocks; what a model cannot read as a short note (never inline base64).

MCP servers are untrusted: base64 is decoded strictly, an image must be what its MIME type
says, and a name comes only from the last segment of the resource URI.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from urllib.parse import unquote, urlsplit

import mcp_types as types

from ..messages import (
    IMAGE_MEDIA_TYPES,
    Block,
    FileBlock,
    ImageBlock,
    TextBlock,
    check_file_media_type,
    human_size,
)

__all__ = ["block_from_mcp"]

_NAME = re.compile(r"[^A-Za-z0-9._ -]+")


def block_from_mcp(item: object) -> Block:
    """The block for one item of an MCP tool result's ``content``."""
    if isinstance(item, types.TextContent):
        return TextBlock(item.text)
    if isinstance(item, types.ImageContent):
        return _binary(item.data, item.mime_type, None, "image")
    if isinstance(item, types.EmbeddedResource):
        resource = item.resource
        name = _name(resource.uri)
        if isinstance(resource, types.TextResourceContents):
            media_type = resource.mime_type or "text/plain"
            try:
                check_file_media_type(media_type)
            except ValueError:
                media_type = "text/plain"  # it is text, whatever the server called it
            return FileBlock(media_type, resource.text.encode("utf-8"), name)
        if isinstance(resource, types.BlobResourceContents):
            return _binary(resource.blob, resource.mime_type, name, f"resource {resource.uri}")
    if isinstance(item, types.AudioContent):
        return TextBlock(f"[audio ({item.mime_type}) omitted: models here take no audio]")
    dumped = getattr(item, "model_dump", None)
    if dumped is None:
        return TextBlock(f"[{type(item).__name__} content omitted]")
    content = dumped(mode="json", by_alias=True, exclude_none=True)
    return TextBlock(json.dumps(content, ensure_ascii=False))


def _binary(data: str, media_type: str | None, name: str | None, what: str) -> Block:
    try:
        raw = base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        return TextBlock(f"[{what} omitted: its data is not valid base64]")
    kind = media_type or "application/octet-stream"
    try:
        if kind in IMAGE_MEDIA_TYPES:
            return ImageBlock(kind, raw, name=name)
        return FileBlock(kind, raw, name)
    except ValueError as exc:
        return TextBlock(f"[{what} ({kind}, {human_size(len(raw))}) omitted: {exc}]")


def _name(uri: str) -> str | None:
    """A plain file name from the last path segment of ``uri`` (``None`` if it has none)."""
    try:
        path = unquote(urlsplit(uri).path)
    except ValueError:
        return None
    name = _NAME.sub("_", path.rsplit("/", 1)[-1]).strip(" .")[:255]
    return name or None
