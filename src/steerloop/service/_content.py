"""A message's ``content`` over HTTP: a string, or a list of parts (text, image, file) whose
bytes travel as base64 (README "Images and files").

The parts are pydantic models (what the request says); ``to_blocks`` turns them into the
message's blocks with the runtime's size caps, refusing what no block may hold. The log
keeps each image or file once by hash; what the service hands back (``with_blob_urls``)
names it by ``blob_url``, ``GET /v1/sessions/{id}/blobs/{hash}``, never inline.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Sequence
from typing import Annotated, Any, Literal
from urllib.parse import quote, urlsplit

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    model_validator,
)
from pydantic_core import PydanticCustomError

from .. import FileBlock, ImageBlock
from ..agent import check_limits
from ..messages import AttachmentLimits, Block, TextBlock, human_size, media_type_of, user_message
from ._errors import ApiError
from ._text import check_texts

__all__ = [
    "MAX_PARTS",
    "Content",
    "ContentPart",
    "FilePart",
    "ImagePart",
    "TextPart",
    "attachment_chars",
    "blob_url",
    "body_limit_for",
    "to_blocks",
    "with_blob_urls",
]

MAX_PARTS = 64
"""The most parts one message may have."""
_TYPES = ("text", "image", "file")


def _text(value: str) -> str:
    try:
        check_texts(value, "content")
    except ApiError as exc:
        raise PydanticCustomError("invalid_text", exc.message) from None
    return value


_Text = Annotated[str, AfterValidator(_text)]
_Name = Annotated[str, Field(min_length=1, max_length=255), AfterValidator(_text)]
_MediaType = Annotated[str, Field(min_length=3, max_length=129)]


class _Part(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class TextPart(_Part):
    """``{"type": "text", "text"}``."""

    type: Literal["text"]
    text: _Text


class ImagePart(_Part):
    """``{"type": "image", "media_type"?, "data"}`` (base64) or ``{"type": "image", "url"}``:
    a PNG, JPEG, GIF or WEBP image (its type read from its bytes when not given)."""

    type: Literal["image"]
    media_type: _MediaType | None = None
    data: str | None = None
    url: Annotated[str, Field(max_length=8192)] | None = None
    name: _Name | None = None

    @model_validator(mode="after")
    def _one_source(self) -> ImagePart:
        if (self.data is None) == (self.url is None):
            raise PydanticCustomError("invalid_content", "an image part takes data or url")
        return self


class FilePart(_Part):
    """``{"type": "file", "media_type", "name"?, "data"}`` (base64): a PDF or a text file."""

    type: Literal["file"]
    media_type: _MediaType
    name: _Name | None = None
    data: str


def _part_type(value: Any) -> Any:
    """An unknown part type is refused by name (``invalid_content``), not as a union miss."""
    if not isinstance(value, dict) or value.get("type") not in _TYPES:
        shown = value.get("type") if isinstance(value, dict) else type(value).__name__
        raise PydanticCustomError(
            "invalid_content",
            f"a content part is an object with type text, image or file, not {str(shown)[:40]!r}",
        )
    return value


ContentPart = Annotated[
    TextPart | ImagePart | FilePart, Field(discriminator="type"), BeforeValidator(_part_type)
]


def _parts(value: Any) -> Any:
    if isinstance(value, list) and not 1 <= len(value) <= MAX_PARTS:
        raise PydanticCustomError(
            "invalid_content", f"content holds 1 to {MAX_PARTS} parts, not {len(value)}"
        )
    return value


def _which(value: Any) -> str:
    return "text" if isinstance(value, str) else "parts"


Content = Annotated[
    Annotated[_Text, Tag("text")]
    | Annotated[list[ContentPart], BeforeValidator(_parts), Tag("parts")],
    Discriminator(_which),
]
"""A message's content: a string, or 1 to ``MAX_PARTS`` parts."""


# --- parts -> blocks --------------------------------------------------------------------


