"""What binary content blocks share: media types, content hashes, size limits, sniffing.

The log keeps an image or a file once per store, by content hash (``sha256:<64 hex>``);
events carry only the reference. These helpers are below ``messages`` so a block can check
itself when it is built, and above nothing else.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import Final

__all__ = [
    "DEFAULT_LIMITS",
    "FILE_MEDIA_TYPES",
    "IMAGE_MEDIA_TYPES",
    "MODALITIES",
    "AttachmentLimits",
    "blob_hash",
    "check_blob_hash",
    "check_file_media_type",
    "check_image_media_type",
    "human_size",
    "is_text_media_type",
    "media_type_of",
    "sniff_image",
]

MODALITIES: Final = frozenset({"text", "image", "file"})
"""Everything a model may accept (``ModelInfo.input_modalities``)."""

IMAGE_MEDIA_TYPES: Final = frozenset({"image/png", "image/jpeg", "image/gif", "image/webp"})
"""The image types both OpenAI and Anthropic take (Anthropic's ``Base64ImageSourceParam``
names exactly these four; OpenAI's vision guide lists PNG, JPEG, WEBP and non-animated GIF)."""

# PDF is the one document type every provider takes as a document; text files go as text
# (OpenAI chat completions takes only PDF files, Anthropic documents are PDF or plain text;
# the Responses API would take more, which a later change may open up per adapter).
_TEXT_APPLICATION: Final = frozenset(
    {"application/json", "application/xml", "application/yaml", "application/x-yaml"}
)
FILE_MEDIA_TYPES: Final = frozenset({"application/pdf"}) | _TEXT_APPLICATION
"""File types besides ``text/*``: PDF, and application types that are text."""

_MEDIA_TYPE = re.compile(r"^[a-z0-9][a-z0-9!#$&^_.+-]{0,63}/[a-z0-9][a-z0-9!#$&^_.+-]{0,63}$")
_HASH = re.compile(r"^sha256:[0-9a-f]{64}$")

_SUFFIXES: Final = {
    ".png": "image/png",
    ".jpg": "image/jpeg",
    ".jpeg": "image/jpeg",
    ".gif": "image/gif",
    ".webp": "image/webp",
    ".pdf": "application/pdf",
    ".txt": "text/plain",
    ".text": "text/plain",
    ".log": "text/plain",
    ".md": "text/markdown",
    ".markdown": "text/markdown",
    ".csv": "text/csv",
    ".tsv": "text/tab-separated-values",
    ".html": "text/html",
    ".htm": "text/html",
    ".css": "text/css",
    ".xml": "application/xml",
    ".json": "application/json",
    ".yaml": "application/yaml",
    ".yml": "application/yaml",
    ".py": "text/x-python",
    ".js": "text/javascript",
    ".ts": "text/plain",
    ".rs": "text/plain",
    ".go": "text/plain",
    ".c": "text/plain",
    ".h": "text/plain",
    ".sh": "text/plain",
    ".toml": "text/plain",
}

# Leading bytes of each image type (the types' own specifications).
_MAGIC: Final = (
    (b"\x89PNG\r\n\x1a\n", "image/png"),
    (b"\xff\xd8\xff", "image/jpeg"),
    (b"GIF87a", "image/gif"),
    (b"GIF89a", "image/gif"),
)


@dataclass(frozen=True, slots=True)
class AttachmentLimits:
    """Size caps on binary blocks: each block's bytes, and all of one message's."""

    block_bytes: int = 10 * 1024 * 1024
    message_bytes: int = 20 * 1024 * 1024

    def __post_init__(self) -> None:
        for name in ("block_bytes", "message_bytes"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive integer, not {value!r}")


DEFAULT_LIMITS: Final = AttachmentLimits()


def blob_hash(data: bytes) -> str:
    """The content hash a store keys a blob by: ``sha256:<64 lowercase hex>``."""
    return "sha256:" + hashlib.sha256(data).hexdigest()


def check_blob_hash(value: object) -> str:
    """``value`` if it is a blob hash, else ``ValueError``."""
    if not isinstance(value, str) or not _HASH.match(value):
        raise ValueError(f"not a blob hash (sha256:<64 hex>): {str(value)[:80]!r}")
    return value


def _check_media_type(value: object) -> str:
    if not isinstance(value, str) or not _MEDIA_TYPE.match(value):
        raise ValueError(f"not a media type: {str(value)[:80]!r}")
    return value


def check_image_media_type(value: object) -> str:
    """``value`` if it is an image type every provider takes, else ``ValueError``."""
    media_type = _check_media_type(value)
    if media_type not in IMAGE_MEDIA_TYPES:
        raise ValueError(
            f"unsupported image type {media_type!r} (one of {', '.join(sorted(IMAGE_MEDIA_TYPES))})"
        )
    return media_type


def is_text_media_type(media_type: str) -> bool:
    """Whether a file of ``media_type`` is text (sent as text where a provider wants that)."""
    return media_type.startswith("text/") or media_type in _TEXT_APPLICATION


def check_file_media_type(value: object) -> str:
    """``value`` if it is a file type the providers take (PDF or text), else ``ValueError``."""
    media_type = _check_media_type(value)
    if media_type != "application/pdf" and not is_text_media_type(media_type):
        raise ValueError(
            f"unsupported file type {media_type!r} (application/pdf, text/*, or "
            f"{', '.join(sorted(_TEXT_APPLICATION))})"
        )
    return media_type


def sniff_image(data: bytes) -> str | None:
    """The image type ``data`` starts like, ``None`` when it is none of the four."""
    for magic, media_type in _MAGIC:
        if data.startswith(magic):
            return media_type
    if len(data) >= 12 and data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    return None


def media_type_of(name: str, data: bytes) -> str | None:
    """The media type of a file named ``name`` holding ``data``: the image bytes' own type,
    else the suffix's, else ``None``."""
    sniffed = sniff_image(data)
    if sniffed is not None:
        return sniffed
    if data.startswith(b"%PDF-"):
        return "application/pdf"
    dot = name.rfind(".")
    return _SUFFIXES.get(name[dot:].lower()) if dot >= 0 else None


def human_size(size: int) -> str:
    """``size`` bytes for people: ``812 B``, ``300.0 KiB``, ``1.5 MiB``."""
    if size < 1024:
        return f"{size} B"
    if size < 1024 * 1024:
        return f"{size / 1024:.1f} KiB"
    return f"{size / (1024 * 1024):.1f} MiB"
