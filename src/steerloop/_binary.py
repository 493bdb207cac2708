"""Image and file content blocks (public homes: ``steerloop``, ``steerloop.messages``).

A block holds its bytes (``data``) when it was built in this process, or only its content
hash (``blob``) and ``size`` when it was read back from a store: the log stores the bytes
once per store and each event carries ``{"blob", "media_type", "size", "name"}``. Equality
ignores ``data`` (the hash names the content), so a block equals itself read back.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import KW_ONLY, dataclass, field
from pathlib import Path
from typing import Any, Literal, TypeAlias

from ._media import (
    DEFAULT_LIMITS,
    blob_hash,
    check_blob_hash,
    check_file_media_type,
    check_image_media_type,
    human_size,
    is_text_media_type,
    media_type_of,
    sniff_image,
)

__all__ = [
    "BinaryBlock",
    "FileBlock",
    "ImageBlock",
    "binary_from_json",
    "binary_to_json",
    "modality_of",
]

_MAX_URL = 8192
_MAX_NAME = 255
_URL = re.compile(r"^https?://[^\s]+$", re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class ImageBlock:
    """An image: its bytes (``data``) or a URL the provider fetches (``url``).

    Raises:
        ValueError: an unsupported media type, bytes that are not an image of that type,
            both or neither of ``data`` and ``url``, or a URL that is not http(s).
    """

    media_type: str
    data: bytes | None = field(default=None, compare=False, repr=False)
    url: str | None = None
    _: KW_ONLY
    name: str | None = None
    blob: str | None = None
    """The content hash (``sha256:…``); computed from ``data``."""
    size: int | None = None
    """Bytes of ``data`` (``None`` for a URL image)."""
    type: Literal["image"] = field(default="image", init=False, repr=False)

    def __post_init__(self) -> None:
        check_image_media_type(self.media_type)
        _check_name(self.name)
        if self.url is not None:
            if self.data is not None or self.blob is not None:
                raise ValueError("an ImageBlock takes data or url, not both")
            if (
                not isinstance(self.url, str)
                or len(self.url) > _MAX_URL
                or not _URL.match(self.url)
            ):
                raise ValueError(f"image url must be an http(s) URL: {str(self.url)[:80]!r}")
            if self.size is not None:
                raise ValueError("a URL image has no size")
            return
        _settle_content(self, "image")
        if self.data is not None and sniff_image(self.data) != self.media_type:
            found = sniff_image(self.data)
            raise ValueError(
                f"image data is not {self.media_type}"
                + (f" (it is {found})" if found else " (no image signature)")
            )

    @classmethod
    def from_path(cls, path: str | os.PathLike[str], *, max_bytes: int | None = None) -> ImageBlock:
        """The image in the file at ``path`` (its type read from its bytes).

        Raises:
            ValueError: not a PNG, JPEG, GIF or WEBP image, or larger than ``max_bytes``
                (default: the default per-block limit, 10 MiB).
            OSError: the file cannot be read.
        """
        data, name = _read(path, max_bytes)
        media_type = sniff_image(data)
        if media_type is None:
            raise ValueError(f"{name} is not a PNG, JPEG, GIF or WEBP image")
        return cls(media_type, data, name=name)

    def describe(self) -> str:
        """``image a.png (image/png, 12.0 KiB)`` — how logs and views name the block."""
        return _describe("image", self.name, self.media_type, self.size, self.url)


@dataclass(frozen=True, slots=True)
class FileBlock:
    """A document: a PDF or a text file (``text/*``, JSON, XML, YAML), with its name.

    Raises:
        ValueError: an unsupported media type, a PDF without the PDF signature, text that
            is not UTF-8, or a bad name.
    """

    media_type: str
    data: bytes | None = field(compare=False, repr=False)
    name: str | None = None
    _: KW_ONLY
    blob: str | None = None
    """The content hash (``sha256:…``); computed from ``data``."""
    size: int | None = None
    type: Literal["file"] = field(default="file", init=False, repr=False)

    def __post_init__(self) -> None:
        check_file_media_type(self.media_type)
        _check_name(self.name)
        _settle_content(self, "file")
        data = self.data
        if data is None:
            return
        if self.media_type == "application/pdf" and not data.startswith(b"%PDF-"):
            raise ValueError("file data is not a PDF (no %PDF- signature)")
        if is_text_media_type(self.media_type):
            try:
                data.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise ValueError(f"{self.media_type} file data is not UTF-8: {exc}") from None
            if b"\0" in data:
                raise ValueError(f"{self.media_type} file data holds NUL bytes (it is binary)")

    @classmethod
    def from_path(cls, path: str | os.PathLike[str], *, max_bytes: int | None = None) -> FileBlock:
        """The document in the file at ``path``: a PDF, or text by its suffix (or any UTF-8
        file as ``text/plain``).

        Raises:
            ValueError: neither PDF nor UTF-8 text, or larger than ``max_bytes`` (default:
                the default per-block limit, 10 MiB).
            OSError: the file cannot be read.
        """
        data, name = _read(path, max_bytes)
        media_type = media_type_of(name, data)
        if media_type is None or media_type.startswith("image/"):
            try:
                data.decode("utf-8")
            except UnicodeDecodeError:
                raise ValueError(f"{name} is neither a PDF nor UTF-8 text") from None
            if b"\0" in data:
                raise ValueError(f"{name} is neither a PDF nor UTF-8 text (it holds NUL bytes)")
            media_type = "text/plain"
        return cls(media_type, data, name)

    def as_text(self) -> str:
        """The text of a text file (``ValueError`` for a PDF or a block without data)."""
        if self.data is None or not is_text_media_type(self.media_type):
            raise ValueError(f"{self.describe()} has no text in hand")
        return self.data.decode("utf-8")

    def describe(self) -> str:
        """``file spec.pdf (application/pdf, 1.5 MiB)``."""
        return _describe("file", self.name, self.media_type, self.size, None)


BinaryBlock: TypeAlias = ImageBlock | FileBlock


def modality_of(block: BinaryBlock) -> str:
    """What a model must accept to take ``block``: ``"image"``, ``"file"`` (a PDF), or
    ``"text"`` for a text file (every adapter sends it as text)."""
    if isinstance(block, ImageBlock):
        return "image"
    return "text" if is_text_media_type(block.media_type) else "file"


def _settle_content(block: BinaryBlock, kind: str) -> None:
    """Check data/blob/size and fill in the hash and size from the bytes."""
    data = block.data
    if data is None:
        if block.blob is None:
            raise ValueError(f"an {kind} block needs data" + (" or url" if kind == "image" else ""))
        check_blob_hash(block.blob)
        if isinstance(block.size, bool) or not isinstance(block.size, int) or block.size < 0:
            raise ValueError(f"a stored {kind} block needs its size, not {block.size!r}")
        return
    if isinstance(data, bytearray | memoryview):
        data = bytes(data)
        object.__setattr__(block, "data", data)
    if not isinstance(data, bytes):
        raise ValueError(f"{kind} data must be bytes, not {type(data).__name__}")
    if not data:
        raise ValueError(f"{kind} data is empty")
    digest = blob_hash(data)
    if block.blob is not None and block.blob != digest:
        raise ValueError(f"{kind} data does not match its hash {block.blob}")
    if block.size is not None and block.size != len(data):
        raise ValueError(f"{kind} data is {len(data)} bytes, not {block.size}")
    object.__setattr__(block, "blob", digest)
    object.__setattr__(block, "size", len(data))


def _check_name(name: object) -> None:
    if name is None:
        return
    if (
        not isinstance(name, str)
        or not name
        or len(name) > _MAX_NAME
        or any(c in name for c in "/\\\0")
        or not name.isprintable()
        or name in (".", "..")
    ):
        raise ValueError(f"a block name must be a plain file name: {str(name)[:80]!r}")


def _read(path: str | os.PathLike[str], max_bytes: int | None) -> tuple[bytes, str]:
    limit = DEFAULT_LIMITS.block_bytes if max_bytes is None else max_bytes
    file = Path(path)
    with file.open("rb") as handle:
        data = handle.read(limit + 1)
    if len(data) > limit:
        raise ValueError(f"{file.name} is larger than {human_size(limit)}")
    name = file.name[:_MAX_NAME] or "attachment"
    return data, name


def _describe(
    kind: str, name: str | None, media_type: str, size: int | None, url: str | None
) -> str:
    label = name or url or "(unnamed)"
    if url is not None and name is None:
        label = url if len(url) <= 60 else url[:57] + "..."
    facts = media_type if size is None else f"{media_type}, {human_size(size)}"
    return f"{kind} {label} ({facts})"


# --- JSON form ------------------------------------------------------------------------------


def binary_to_json(block: BinaryBlock) -> dict[str, Any]:
    """The stored form: a reference to the blob (or the URL), never the bytes."""
    out: dict[str, Any] = {"type": block.type, "media_type": block.media_type}
    if isinstance(block, ImageBlock) and block.url is not None:
        out["url"] = block.url
    else:
        out["blob"] = block.blob
        out["size"] = block.size
    if block.name is not None:
        out["name"] = block.name
    return out


_FIELDS = frozenset({"type", "media_type", "url", "blob", "size", "name"})


def binary_from_json(data: Mapping[str, Any]) -> BinaryBlock:
    """A block from its stored form (without its bytes).

    Raises:
        ValueError: a malformed or unknown field.
    """
    unknown = data.keys() - _FIELDS
    if unknown:
        raise ValueError(f"unknown {data.get('type')} block field(s) {sorted(unknown)}")
    media_type: Any = data.get("media_type")
    name = data.get("name")
    if data.get("type") == "image":
        url = data.get("url")
        if url is not None:
            return ImageBlock(media_type, url=url, name=name)
        return ImageBlock(media_type, name=name, blob=data.get("blob"), size=data.get("size"))
    if "url" in data:
        raise ValueError("a file block has no url")
    return FileBlock(media_type, None, name, blob=data.get("blob"), size=data.get("size"))
