"""Markdown in the terminal (issue 28): rich renders it, and no character of the answer is
lost. Ordinary Markdown keeps its numbers and text; hostile Markdown (escape sequences, raw
HTML, deep nesting, huge input) is shown as text and cannot drive the terminal.

In a real terminal too: ``steerloop sessions show`` of a session whose answer has the
reported cases, read back from tmux.
"""

from __future__ import annotations

import io
import re
from pathlib import Path

import pytest
from rich.console import Console

from steerloop.cli._markdown import SafeMarkdown, printable
from steerloop.cli._render import EventRenderer
from tests.cli.helpers import CLI, Tmux, clean_env, run_cli, text_reply
from tests.llm.sse_server import SSEServer

pytestmark = pytest.mark.timeout(120)

ANSI = re.compile(r"\x1b\[[0-9;]*m")


def render(markup: str, width: int = 80) -> str:
    """What the terminal receives (styles on), and the same without the style codes."""
    out = io.StringIO()
    Console(file=out, width=width, force_terminal=True, color_system="truecolor").print(
        SafeMarkdown(markup)
    )
    return out.getvalue()


def plain(markup: str, width: int = 80) -> str:
    return ANSI.sub("", render(markup, width))


def lines(markup: str) -> list[str]:
    return [line.rstrip() for line in plain(markup).splitlines() if line.strip()]


# --- ordinary Markdown ----------------------------------------------------------------------


def test_the_reported_cases_keep_their_text() -> None:
    """``100.`` was an empty line, ``List<String>`` became ``List``, ``<br>`` vanished."""
    assert lines("Total:\n\n100.") == ["Total:", "100."]
    assert "List<String>" in plain("Use a List<String> here, or `List<String>`.")
    assert lines("first<br>second<br/>third") == ["first", "second", "third"]


def test_numbered_lists_keep_their_numbers_and_delimiters() -> None:
    assert lines("1. one\n2. two\n3. three") == ["1. one", "2. two", "3. three"]
    assert lines("7) seven\n8) eight") == ["7) seven", "8) eight"]
    assert lines("9. nine\n10. ten") == [" 9. nine", "10. ten"]
    assert lines("1.\n2. two") == ["1.", "2. two"]  # an empty item keeps its number


def test_ordinary_markdown_renders_every_word() -> None:
    text = (
        "# Plan\n\nSome **bold** and *em* text with a [link](https://example.com).\n\n"
        "- apples\n- pears\n\n"
        "```python\ndef f(x: list[int]) -> int:\n    return x[0]  # <first>\n```\n\n"
        "| a | b |\n|---|---|\n| x<br>y | `<T>` |\n\n> quoted\n"
    )
    out = plain(text)
    for word in ("Plan", "bold", "em", "link", "apples", "pears", "def f(x: list[int])",
                 "return x[0]  # <first>", "quoted", "<T>", "x", "y"):  # fmt: skip
        assert word in out, word


def test_the_renderer_prints_answers_as_markdown() -> None:
    from steerloop.messages import AssistantMessage, TextBlock
    from steerloop.session._events import AssistantMessageEvent, SessionEvent

    event = SessionEvent(
        seq=1,
        type="assistant/message",
        time=0,
        data=AssistantMessageEvent(
            turn=1,
            step=1,
            message=AssistantMessage(id="m", content=(TextBlock("Steps:\n\n1. a<br>b\n100."),)),
            stream=(),
        ),
    )
    out = io.StringIO()
    EventRenderer(Console(file=out, width=60)).render(event)
    assert [line.rstrip() for line in out.getvalue().splitlines() if line.strip()] == [
        "Steps:",
        "  1. a",  # the numbers written, aligned
        "     b",
        "100.",
    ]


# --- hostile Markdown -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        "\x1b[2J\x1b[31mred\x1b[0m",  # clear screen, colour
        "\x1b]8;;http://evil/\x07click\x1b]8;;\x07",  # a hyperlink the text did not ask for
        "\x9b2J C1 CSI",  # 8-bit CSI
        "bell\x07 back\x08space \x7f del",
        "```\n\x1b[2Jin code\n```",
        "`\x1b[2J`",
    ],
)
def test_control_characters_are_shown_never_sent(text: str) -> None:
    raw = render(text)
    for bad in ("\x1b[2J", "\x1b]8", "\x9b", "\x07", "\x08", "\x7f"):
        assert bad not in raw
    assert ANSI.sub("", raw).strip()  # something visible is shown instead
    assert "␛" in printable("\x1b") and printable("a\tb\nc") == "a\tb\nc"


@pytest.mark.parametrize(
    "text",
    [
        '<img src=x onerror="alert(1)"><script>alert(2)</script>',
        "<!-- a comment the model wrote -->",
        "<div>\n<b>bold?</b>\n</div>",
    ],
)
def test_raw_html_is_shown_as_the_text_it_is(text: str) -> None:
    out = " ".join(plain(text).split())
    assert " ".join(text.split()) in out


def test_deeply_nested_and_huge_input_renders_in_bounds() -> None:
    nested = ">" * 2000 + " deep"
    assert "deep" in plain(nested)
    brackets = "[" * 5000 + "x" + "]" * 5000
    assert "x" in plain(brackets)
    items = "\n".join(f"{n}. item {n}" for n in range(1, 2001))
    out = lines(items)
    assert out[0] == "   1. item 1" and out[-1] == "2000. item 2000" and len(out) == 2000
    long_line = "word " * 20_000
    assert plain(long_line, width=200).count("word") == 20_000


# --- in a real terminal ---------------------------------------------------------------------


async def test_sessions_show_in_a_terminal_keeps_every_line(
    tmp_path: Path, server: SSEServer, tmux: Tmux
) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    store = f"sqlite:///{tmp_path / 's.db'}"
    answer = "The total is\n\n100.\n\nUse List<String> here.<br>Next line.\n\n1. one\n2. two"
    server.add(text_reply(answer))
    env = clean_env(tmp_path, server)
    code, _out, err = await run_cli("run", "hi", "--session", "M1", "--store", store,
                                    env=env, cwd=ws)  # fmt: skip
    assert code == 0, err
    await tmux.start([*CLI, "sessions", "show", "M1", "--store", store], env=env, cwd=ws)
    screen = await tmux.wait_screen("Use List<String> here.", "100.", "Next line.", "2. two")
    rows = [row.strip() for row in screen.splitlines()]
    assert "100." in rows
    assert "Use List<String> here." in rows and "Next line." in rows
    assert "1. one" in rows and "2. two" in rows
