"""Where a compaction cuts, and what each strategy's summary says.

The compacted range is a contiguous run of surface nodes after the leading system node(s),
ending before the *kept* suffix. The kept suffix never starts with a ``tool/result`` (so a
call is never separated from its result) and always holds at least the latest assistant
message with its results (the step the model is answering); within that, it is the longest
suffix whose estimate fits ``keep_recent_tokens``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ..messages import FileBlock, ImageBlock, Message, TextBlock, ToolCallBlock
from ..session import SURFACE_TYPES, Session, surface_message
from ._estimate import node_tokens, tokens_per_char

__all__ = ["Plan", "plan_cut", "transcript", "window_note"]

_OMITTED = "[… the earlier part of this summary was cut to fit the context window …]\n"


@dataclass(frozen=True, slots=True)
class Plan:
    """A compaction range: the surface nodes it shadows and their estimated tokens."""

    nodes: tuple[int, ...]
    tokens: int

    @property
    def upto_seq(self) -> int:
        return self.nodes[-1]


def plan_cut(session: Session, keep_recent_tokens: int) -> Plan | None:
    """The range to compact now, or ``None`` when nothing before the kept suffix remains."""
    surface = session.surface_seqs()
    head = 0
    while head < len(surface) and session.event(surface[head]).type == "system/message":
        head += 1
    body = surface[head:]
    types = [session.event(seq).type for seq in body]
    # The largest cut keeps the latest assistant message and what follows it; without one,
    # the last node that is not a tool result.
    last = next((i for i in range(len(body) - 1, -1, -1) if types[i] == "assistant/message"), -1)
    if last < 0:
        last = next((i for i in range(len(body) - 1, -1, -1) if types[i] != "tool/result"), -1)
    if last < 1:
        return None
    tokens = node_tokens(session, body)
    cut = last
    kept = sum(tokens[cut:])
    for i in range(last - 1, 0, -1):
        kept += tokens[i]
        if kept > keep_recent_tokens:
            break
        if types[i] != "tool/result":
            cut = i
    nodes = tuple(body[:cut])
    if len(nodes) == 1 and types[0] == "context/compacted":
        return None  # only the previous summary is old enough: nothing new to compact
    return Plan(nodes=nodes, tokens=sum(tokens[:cut]))


def _text(message: Message) -> str:
    """The message's text; an image or a file is named (the summary model reads text, and
    the compacted attachment is gone from the surface after the summary)."""
    return "\n".join(
        b.text if isinstance(b, TextBlock) else f"[attached {b.describe()}]"
        for b in message.content
        if isinstance(b, TextBlock | ImageBlock | FileBlock)
    )


def transcript(session: Session, nodes: Sequence[int], *, tool_result_chars: int | None) -> str:
    """The compacted nodes as plain text.

    ``tool_result_chars=None`` cuts each tool result to a one-line stub (tool, call id,
    size); a number keeps that many characters of each result.
    """
    names: dict[str, str] = {}
    parts: list[str] = []
    for seq in nodes:
        event = session.event(seq)
        message = surface_message(event)
        if message is None:
            continue
        if event.type == "context/compacted":
            parts.append(f"Summary of the conversation before this point:\n{_text(message)}")
        elif message.role == "user":
            source = message.source
            who = "User" if source.kind == "user" else f"Context ({source.plugin or source.kind})"
            parts.append(f"{who}: {_text(message)}")
        elif message.role == "assistant":
            lines = [_text(message)] if _text(message) else []
            for block in message.content:
                if isinstance(block, ToolCallBlock):
                    names[block.id] = block.name
                    args = block.arguments
                    if len(args) > 200:
                        args = args[:200] + "…"
                    lines.append(f"[called {block.name}({args}), call id {block.id}]")
            if lines:
                parts.append("Assistant: " + "\n".join(lines))
        elif message.role == "tool":
            name = names.get(message.call_id, "tool")
            text = _text(message)
            error = " (error)" if message.is_error else ""
            if tool_result_chars is None:
                parts.append(
                    f"[result of {name}, call id {message.call_id}{error}: {len(text)} characters,"
                    " omitted]"
                )
            else:
                cut = text[:tool_result_chars]
                more = len(text) - len(cut)
                tail = f" … [{more} more characters]" if more else ""
                parts.append(f"Result of {name}, call id {message.call_id}{error}: {cut}{tail}")
    return "\n\n".join(parts)


def bounded(text: str, session: Session, budget_tokens: int) -> str:
    """``text`` cut from the front to about ``budget_tokens`` (the newest part is kept)."""
    limit = max(int(budget_tokens / tokens_per_char(session)), 1)
    if len(text) <= limit:
        return text
    return _OMITTED + text[len(text) - limit + len(_OMITTED) :]


def window_note(session: Session, upto_seq: int) -> str:
    """The ``window`` summary: what was left out, counted over the whole log up to the cut."""
    counts = {"user": 0, "assistant": 0, "tool": 0}
    turns: list[int] = []
    for event in session.events[:upto_seq]:
        if event.type == "turn/start":
            turns.append(event.data.turn)
        if event.type not in SURFACE_TYPES or event.type in ("system/message", "context/compacted"):
            continue
        message = surface_message(event)
        if message is not None:
            counts[message.role] += 1
    total = sum(counts.values())
    span = (
        f" of turns {turns[0]}–{turns[-1]}"
        if len(turns) > 1
        else (f" of turn {turns[0]}" if turns else "")
    )
    return (
        f"[Earlier conversation left out to fit the context window: {total} messages{span} "
        f"({counts['user']} user, {counts['assistant']} assistant, {counts['tool']} tool "
        "results). The session log keeps them in full; ask the user if something from "
        "that part matters now.]"
    )
