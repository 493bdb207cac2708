"""Markdown for the terminal: rich's renderer, with nothing of the text lost.

rich's own ``Markdown`` parses inline HTML and then drops it (``List<String>`` shows as
``List``, ``<br>`` vanishes), renders an ordered-list item without its delimiter (``1.``
becomes ``1``) and an empty item as nothing at all (a line ``100.`` disappears). Here HTML
is not parsed (it shows as the text it is), ``<br>`` is a line break, and numbered items
keep the number and delimiter written (``1.``, ``100.``, ``7)``), empty or not. Markdown
nested deeper than the parser follows (it drops what lies below) is shown as plain text
instead. Control characters (ESC above all: rich passes it through) are shown as their
visible symbols (``printable``), so a model's or a tool's escape sequences cannot drive the
terminal.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any, ClassVar

from markdown_it import MarkdownIt
from markdown_it.token import Token
from rich.console import Console, ConsoleOptions, RenderResult
from rich.markdown import ListElement, ListItem, Markdown, MarkdownElement
from rich.segment import Segment
from rich.text import Text

__all__ = ["SafeMarkdown", "printable"]

_BREAK = re.compile(r"<br\s*/?>", re.IGNORECASE)
# C0 controls but tab and newline, DEL, and the C1 controls (a terminal reads 0x9b as CSI).
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def _symbol(match: re.Match[str]) -> str:
    code = ord(match.group())
    return chr(0x2400 + code) if code < 0x20 else "\u2421" if code == 0x7F else "\ufffd"


def printable(text: str) -> str:
    """``text`` with every control character but tab and newline made visible (ESC → ␛)."""
    return _CONTROL.sub(_symbol, text)


_MAX_NESTING = 20  # markdown-it's own bound (commonmark preset): deeper content is dropped


def _parser() -> MarkdownIt:
    options = {"html": False, "maxNesting": _MAX_NESTING}
    return MarkdownIt("commonmark", options).enable("strikethrough").enable("table")


def _breaks(tokens: Iterable[Token]) -> None:
    """Turn ``<br>`` in the text of every inline token into a hard line break."""
    for token in tokens:
        if token.type != "inline" or not token.children:
            continue
        children: list[Token] = []
        for child in token.children:
            if child.type != "text" or not _BREAK.search(child.content):
                children.append(child)
                continue
            for index, part in enumerate(_BREAK.split(child.content)):
                if index:
                    children.append(Token("hardbreak", "br", 0))
                if part:
                    children.append(Token("text", "", 0, content=part))
        token.children = children


class _NumberedItem(ListItem):
    """An ordered-list item: the number written, with its delimiter, even when empty."""

    delimiter = "."
    written: int | None = None

    @classmethod
    def create(cls, markdown: Markdown, token: Token) -> _NumberedItem:
        item = cls()
        item.written = int(token.info) if token.info.isdigit() else None
        return item

    def render_number(
        self, console: Console, options: ConsoleOptions, number: int, last_number: int
    ) -> RenderResult:
        width = len(f"{last_number}{self.delimiter}") + 1
        lines = console.render_lines(
            self.elements, options.update(width=options.max_width - width), style=self.style
        )
        style = console.get_style("markdown.item.number", default="none")
        numeral = Segment(f"{number}{self.delimiter}".rjust(width - 1) + " ", style)
        padding = Segment(" " * width, style)
        if not lines:
            yield numeral
            yield Segment.line()
            return
        for index, line in enumerate(lines):
            yield numeral if index == 0 else padding
            yield from line
            yield Segment.line()


class _List(ListElement):
    """A list whose ordered items keep the numbers and delimiter written."""

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        if self.list_type == "bullet_list_open":
            yield from super().__rich_console__(console, options)
            return
        start = 1 if self.list_start is None else self.list_start
        numbers = [
            item.written
            if isinstance(item, _NumberedItem) and item.written is not None
            else start + index
            for index, item in enumerate(self.items)
        ]
        widest = max(numbers, default=start)
        for item, number in zip(self.items, numbers, strict=True):
            yield from item.render_number(console, options, number, widest)

    @classmethod
    def create(cls, markdown: Markdown, token: Token) -> ListElement:
        element = cls(token.type, int(token.attrs.get("start", 1)))
        element.delimiter = token.markup or "."  # type: ignore[attr-defined]
        return element

    def on_child_close(self, context: Any, child: Any) -> bool:
        if isinstance(child, _NumberedItem):
            child.delimiter = getattr(self, "delimiter", ".")
        return super().on_child_close(context, child)


class SafeMarkdown(Markdown):
    """``rich.markdown.Markdown`` that keeps every character of the text (see the module)."""

    elements: ClassVar[dict[str, type[MarkdownElement]]] = {
        **Markdown.elements,
        "bullet_list_open": _List,
        "ordered_list_open": _List,
        "list_item_open": _NumberedItem,
    }

    def __init__(self, markup: str, **kwargs: Any) -> None:
        super().__init__("", **kwargs)
        self.markup = markup = printable(markup)
        self.parsed = _parser().parse(markup)
        _breaks(self.parsed)
        # At the bound the parser has dropped what lay deeper: show every character instead.
        self.too_deep = any(token.level >= _MAX_NESTING - 1 for token in self.parsed)

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        if self.too_deep:
            yield Text(self.markup)
            return
        yield from super().__rich_console__(console, options)
