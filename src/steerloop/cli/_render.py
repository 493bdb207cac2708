"""Render session events the way the chat shows them (rich)."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from rich.console import Console
from rich.text import Text

from ..llm.chunks import Finish
from ..messages import ReasoningBlock, TextBlock, ToolCallBlock
from ..session._events import SessionEvent
from ._attach import attachment_labels
from ._markdown import SafeMarkdown, printable

__all__ = ["EventRenderer", "format_args", "summarise"]


def summarise(text: str, limit: int = 100) -> str:
    """The first line of ``text``, cut to ``limit`` characters, fit for the terminal."""
    text = printable(text)
    first = text.strip().splitlines()[0] if text.strip() else ""
    return first if len(first) <= limit else first[: limit - 1] + "…"


def format_args(raw: str, limit: int = 60) -> str:
    """Tool-call arguments as ``k=v, ...``, cut to ``limit`` characters."""
    try:
        value = json.loads(raw) if raw.strip() else {}
    except ValueError:
        return summarise(raw, limit)
    if isinstance(value, dict):
        text = ", ".join(f"{k}={json.dumps(v, ensure_ascii=False)}" for k, v in value.items())
    else:
        text = json.dumps(value, ensure_ascii=False)
    return summarise(text, limit)


def _failure_of(stream: Iterable[Any]) -> Any:
    """The failure of an attempt's ``error`` finish record, if it has one."""
    for record in stream:
        chunk = record.chunk
        if isinstance(chunk, Finish) and chunk.reason.kind == "error":
            return chunk.reason.failure
    return None


class EventRenderer:
    """Prints the model-relevant events of a log; tracks usage per turn."""

    def __init__(self, console: Console, *, markdown: bool = True) -> None:
        self.console = console
        self.markdown = markdown
        self._names: dict[str, str] = {}
        # This turn's tokens: input (uncached), cached input, output, reasoning output.
        self._usage = [0, 0, 0, 0]

    def render_all(self, events: Iterable[SessionEvent]) -> None:
        for event in events:
            self.render(event)

    def render(self, event: SessionEvent) -> None:
        d: Any = event.data
        kind = event.type
        out = self.console
        if kind == "user/message":
            source = d.source.kind
            label = {"user": "you", "plugin": "context", "tool": "tool context", "goal": "goal"}
            text = " ".join(b.text for b in d.content if isinstance(b, TextBlock))
            text = " ".join(filter(None, [text, *attachment_labels(d.content)]))
            out.print(
                Text.assemble((f"{label.get(source, source)} ❯ ", "bold cyan"), printable(text))
            )
        elif kind == "assistant/message":
            if d.usage is not None:
                self._count(d.usage)
            for block in d.message.content:
                if isinstance(block, ReasoningBlock) and block.text:
                    out.print(Text(summarise(block.text, 200), style="dim italic"))
                elif isinstance(block, TextBlock) and block.text:
                    if self.markdown and not d.interrupted:
                        out.print(SafeMarkdown(block.text))
                    else:
                        out.print(Text(printable(block.text)))
                elif isinstance(block, ToolCallBlock):
                    self._names[block.id] = block.name
            if d.interrupted:
                out.print(Text("  ⏹ interrupted", style="yellow"))
        elif kind == "assistant/attempt":
            failure = _failure_of(d.stream)
            if failure is not None:  # a failed request (the retry policy may send another)
                out.print(
                    Text.assemble(
                        ("  ⚠ request failed ", "yellow"),
                        (failure.code, "yellow"),
                        f": {summarise(failure.message, 80)}",
                    )
                )
        elif kind == "tool/call":
            self._names[d.call_id] = d.name
            out.print(
                Text.assemble(
                    ("  ⚙ ", "magenta"),
                    (d.name, "bold"),
                    f"({format_args(d.arguments)})",
                    (f"  #{d.call_id}", "dim"),
                )
            )
        elif kind == "tool/result":
            message = d.message
            text = " ".join(b.text for b in message.content if isinstance(b, TextBlock))
            text = " ".join(filter(None, [text, *attachment_labels(message.content)]))
            name = self._names.get(message.call_id, "tool")
            if message.is_error:
                code = d.error.code if d.error is not None else "ERROR"
                out.print(
                    Text.assemble(
                        ("  ✗ ", "red"),
                        f"{name} #{message.call_id} ",
                        (code, "red"),
                        f": {summarise(text, 80)}",
                    )
                )
            else:
                out.print(
                    Text.assemble(
                        ("  ✓ ", "green"),
                        f"{name} #{message.call_id}: ",
                        (summarise(text, 80), "dim"),
                    )
                )
        elif kind == "turn/end":
            reason = d.reason
            detail = reason.kind
            if reason.kind == "aborted" and reason.reason is not None:
                detail += f" ({reason.reason.kind})"
            if reason.kind == "error" and reason.error is not None:
                # In full: it often says what to do (a command to run, a variable to set).
                detail += f": {printable(reason.error.message)}"
            usage = self._footer()
            style = {"completed": "green", "aborted": "yellow", "error": "red"}.get(reason.kind, "")
            out.print(Text(f"── turn {d.turn} {detail}{usage}", style=f"dim {style}".strip()))
            self._usage = [0, 0, 0, 0]

    def _count(self, usage: Any) -> None:
        # TokenUsage counts are disjoint: cached input is not in input_tokens, reasoning
        # is not in output_tokens; the footer shows the totals and names the parts.
        self._usage[0] += usage.input_tokens + (usage.cache_write_tokens or 0)
        self._usage[1] += usage.cache_read_tokens or 0
        self._usage[2] += usage.output_tokens
        self._usage[3] += usage.reasoning_tokens or 0

    def _footer(self) -> str:
        if not any(self._usage):
            return ""
        fresh, cached, output, reasoning = self._usage
        text = f" · tokens in {fresh + cached}"
        if cached:
            text += f" ({cached} cached)"
        text += f" / out {output + reasoning}"
        if reasoning:
            text += f" ({reasoning} reasoning)"
        return text
