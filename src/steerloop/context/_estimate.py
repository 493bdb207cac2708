"""Token estimates: how large the next request of a session will be.

The estimate starts from the figure a provider reported last (the input tokens of the latest
``assistant/message`` with usage: its request held every surface node before it) and adds a
character-based estimate of the nodes written since. The characters-per-token ratio is
calibrated from the same report: reported input tokens over the characters of the messages
and tool schemas that request carried. After a surface ``Replace`` (a compaction, a prompt
normalisation) the reported base no longer describes the surface, and the estimate is the
calibrated character count of the whole surface until the next report.

The figures are estimates on purpose: no tokenizer, no model download. A tracker per session
folds new events incrementally, so an estimate costs the new events plus one pass over the
surface's cached character counts.
"""

from __future__ import annotations

import json
import math
import weakref
from collections.abc import Iterable, Sequence

from ..messages import FileBlock, ImageBlock, Message, ToolCallBlock
from ..session import Session, surface_message
from ..session.events import AssistantMessageEvent, Replace
from ._media_tokens import binary_chars, binary_tokens

__all__ = [
    "DEFAULT_TOKENS_PER_CHAR",
    "estimate_message_tokens",
    "estimate_tokens",
    "node_tokens",
    "tokens_per_char",
]

#: Tokens per character before any provider reported usage (about four characters a token).
DEFAULT_TOKENS_PER_CHAR = 0.25
#: Tokens a message costs beyond its text (role and framing).
MESSAGE_OVERHEAD = 4
# A calibration outside these bounds comes from a degenerate report (a tiny request with a
# large fixed overhead, a provider reporting 0); it is clamped rather than trusted.
_MIN_RATIO = 1 / 8
_MAX_RATIO = 1.0


def message_chars(message: Message) -> int:
    """The characters of a message the model reads: texts, tool names and arguments, and
    text files."""
    total = 0
    for block in message.content:
        if isinstance(block, ToolCallBlock):
            total += len(block.name) + len(block.arguments)
        elif isinstance(block, ImageBlock | FileBlock):
            total += binary_chars(block)
        else:
            total += len(block.text)
    return total


def message_media_tokens(message: Message) -> int:
    """The tokens of a message's images and PDFs (a count per block, not per character)."""
    return sum(binary_tokens(b) for b in message.content if isinstance(b, ImageBlock | FileBlock))


def estimate_message_tokens(
    messages: Iterable[Message], tokens_per_char: float = DEFAULT_TOKENS_PER_CHAR
) -> int:
    """The estimated tokens of ``messages`` at ``tokens_per_char``."""
    return sum(
        math.ceil(message_chars(m) * tokens_per_char) + message_media_tokens(m) + MESSAGE_OVERHEAD
        for m in messages
    )


class _Tracker:
    """The estimate state of one session, folded from its events incrementally."""

    __slots__ = (
        "base_input",
        "base_seq",
        "chars",
        "header_seq",
        "media",
        "ratio",
        "replaced_seq",
        "scanned",
        "tool_chars",
    )

    def __init__(self) -> None:
        self.scanned = 0
        self.base_seq = 0  # seq of the latest assistant/message with usage (0: none)
        self.base_input = 0
        self.replaced_seq = 0  # seq of the latest surface Replace
        self.ratio = DEFAULT_TOKENS_PER_CHAR
        self.chars: dict[int, int] = {}  # surface seq -> characters of its projection (-1: none)
        self.media: dict[int, int] = {}  # surface seq -> tokens of its images and PDFs
        self.header_seq = 0
        self.tool_chars = 0

    def node_chars(self, session: Session, seq: int) -> int:
        chars = self.chars.get(seq)
        if chars is None:
            message = surface_message(session.event(seq))
            chars = self.chars[seq] = -1 if message is None else message_chars(message)
            self.media[seq] = 0 if message is None else message_media_tokens(message)
        return chars

    def node_tokens(self, session: Session, seq: int) -> int:
        chars = self.node_chars(session, seq)
        if chars < 0:
            return 0
        return math.ceil(chars * self.ratio) + self.media[seq] + MESSAGE_OVERHEAD

    def update(self, session: Session) -> None:
        events = session.events
        fresh_base = False
        for index in range(self.scanned, len(events)):
            event = events[index]
            data = event.data
            if isinstance(event.surface_op, Replace):
                self.replaced_seq = event.seq
            elif isinstance(data, AssistantMessageEvent) and data.usage is not None:
                usage = data.usage
                self.base_seq = event.seq
                self.base_input = (
                    usage.input_tokens
                    + (usage.cache_read_tokens or 0)
                    + (usage.cache_write_tokens or 0)
                )
                fresh_base = True
            elif event.type == "request/header":
                tools = data.header.get("tools") if hasattr(data, "header") else None
                self.header_seq = event.seq
                self.tool_chars = len(json.dumps(tools)) if tools else 0
        self.scanned = len(events)
        if fresh_base and self.base_valid() and self.base_input > 0:
            self._calibrate(session)

    def base_valid(self) -> bool:
        return self.base_seq > self.replaced_seq

    def _calibrate(self, session: Session) -> None:
        # The base request carried exactly the surface nodes before it (no Replace since).
        chars = self.tool_chars
        count = 0
        media = 0  # counted per block, not per character: not part of the ratio
        for seq in session.surface_seqs():
            if seq >= self.base_seq:
                break
            node = self.node_chars(session, seq)
            if node >= 0:
                chars += node
                count += 1
                media += self.media[seq]
        if chars <= 0:
            return
        ratio = (self.base_input - MESSAGE_OVERHEAD * count - media) / chars
        self.ratio = min(max(ratio, _MIN_RATIO), _MAX_RATIO)

    def estimate(self, session: Session) -> int:
        self.update(session)
        surface = session.surface_seqs()
        if self.base_valid():
            total = self.base_input
            for seq in reversed(surface):
                if seq < self.base_seq:
                    break
                total += self.node_tokens(session, seq)
            return total
        total = math.ceil(self.tool_chars * self.ratio)
        return total + sum(self.node_tokens(session, seq) for seq in surface)


_trackers: weakref.WeakKeyDictionary[Session, _Tracker] = weakref.WeakKeyDictionary()


def _tracker(session: Session) -> _Tracker:
    tracker = _trackers.get(session)
    if tracker is None:
        tracker = _trackers[session] = _Tracker()
    return tracker


def estimate_tokens(session: Session, adding: Sequence[Message] = ()) -> int:
    """The estimated input tokens of ``session``'s next request, plus ``adding``'s.

    The last request's reported input tokens plus a calibrated character estimate of what
    was written since (see the module note); a pure function of the log.
    """
    tracker = _tracker(session)
    total = tracker.estimate(session)
    if adding:
        total += estimate_message_tokens(adding, tracker.ratio)
    return total


def tokens_per_char(session: Session) -> float:
    """The calibrated tokens-per-character ratio of ``session`` (the default before a report)."""
    tracker = _tracker(session)
    tracker.update(session)
    return tracker.ratio


def node_tokens(session: Session, seqs: Iterable[int]) -> list[int]:
    """The estimated tokens of each surface node in ``seqs`` (0 for a dormant one)."""
    tracker = _tracker(session)
    tracker.update(session)
    return [tracker.node_tokens(session, seq) for seq in seqs]
