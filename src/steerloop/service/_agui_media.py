"""Images and documents in AG-UI user messages, both ways.

In: AG-UI 1.0 media parts (``image`` / ``document`` with a ``data`` or ``url`` source) become
the same blocks as the HTTP parts (``_content``), with the same caps. The pre-1.0
``binary`` part (``{"type": "binary", "mimeType", "data" | "url" | "id", "filename"}``),
which the 1.0 models no longer parse, is rewritten to its 1.0 equivalent before the input is
validated; an ``id`` (or a 1.0 ``file`` source: a provider's handle) names bytes this
service does not hold and is refused.

Out: a stored user message with images or files is shown in a ``MESSAGES_SNAPSHOT`` with
those parts, each by a ``url`` source naming the session's blob endpoint.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ag_ui.core import DocumentPart, ImagePart, InputContentUrlSource, TextPart

from ..messages import AttachmentLimits, Block
from ._content import FilePart, to_blocks
from ._content import ImagePart as HttpImagePart
from ._content import TextPart as HttpTextPart
from ._content import blob_url as url_of
from ._errors import ApiError

__all__ = ["agui_content", "snapshot_content", "upgrade_binary_parts"]


def upgrade_binary_parts(body: Mapping[str, Any]) -> Mapping[str, Any]:
    """``body`` (a ``RunAgentInput``) with each user message's pre-1.0 ``binary`` parts
    rewritten as 1.0 ``image`` / ``document`` parts; the same object when it has none."""
    messages = body.get("messages")
    if not isinstance(messages, list) or not any(_has_binary(m) for m in messages):
        return body
    return dict(body) | {"messages": [_upgraded(m) if _has_binary(m) else m for m in messages]}


def _has_binary(message: Any) -> bool:
    content = message.get("content") if isinstance(message, dict) else None
    return isinstance(content, list) and any(
        isinstance(p, dict) and p.get("type") == "binary" for p in content
    )


def _upgraded(message: dict[str, Any]) -> dict[str, Any]:
    parts = []
    for part in message["content"]:
        if not (isinstance(part, dict) and part.get("type") == "binary"):
            parts.append(part)
            continue
        mime = part.get("mimeType")
        if isinstance(part.get("data"), str):
            source: dict[str, Any] = {"type": "data", "value": part["data"], "mimeType": mime}
        elif isinstance(part.get("url"), str):
            source = {"type": "url", "value": part["url"], "mimeType": mime}
        else:
            raise ApiError(
                422,
                "invalid_content",
                "a binary part must carry data or url (this service holds no bytes by id)",
            )
        kind = "image" if isinstance(mime, str) and mime.startswith("image/") else "document"
        new: dict[str, Any] = {"type": kind, "source": source}
        if isinstance(part.get("filename"), str):
            new["metadata"] = {"filename": part["filename"]}
        parts.append(new)
    return message | {"content": parts}


def agui_content(content: Any, limits: AttachmentLimits) -> str | tuple[Block, ...]:
    """A user message's AG-UI content as text or blocks.

    Raises:
        ApiError: 422 for audio, video, a provider file handle or bad data; 413 past a cap.
    """
    if isinstance(content, str):
        return content
    parts: list[HttpTextPart | HttpImagePart | FilePart] = []
    for n, part in enumerate(content or ()):
        kind = getattr(part, "type", None)
        if kind == "text":
            parts.append(HttpTextPart(type="text", text=part.text))
            continue
        if kind not in ("image", "document"):
            raise ApiError(422, "invalid_content", f"content[{n}]: {kind} parts are not supported")
        source = part.source
        name = _filename(part.metadata)
        if source.type == "file":
            raise ApiError(
                422,
                "invalid_content",
                f"content[{n}]: a provider file handle names bytes this service does not hold",
            )
        mime = source.mime_type
        if kind == "image":
            data, url = (source.value, None) if source.type == "data" else (None, source.value)
            parts.append(
                HttpImagePart(type="image", media_type=mime, data=data, url=url, name=name)
            )
        elif source.type == "data" and isinstance(mime, str):
            parts.append(FilePart(type="file", media_type=mime, name=name, data=source.value))
        else:
            raise ApiError(
                422, "invalid_content", f"content[{n}]: a document needs inline data and its type"
            )
    if not parts:
        return ""
    return to_blocks(parts, limits)


def _filename(metadata: Any) -> str | None:
    if isinstance(metadata, dict):
        for key in ("filename", "name"):
            value = metadata.get(key)
            if isinstance(value, str) and value:
                return value
    return None


def snapshot_content(session_id: str, blocks: Any) -> list[Any] | None:
    """A stored user message's content for a ``MESSAGES_SNAPSHOT`` as parts when it has
    images or files (each by its blob URL); ``None`` when its text says it all."""
    if not isinstance(blocks, list) or not any(
        isinstance(b, dict) and b.get("type") in ("image", "file") for b in blocks
    ):
        return None
    out: list[Any] = []
    for block in blocks:
        if not isinstance(block, dict):
            continue
        kind = block.get("type")
        if kind == "text" and isinstance(block.get("text"), str):
            out.append(TextPart(text=block["text"]))
        elif kind in ("image", "file"):
            hash, url = block.get("blob"), block.get("url")
            where = url_of(session_id, hash) if isinstance(hash, str) else url
            if not isinstance(where, str):
                continue
            source = InputContentUrlSource(value=where, mime_type=block.get("media_type"))
            meta = {"filename": block["name"]} if isinstance(block.get("name"), str) else None
            made = ImagePart if kind == "image" else DocumentPart
            out.append(made(source=source, metadata=meta))
    return out