def body_limit_for(limits: AttachmentLimits, body_limit: int) -> int:
    """The most a body that may carry attachments is read up to: ``body_limit`` plus the
    attachment cap of one message in base64 (4 characters per 3 bytes). What is not
    attachment data stays within ``body_limit`` (``attachment_chars``)."""
    return body_limit + -(-limits.message_bytes // 3) * 4


def attachment_chars(value: Any, depth: int = 0) -> int:
    """The characters of base64 data in a JSON body: ``data`` strings (HTTP parts, AG-UI
    ``binary``) and the ``value`` of AG-UI ``data`` sources."""
    if depth > 8:
        return 0
    if isinstance(value, list):
        return sum(attachment_chars(item, depth + 1) for item in value)
    if not isinstance(value, dict):
        return 0
    total = 0
    for key, item in value.items():
        if isinstance(item, str):
            if key == "data" or (key == "value" and value.get("type") == "data"):
                total += len(item)
        else:
            total += attachment_chars(item, depth + 1)
    return total


def _decode(data: str, where: str, limits: AttachmentLimits) -> bytes:
    # Checked on the text first: an oversize block is refused before it is decoded.
    if len(data) > -(-limits.block_bytes // 3) * 4:
        raise ApiError(
            413,
            "attachment_too_large",
            f"{where} is over the limit of {human_size(limits.block_bytes)} per attachment",
        )
    try:
        return base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        raise ApiError(422, "invalid_base64", f"{where}: data is not base64") from None


def _block(part: TextPart | ImagePart | FilePart, where: str, limits: AttachmentLimits) -> Block:
    if isinstance(part, TextPart):
        return TextBlock(part.text)
    try:
        if isinstance(part, FilePart):
            return FileBlock(part.media_type, _decode(part.data, where, limits), part.name)
        if part.url is not None:
            path = urlsplit(part.url).path
            media_type = part.media_type or media_type_of(path.rsplit("/", 1)[-1], b"")
            if media_type is None:
                raise ValueError("give the media_type of an image URL without an image suffix")
            return ImageBlock(media_type, url=part.url, name=part.name)
        assert part.data is not None
        data = _decode(part.data, where, limits)
        media_type = part.media_type or media_type_of("", data) or "image/png"
        return ImageBlock(media_type, data, name=part.name)
    except ValueError as exc:
        raise ApiError(422, "invalid_attachment", f"{where}: {exc}") from None


def to_blocks(
    content: str | Sequence[TextPart | ImagePart | FilePart], limits: AttachmentLimits
) -> str | tuple[Block, ...]:
    """``content`` as a message's blocks (a string stays a string).

    Raises:
        ApiError: 422 ``invalid_base64`` / ``invalid_attachment`` for data no block holds,
            413 ``attachment_too_large`` past a block's or the message's cap.
    """
    if isinstance(content, str):
        return content
    blocks = tuple(_block(p, f"content[{n}]", limits) for n, p in enumerate(content))
    try:
        check_limits(user_message(blocks), limits)
    except ValueError as exc:
        raise ApiError(413, "attachment_too_large", str(exc)) from None
    return blocks


# --- the log as the service hands it out ------------------------------------------------


def blob_url(session_id: str, hash: str) -> str:
    """Where a session's blob is served."""
    return f"/v1/sessions/{quote(session_id, safe='')}/blobs/{hash}"


def with_blob_urls(session_id: str, value: Any) -> Any:
    """``value`` (an event's JSON form) with each stored image or file block given its
    ``blob_url``; the same object when it holds none (a shared event keeps its encoding)."""
    if isinstance(value, dict):
        if value.get("type") in ("image", "file") and isinstance(value.get("blob"), str):
            return value | {"blob_url": blob_url(session_id, value["blob"])}
        out: dict[str, Any] | None = None
        for key, item in value.items():
            new = with_blob_urls(session_id, item)
            if new is not item:
                out = dict(value) if out is None else out
                out[key] = new
        return value if out is None else out
    if isinstance(value, list):
        items = [with_blob_urls(session_id, item) for item in value]
        return value if all(a is b for a, b in zip(items, value, strict=True)) else items
    return value
