"""Attachments on the command line: ``run --attach FILE``, ``/attach FILE`` in ``chat``, and
how ``sessions show`` / ``export`` name them."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from .._media import sniff_image
from ..messages import Block, FileBlock, ImageBlock, TextBlock, UserMessage, user_message
from ..session._blobs import event_blobs
from ..session._events import SessionEvent
from ..session.store import SessionStore

__all__ = [
    "attachment_labels",
    "load_attachment",
    "markdown_attachments",
    "with_attachments",
    "write_attachments",
]


def load_attachment(path: str | Path) -> ImageBlock | FileBlock:
    """The file at ``path`` as an image block (by its bytes) or a file block (PDF or text).

    Raises:
        ValueError: the file cannot be read, is too large, or is neither an image, a PDF
            nor UTF-8 text (the message names the file).
    """
    file = Path(path).expanduser()
    try:
        with file.open("rb") as handle:
            head = handle.read(16)
        if sniff_image(head) is not None:
            return ImageBlock.from_path(file)
        return FileBlock.from_path(file)
    except OSError as exc:
        raise ValueError(f"cannot attach {file}: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise ValueError(f"cannot attach {file}: {exc}") from None


def with_attachments(text: str, attachments: Sequence[ImageBlock | FileBlock]) -> UserMessage:
    """A user message: ``text`` (when any), then the attachments."""
    blocks: list[Block] = [TextBlock(text)] if text else []
    return user_message([*blocks, *attachments])


def attachment_labels(blocks: Iterable[Block]) -> list[str]:
    """``[image shot.png (image/png, 12.0 KiB)]`` for each image and file block."""
    return [f"[{b.describe()}]" for b in blocks if isinstance(b, ImageBlock | FileBlock)]


async def write_attachments(
    store: SessionStore, session_id: str, events: Iterable[SessionEvent], directory: Path
) -> dict[str, str]:
    """Write every image and file ``events`` reference into ``directory`` (one file per blob,
    named after the block, made unique); returns ``{hash: path relative to the directory's
    parent}`` for links in a markdown export beside it."""
    directory.mkdir(parents=True, exist_ok=True)
    written: dict[str, str] = {}
    taken: set[str] = set()
    for event in events:
        for put in event_blobs(event):
            if put.hash in written:
                continue
            blob = await store.get_blob(put.hash, session_id=session_id)
            name = _file_name(_block_names(event).get(put.hash), put.hash, blob.media_type)
            while name in taken:
                name = f"{put.hash[7:15]}-{name}"
            taken.add(name)
            (directory / name).write_bytes(blob.data)
            written[put.hash] = f"{directory.name}/{name}"
    return written


def markdown_attachments(blocks: Iterable[Block], links: Mapping[str, str]) -> list[str]:
    """Markdown for a message's images and files: links to the written files, else labels."""
    out: list[str] = []
    for block in blocks:
        if not isinstance(block, ImageBlock | FileBlock):
            continue
        link = links.get(block.blob or "") or (block.url if isinstance(block, ImageBlock) else None)
        label = block.name or block.type
        if link is None:
            out.append(f"_[{block.describe()}]_")
        elif isinstance(block, ImageBlock):
            out.append(f"![{label}]({link})")
        else:
            out.append(f"[{label}]({link})")
    return out


def _block_names(event: SessionEvent) -> dict[str, str]:
    data: Any = event.data
    messages = getattr(data, "inserted", None) or [getattr(data, "message", data)]
    names: dict[str, str] = {}
    for message in messages:
        for block in getattr(message, "content", ()):
            if isinstance(block, ImageBlock | FileBlock) and block.blob and block.name:
                names[block.blob] = block.name
    return names


_EXTENSIONS = {
    "image/png": ".png",
    "image/jpeg": ".jpg",
    "image/gif": ".gif",
    "image/webp": ".webp",
    "application/pdf": ".pdf",
}


def _file_name(name: str | None, hash: str, media_type: str) -> str:
    if name:
        return name
    return hash[7:19] + _EXTENSIONS.get(media_type, ".txt")
