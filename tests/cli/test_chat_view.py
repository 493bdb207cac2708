"""The chat's live region: streamed text tail, reasoning, running tools, approval question."""

from __future__ import annotations

import io
from types import SimpleNamespace
from typing import Any

from rich.console import Console

from steerloop.agent._decisions import StreamFrame
from steerloop.cli._chat_view import ChatView, Screen, wrap
from steerloop.llm.chunks import ReasoningDelta, TextDelta, ToolCallDelta


def frame(kind: Any, attempt: str = "a1", **fields: object) -> Any:  # a StreamFramePayload stand-in
    return SimpleNamespace(frame=StreamFrame(kind=kind, attempt_id=attempt, revision=0, **fields))  # type: ignore[arg-type]


def view() -> ChatView:
    return ChatView(Screen(Console(file=io.StringIO(), width=40)), lambda: None)


def text_of(fragments: list[tuple[str, str]]) -> str:
    return "".join(text for _style, text in fragments)


def test_wrap_counts_terminal_cells() -> None:
    assert wrap("abcdefghij", 8) == ["abcdefgh", "ij"]
    assert wrap("一二三四五", 8) == ["一二三四", "五"]  # two cells each
    assert wrap("a\n\nb", 8) == ["a", "", "b"]


def test_live_shows_the_tail_of_the_stream_and_running_calls() -> None:
    v = view()
    v.on_frame(frame("start"))
    v.on_frame(frame("chunk", chunk=ReasoningDelta(index=0, text="thinking hard")))
    lines = "\n".join(f"line {i}" for i in range(30))
    v.on_frame(frame("chunk", chunk=TextDelta(index=1, text=lines)))
    v.on_frame(
        frame("chunk", chunk=ToolCallDelta(index=2, id="c1", name="grep", arguments_delta="{}"))
    )
    out = text_of(v.live(40, 10))
    assert "thinking hard" in out
    assert "line 29" in out and "line 10" not in out  # only the tail fits
    assert "grep …" in out and "preparing (2 chars)" in out
    assert len(out.splitlines()) <= 10

    # Frames of another attempt are ignored; an abandoned attempt drops its live text.
    v.on_frame(frame("chunk", attempt="other", chunk=TextDelta(index=1, text="zzz")))
    assert "zzz" not in text_of(v.live(40, 10))
    v.on_frame(frame("end", outcome={"kind": "abandoned"}))
    assert text_of(v.live(40, 10)) == ""


def test_live_shows_the_approval_question_and_a_working_line() -> None:
    v = view()
    v.running = True
    assert "working…" in text_of(v.live(40, 10))
    v.question = 'shell(command="ls")'
    assert '? allow shell(command="ls")  [y/N]' in text_of(v.live(60, 10))
