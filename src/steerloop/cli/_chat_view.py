"""What the chat shows: settled output above the prompt, the live part inside it.

Settled output (messages as Markdown, tool results, turn ends) is printed once, above the
prompt, through ``Screen``. What is still moving — the streamed text of the current attempt,
its reasoning, the running tool calls with a spinner, a pending approval question — lives in
the prompt's own (re-rendered) area, so nothing is printed twice: when a message settles, the
live text is dropped in the same terminal write that prints its Markdown.
"""

from __future__ import annotations

import asyncio
import io
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from prompt_toolkit.application.run_in_terminal import in_terminal
from prompt_toolkit.utils import get_cwidth
from rich.console import Console
from rich.table import Table
from rich.text import Text

from ..agent._decisions import StatusPayload, StreamFramePayload
from ..llm.chunks import ReasoningDelta, TextDelta, ToolCallDelta
from ..messages import TextBlock
from ..session._events import SessionEvent
from ..session._session import SessionEventPayload
from ..tools._define import Tool
from ._attach import attachment_labels
from ._markdown import printable
from ._render import EventRenderer, format_args, summarise

__all__ = ["ChatView", "Screen", "help_table", "tools_table"]

Fragments = list[tuple[str, str]]

_SPINNER = "⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏"
_DIM = "fg:ansibrightblack"


_HELP = (
    ("Enter", "send; while the agent works, steer it (the next step sees the message)"),
    ("/queue TEXT", "send TEXT as a follow-up for after this turn"),
    ("/send", "send the messages a Ctrl-C kept queued, now"),
    ("/inject TEXT", "add TEXT to the next step without waking the agent"),
    ("/attach FILE", "send an image or a file (PDF, text) with your next message; /attach lists"),
    ("/sessions", "list stored sessions"),
    ("/resume ID", "switch to a stored session and show its history"),
    ("/fork", "copy this session into a new one and switch to it"),
    ("/model P/M", "use PROVIDER/MODEL for the next requests"),
    ("/tools", "list the tools the agent can call"),
    ("/goal TEXT", "set a goal the agent pursues round by round (replaces the current one)"),
    ("/goal", "show the goal; /goal pause | resume | clear change it"),
    ("/compact", "summarize the older history now (the footer shows ~context/window tokens)"),
    ("/SERVER:PROMPT ARGS", "send an MCP server's prompt, expanded (/prompts lists them)"),
    ("@SERVER:URI", "in a message: attach that MCP server's resource to it"),
    ("/help", "this help"),
    ("/quit", "leave (also Ctrl-D, or Ctrl-C when idle / twice)"),
    ("Ctrl-C", "cancel the running turn (queued messages are kept); the history stays consistent"),
)


def help_table() -> Table:
    table = Table(box=None, show_header=False)
    for key, text in _HELP:
        table.add_row(Text(key, style="bold"), text)
    return table


def tools_table(tools: Iterable[Tool]) -> Table:
    table = Table("tool", "description", box=None)
    for tool in tools:
        table.add_row(tool.name, summarise(tool.description, 90))
    return table


def spinner() -> str:
    return _SPINNER[int(time.monotonic() * 10) % len(_SPINNER)]


def wrap(text: str, width: int) -> list[str]:
    """``text`` cut into terminal rows of at most ``width`` cells (by character)."""
    width = max(width, 8)
    rows: list[str] = []
    for paragraph in printable(text.replace("\r", "").replace("\t", "    ")).split("\n"):
        row: list[str] = []
        used = 0
        for ch in paragraph:
            cells = get_cwidth(ch)
            if used + cells > width:
                rows.append("".join(row))
                row, used = [], 0
            row.append(ch)
            used += cells
        rows.append("".join(row))
    return rows


class Screen:
    """Prints rich renderables above the prompt, in order, one terminal write per batch.

    Everything is rendered into a private console first, then written inside prompt_toolkit's
    ``in_terminal`` (the prompt is erased, the text written, the prompt redrawn). A ``then``
    callback runs in the same window, so a live region can be dropped as its settled form
    appears.
    """

    def __init__(self, console: Console) -> None:
        self.console = console
        self._buffer = io.StringIO()
        self.capture = Console(
            file=self._buffer,
            force_terminal=console.is_terminal,
            color_system=console.color_system,  # type: ignore[arg-type]
            width=console.width,
        )
        self._out = sys.stdout
        self._queue: asyncio.Queue[tuple[str, Callable[[], None] | None]] = asyncio.Queue()
        self._writer: asyncio.Task[None] | None = None

    def emit(self, draw: Callable[[Console], None], then: Callable[[], None] | None = None) -> None:
        """Render ``draw(console)`` now; write it (then run ``then``) above the prompt."""
        self.capture.width = self.console.width
        draw(self.capture)
        text = self._buffer.getvalue()
        self._buffer.seek(0)
        self._buffer.truncate()
        self._queue.put_nowait((text, then))
        if self._writer is None or self._writer.done():
            self._writer = asyncio.get_running_loop().create_task(self._write_all())

    def print(self, *objects: Any, style: str | None = None) -> None:
        self.emit(lambda c: c.print(*objects, style=style))

    async def _write_all(self) -> None:
        while not self._queue.empty():
            async with in_terminal():
                while not self._queue.empty():
                    text, then = self._queue.get_nowait()
                    self._out.write(text)
                    if then is not None:
                        then()
                self._out.flush()

    async def drain(self) -> None:
        """Wait until everything emitted so far is on the terminal."""
        while self._writer is not None and not self._writer.done():
            await self._writer


