"""Messages and content blocks: frozen records, each with a lossless JSON form."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal, TypeAlias

from ._binary import (
    BinaryBlock,
    FileBlock,
    ImageBlock,
    binary_from_json,
    binary_to_json,
    modality_of,
)
from ._ids import new_id
from ._media import (
    DEFAULT_LIMITS,
    IMAGE_MEDIA_TYPES,
    AttachmentLimits,
    check_blob_hash,
    check_file_media_type,
    human_size,
    is_text_media_type,
    media_type_of,
    sniff_image,
)
from ._records import fast_init

__all__ = [
    "DEFAULT_LIMITS",
    "IMAGE_MEDIA_TYPES",
    "AssistantMessage",
    "AttachmentLimits",
    "BinaryBlock",
    "Block",
    "FileBlock",
    "ImageBlock",
    "Message",
    "MessageSource",
    "ReasoningBlock",
    "SystemMessage",
    "TextBlock",
    "ToolCallBlock",
    "ToolResultMessage",
    "UserMessage",
    "block_from_json",
    "block_to_json",
    "blocks_of",
    "check_blob_hash",
    "check_file_media_type",
    "human_size",
    "is_text_media_type",
    "media_type_of",
    "message_from_json",
    "message_to_json",
    "modality_of",
    "sniff_image",
    "user_message",
]

JsonValue: TypeAlias = Any


@fast_init
@dataclass(frozen=True, slots=True)
class TextBlock:
    """Plain text."""

    text: str
    type: Literal["text"] = field(default="text", init=False, repr=False)


@fast_init
@dataclass(frozen=True, slots=True)
class ReasoningBlock:
    """Model reasoning; ``replay_state`` is provider data to send back unchanged."""

    text: str
    replay_state: JsonValue = None
    type: Literal["reasoning"] = field(default="reasoning", init=False, repr=False)


@fast_init
@dataclass(frozen=True, slots=True)
class ToolCallBlock:
    """A tool call requested by the model; ``arguments`` is the raw JSON text."""

    id: str
    name: str
    arguments: str
    type: Literal["tool-call"] = field(default="tool-call", init=False, repr=False)


Block: TypeAlias = TextBlock | ReasoningBlock | ToolCallBlock | ImageBlock | FileBlock
_BLOCK_CLASSES = (TextBlock, ReasoningBlock, ToolCallBlock, ImageBlock, FileBlock)


@fast_init
@dataclass(frozen=True, slots=True, kw_only=True)
class MessageSource:
    """Where a message came from: ``kind`` plus kind-specific fields."""

    kind: str = "user"
    plugin: str | None = None
    call_id: str | None = None
    provider: str | None = None
    model: str | None = None
    replay_state: JsonValue = None
    extra: Mapping[str, JsonValue] | None = None


_USER = MessageSource()


@fast_init
@dataclass(frozen=True, slots=True, kw_only=True)
class UserMessage:
    """Input for the model: a host prompt, injected context, deferred tool context, a goal."""

    id: str
    content: tuple[Block, ...]
    source: MessageSource = _USER
    role: Literal["user"] = field(default="user", init=False)
    # The payload of a ``user/message`` event is the message itself (EVENTS.md §2.2).
    TYPE: ClassVar[Literal["user/message"]] = "user/message"


@fast_init
@dataclass(frozen=True, slots=True, kw_only=True)
class SystemMessage:
    """The rendered system prompt."""

    id: str
    content: tuple[Block, ...]
    source: MessageSource = MessageSource(kind="system")
    role: Literal["system"] = field(default="system", init=False)


@fast_init
@dataclass(frozen=True, slots=True, kw_only=True)
class AssistantMessage:
    """Model output of one attempt."""

    id: str
    content: tuple[Block, ...]
    source: MessageSource = MessageSource(kind="model")
    role: Literal["assistant"] = field(default="assistant", init=False)

    @property
    def tool_calls(self) -> tuple[ToolCallBlock, ...]:
        return tuple(b for b in self.content if isinstance(b, ToolCallBlock))


@fast_init
@dataclass(frozen=True, slots=True, kw_only=True)
class ToolResultMessage:
    """The answer to one tool call."""

    id: str
    call_id: str
    content: tuple[Block, ...]
    is_error: bool = False
    role: Literal["tool"] = field(default="tool", init=False)


Message: TypeAlias = UserMessage | SystemMessage | AssistantMessage | ToolResultMessage


def user_message(
    content: str | Sequence[Block],
    *,
    source: MessageSource | Mapping[str, Any] | None = None,
    id: str | None = None,
) -> UserMessage:
    """Build a ``UserMessage`` from text or blocks; ``source`` defaults to ``{"kind": "user"}``."""
    blocks = (TextBlock(content),) if isinstance(content, str) else tuple(content)
    for block in blocks:
        if not isinstance(block, _BLOCK_CLASSES):
            raise ValueError(f"not a content block: {block!r:.200}")
    if source is None:
        src = _USER
    elif isinstance(source, MessageSource):
        src = source
    else:
        src = source_from_json(dict(source))
    return UserMessage(id=id or new_id("msg"), content=blocks, source=src)


# --- JSON form -------------------------------------------------------------------------


def block_to_json(block: Block) -> dict[str, JsonValue]:
    if isinstance(block, TextBlock):
        return {"type": "text", "text": block.text}
    if isinstance(block, ReasoningBlock):
        out: dict[str, JsonValue] = {"type": "reasoning", "text": block.text}
        if block.replay_state is not None:
            out["replay_state"] = block.replay_state
        return out
    if isinstance(block, ToolCallBlock):
        return {
            "type": "tool-call",
            "id": block.id,
            "name": block.name,
            "arguments": block.arguments,
        }
    if isinstance(block, ImageBlock | FileBlock):
        return binary_to_json(block)
    raise ValueError(f"not a content block: {block!r:.200}")


def block_from_json(data: Mapping[str, JsonValue]) -> Block:
    kind = data.get("type")
    if kind == "text":
        return TextBlock(_str(data, "text"))
    if kind == "reasoning":
        return ReasoningBlock(_str(data, "text"), data.get("replay_state"))
    if kind == "tool-call":
        return ToolCallBlock(_str(data, "id"), _str(data, "name"), _str(data, "arguments"))
    if kind == "image" or kind == "file":
        return binary_from_json(data)
    raise ValueError(f"unknown block type {kind!r}")


def blocks_of(messages: Iterable[Message]) -> Iterator[BinaryBlock]:
    """The image and file blocks of ``messages``, in order."""
    for message in messages:
        for block in message.content:
            if isinstance(block, ImageBlock | FileBlock):
                yield block


def source_to_json(source: MessageSource) -> dict[str, JsonValue]:
    out: dict[str, JsonValue] = {"kind": source.kind}
    for name in ("plugin", "call_id", "provider", "model", "replay_state"):
        value = getattr(source, name)
        if value is not None:
            out[name] = value
    if source.extra:
        out.update(source.extra)
    return out


_SOURCE_FIELDS = frozenset({"kind", "plugin", "call_id", "provider", "model", "replay_state"})


_SOURCES: dict[tuple[tuple[str, JsonValue], ...], MessageSource] = {}
"""Decoded sources made only of string fields (nothing mutable), shared: a long log
repeats a handful of them (``{"kind": "model", "provider": ..., "model": ...}``)."""


def source_from_json(data: Mapping[str, JsonValue]) -> MessageSource:
    shareable = data.keys() <= _SOURCE_FIELDS and all(type(v) is str for v in data.values())
    if shareable:
        key = tuple(data.items())
        cached = _SOURCES.get(key)
        if cached is not None:
            return cached
    source = _source_from_json(data)
    if shareable:
        if len(_SOURCES) >= 1024:
            _SOURCES.clear()
        _SOURCES[key] = source
    return source


def _source_from_json(data: Mapping[str, JsonValue]) -> MessageSource:
    kind = data.get("kind", "user")
    if not isinstance(kind, str):
        raise ValueError("message source kind must be a string")
    extra = {k: v for k, v in data.items() if k not in _SOURCE_FIELDS}
    return MessageSource(
        kind=kind,
        plugin=data.get("plugin"),
        call_id=data.get("call_id"),
        provider=data.get("provider"),
        model=data.get("model"),
        replay_state=data.get("replay_state"),
        extra=extra or None,
    )


def message_to_json(message: Message) -> dict[str, JsonValue]:
    out: dict[str, JsonValue] = {
        "id": message.id,
        "role": message.role,
        "content": [block_to_json(b) for b in message.content],
    }
    if isinstance(message, ToolResultMessage):
        out["call_id"] = message.call_id
        out["is_error"] = message.is_error
    else:
        out["source"] = source_to_json(message.source)
    return out


def message_from_json(data: Mapping[str, JsonValue]) -> Message:
    role = data.get("role")
    content = tuple(block_from_json(b) for b in data.get("content", ()))
    mid = _str(data, "id")
    if role == "tool":
        return ToolResultMessage(
            id=mid,
            call_id=_str(data, "call_id"),
            content=content,
            is_error=bool(data.get("is_error", False)),
        )
    source = source_from_json(data.get("source", {}))
    if role == "user":
        return UserMessage(id=mid, content=content, source=source)
    if role == "system":
        return SystemMessage(id=mid, content=content, source=source)
    if role == "assistant":
        return AssistantMessage(id=mid, content=content, source=source)
    raise ValueError(f"unknown message role {role!r}")


def check_json(value: JsonValue, what: str) -> None:
    """Raise ``ValueError`` unless ``value`` has a strict JSON form."""
    try:
        json.dumps(value, allow_nan=False, default=_refuse)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{what} is not JSON-serialisable: {exc}") from None
    # json.dumps coerces int/float/bool/None keys to strings, which would not round-trip.
    stack: list[Any] = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            for key, child in item.items():
                if not isinstance(key, str):
                    raise ValueError(f"{what} is not JSON-serialisable: key {key!r} is not a str")
                if isinstance(child, dict | list | tuple):
                    stack.append(child)
        elif isinstance(item, list | tuple):
            stack.extend(c for c in item if isinstance(c, dict | list | tuple))


def _refuse(value: object) -> None:
    raise TypeError(f"{type(value).__name__} is not JSON")


def _str(data: Mapping[str, JsonValue], key: str) -> str:
    value = data.get(key)
    if not isinstance(value, str):
        raise ValueError(f"field {key!r} must be a string")
    return value
