"""Blobs seen from the log: which blocks an event carries, and the record a store keeps.

An event never holds image or file bytes in its stored form; it names each blob by content
hash. The writer of a store takes every event's blocks (``event_blobs``) and stores their
bytes durably no later than the event itself (same transaction, blobs first); a read
(``StoredBlob``) hands the bytes back checked against their hash.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from .._binary import BinaryBlock, FileBlock, ImageBlock
from .._media import blob_hash
from ..errors import SessionCorruptError
from ..messages import AssistantMessage, Message, ToolResultMessage, UserMessage
from ._events import InboxSpliced, SessionEvent, ToolResultEvent

__all__ = [
    "BlobPut",
    "StoredBlob",
    "blob_seq",
    "checked_blob",
    "event_blobs",
    "put_of",
    "with_blob_data",
]


@dataclass(frozen=True, slots=True)
class BlobPut:
    """One blob an event references: its hash, media type, and bytes when in hand (a block
    read back from the store has none: the write only records the reference)."""

    hash: str
    media_type: str
    data: bytes | None


@dataclass(frozen=True, slots=True)
class StoredBlob:
    """A blob as a store hands it back: the bytes and what they are."""

    hash: str
    media_type: str
    data: bytes

    @property
    def size(self) -> int:
        return len(self.data)


def _messages_of(data: Any) -> Sequence[Message]:
    if isinstance(data, UserMessage | ToolResultMessage | AssistantMessage):
        return (data,)
    if isinstance(data, ToolResultEvent):
        return (data.message,)
    if isinstance(data, InboxSpliced):
        return data.inserted
    return ()


def event_blobs(event: SessionEvent) -> list[BlobPut]:
    """The blobs ``event``'s payload references, in order, each hash once."""
    puts: list[BlobPut] = []
    for message in _messages_of(event.data):
        for block in message.content:
            if isinstance(block, ImageBlock | FileBlock) and block.blob is not None:
                puts.append(put_of(block))
    if len(puts) > 1:
        unique: dict[str, BlobPut] = {}
        for put in puts:  # each hash once, with its bytes where any block has them
            if unique.get(put.hash) is None or unique[put.hash].data is None:
                unique[put.hash] = put
        puts = list(unique.values())
    return puts


def put_of(block: BinaryBlock) -> BlobPut:
    """What a store keeps of a block's content."""
    assert block.blob is not None
    return BlobPut(block.blob, block.media_type, block.data)


def checked_blob(hash: str, media_type: object, data: object, where: str) -> StoredBlob:
    """A stored blob row, checked: bytes whose hash is the key, and a media type.

    Raises:
        SessionCorruptError: the row is not what was stored under ``hash``.
    """
    if isinstance(data, memoryview | bytearray):
        data = bytes(data)
    if not isinstance(data, bytes) or not isinstance(media_type, str):
        raise SessionCorruptError(f"{where}: blob {hash} is stored malformed")
    if blob_hash(data) != hash:
        raise SessionCorruptError(f"{where}: blob {hash} is corrupt (its bytes hash otherwise)")
    return StoredBlob(hash, media_type, data)


def blob_seq(events: Sequence[SessionEvent], hash: str) -> int | None:
    """The seq of the first event of ``events`` that references blob ``hash``: a message the
    model sees (``user/message``, ``tool/result``) before an inbox splice that queued it."""
    found = None
    for event in events:
        if any(put.hash == hash for put in event_blobs(event)):
            if event.surface_op is not None:
                return event.seq
            found = found or event.seq
    return found


async def with_blob_data(
    messages: Sequence[Message], read: Callable[[str], Awaitable[StoredBlob]]
) -> tuple[Message, ...]:
    """``messages`` with every block read back from a store given its bytes again (``read``
    loads a blob); messages without such blocks are passed through as they are."""
    out: list[Message] = []
    for message in messages:
        if not any(
            isinstance(b, ImageBlock | FileBlock) and b.data is None and b.blob is not None
            for b in message.content
        ):
            out.append(message)
            continue
        content = []
        for block in message.content:
            if isinstance(block, ImageBlock | FileBlock) and block.data is None and block.blob:
                stored = await read(block.blob)
                block = dataclasses.replace(block, data=stored.data)
            content.append(block)
        out.append(dataclasses.replace(message, content=tuple(content)))
    return tuple(out)