@dataclass(slots=True)
class _Stream:
    """The live part of one model attempt."""

    attempt_id: str
    text: list[str] = field(default_factory=list)
    reasoning: list[str] = field(default_factory=list)
    calls: dict[int, list[Any]] = field(default_factory=dict)  # index -> [name, chars]


@dataclass(slots=True)
class _Call:
    name: str
    args: str
    started: float


class ChatView:
    """Turns stream frames and session events into live lines and settled output."""

    def __init__(self, screen: Screen, invalidate: Callable[[], None]) -> None:
        self.screen = screen
        self.invalidate = invalidate
        self.renderer = EventRenderer(screen.capture)
        self.stream: _Stream | None = None
        self.calls: dict[str, _Call] = {}
        self.running = False
        self.question: str | None = None

    def reset(self) -> None:
        """Forget live state (another agent takes over the view)."""
        self.renderer = EventRenderer(self.screen.capture)
        self.stream = None
        self.calls.clear()
        self.running = False

    # --- hook listeners ------------------------------------------------------------------

    def on_status(self, payload: StatusPayload) -> None:
        self.running = payload.status == "running"
        self.invalidate()

    def on_frame(self, payload: StreamFramePayload) -> None:
        frame = payload.frame
        if frame.kind == "start":
            self.stream = _Stream(frame.attempt_id)
        elif self.stream is None or self.stream.attempt_id != frame.attempt_id:
            return
        elif frame.kind == "chunk":
            self._apply(self.stream, frame.chunk)
        elif frame.kind == "end" and frame.outcome.get("kind") == "abandoned":
            self.stream = None
        self.invalidate()

    def _apply(self, stream: _Stream, chunk: Any) -> None:
        if isinstance(chunk, TextDelta):
            stream.text.append(chunk.text)
        elif isinstance(chunk, ReasoningDelta):
            stream.reasoning.append(chunk.text)
        elif isinstance(chunk, ToolCallDelta):
            call = stream.calls.setdefault(chunk.index, [chunk.name or "tool", 0])
            if chunk.name:
                call[0] = chunk.name
            call[1] += len(chunk.arguments_delta)

    def on_event(self, payload: SessionEventPayload) -> None:
        event: SessionEvent = payload.event
        kind = event.type
        if kind in ("assistant/message", "assistant/attempt"):
            stream = self.stream

            def settle() -> None:
                if self.stream is stream:
                    self.stream = None

            self.screen.emit(lambda _c: self.renderer.render(event), then=settle)
        elif kind == "tool/call":
            d: Any = event.data
            self.calls[d.call_id] = _Call(d.name, format_args(d.arguments), time.monotonic())
            self.invalidate()
        elif kind == "tool/result":
            self._result(event)
        elif kind in ("user/message", "turn/end"):
            self.screen.emit(lambda _c: self.renderer.render(event))

    def _result(self, event: SessionEvent) -> None:
        d: Any = event.data
        message = d.message
        call = self.calls.get(message.call_id)
        name, args = (call.name, call.args) if call else ("tool", "")
        text = " ".join(b.text for b in message.content if isinstance(b, TextBlock))
        text = " ".join(filter(None, [text, *attachment_labels(message.content)]))
        if message.is_error:
            code = d.error.code if d.error is not None else "ERROR"
            line = Text.assemble(
                ("  ✗ ", "red"),
                (name, "bold"),
                f"({args}) ",
                (code, "red"),
                f": {summarise(text, 80)}",
            )
        else:
            line = Text.assemble(
                ("  ✓ ", "green"), (name, "bold"), f"({args}) ", (summarise(text, 80), "dim")
            )

        def done() -> None:
            self.calls.pop(message.call_id, None)

        self.screen.emit(lambda c: c.print(line), then=done)

    # --- the live region -----------------------------------------------------------------

    def live(self, width: int, height: int) -> Fragments:
        """The moving part, as prompt_toolkit fragments ending in a newline (or empty)."""
        width = max(width - 1, 8)
        out: Fragments = []
        spin = spinner()
        calls = [
            (f"  {spin} ", f"{c.name}({c.args})", f"  {time.monotonic() - c.started:.1f}s")
            for c in self.calls.values()
        ]
        stream = self.stream
        if stream is not None:
            calls += [
                (f"  {spin} ", f"{name} …", f"  preparing ({chars} chars)")
                for name, chars in stream.calls.values()
            ]
        budget = max(height - len(calls) - (2 if self.question else 0), 3)
        if stream is not None and stream.reasoning:
            rows = wrap("".join(stream.reasoning), width)[-min(3, budget) :]
            budget -= len(rows)
            out += [(f"{_DIM} italic", row + "\n") for row in rows]
        if stream is not None and stream.text and budget > 0:
            tail = "".join(stream.text)[-(width * budget * 2) :]
            out += [("", row + "\n") for row in wrap(tail, width)[-budget:]]
        for mark, label, detail in calls:
            out += [("fg:ansimagenta", mark), ("bold", label[: width - 20]), (_DIM, detail + "\n")]
        if self.running and not out:
            out.append((_DIM, f"{spin} working…  (Enter steers · Ctrl-C stops)\n"))
        if self.question:
            out.append(("bold fg:ansiyellow", f"? allow {self.question}  [y/N]\n"))
        return out
