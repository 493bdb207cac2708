"""Decode a JSON text too large to decode in one call, keeping a bounded prefix of it.

A C decoder holds the GIL for the whole text: 8 MB of small objects keeps every other thread,
the event loop's included, waiting for a quarter of a second or more, even when it runs in a
worker thread. This decoder walks containers in Python and hands the C helpers one string or
one number at a time, so a worker thread running it gives the GIL back every switch interval.

It keeps at most ``max_items`` elements of any array or object and ``max_chars`` characters of
any string; what it leaves out it skips without building it (a flat object is skipped by one
regular-expression match). A container or string it cut is a ``CutList``, ``CutDict`` or
``CutStr`` carrying its ``original`` length, so a caller can say exactly what was left out.
"""

from __future__ import annotations

import json.decoder
import re
from typing import Any

__all__ = ["CutDict", "CutList", "CutStr", "decode_sliced", "was_cut"]

_WS = re.compile(r"[ \t\n\r]*")
_NUMBER = re.compile(r"(-?(?:0|[1-9]\d*))(\.\d+)?([eE][-+]?\d+)?")
# The rest of a string after its opening quote, up to and including the closing one.
_STRING_REST = re.compile(r'(?:[^"\\]++|\\.)*+"', re.DOTALL)
# An object or array holding no other container: skipped by one match.
_FLAT_TEXT = r'[{\[](?:[^{}\[\]"]++|"(?:[^"\\]++|\\.)*+")*+[}\]]'
_FLAT = re.compile(_FLAT_TEXT, re.DOTALL)
# The separator and the next element of an array, when that element is flat or a string.
_NEXT_FLAT = re.compile(
    r"[ \t\n\r]*,[ \t\n\r]*(?:" + _FLAT_TEXT + r'|"(?:[^"\\]++|\\.)*+")', re.DOTALL
)
_scanstring: Any = json.decoder.scanstring  # type: ignore[attr-defined]
_LITERALS = {"true": True, "false": False, "null": None}


class CutList(list[Any]):
    """An array of which only the first elements were kept."""

    original: int


class CutDict(dict[str, Any]):
    """An object of which only the first members were kept."""

    original: int


class CutStr(str):
    """A string of which only the first characters were kept."""

    original: int


def was_cut(value: Any) -> bool:
    """Whether ``value`` holds anything ``decode_sliced`` cut (it walks what was kept)."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, CutList | CutDict | CutStr):
            return True
        if isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return False


class _Decoder:
    __slots__ = ("max_chars", "max_depth", "max_items", "text")

    def __init__(self, text: str, max_items: int, max_chars: int, max_depth: int) -> None:
        self.text = text
        self.max_items = max_items
        self.max_chars = max_chars
        self.max_depth = max_depth

    def fail(self, at: int, what: str) -> ValueError:
        return ValueError(f"invalid JSON at character {at}: {what}")

    def ws(self, at: int) -> int:
        match = _WS.match(self.text, at)
        assert match is not None  # the pattern matches the empty string
        return match.end()

    def value(self, at: int, depth: int) -> tuple[Any, int]:
        text = self.text
        if at >= len(text):
            raise self.fail(at, "a value was expected")
        char = text[at]
        if char == '"':
            string, end = _scanstring(text, at + 1)
            if len(string) > self.max_chars:
                cut = CutStr(string[: self.max_chars])
                cut.original = len(string)
                return cut, end
            return string, end
        if char == "{":
            return self.object(at, depth + 1)
        if char == "[":
            return self.array(at, depth + 1)
        number = _NUMBER.match(text, at)
        if number is not None:
            whole, fraction, exponent = number.groups()
            if fraction or exponent:
                return float(whole + (fraction or "") + (exponent or "")), number.end()
            return int(whole), number.end()
        for word, literal in _LITERALS.items():
            if text.startswith(word, at):
                return literal, at + len(word)
        raise self.fail(at, "a value was expected")

    def skip(self, at: int, depth: int) -> int:
        """The end of the value at ``at``, building nothing of it."""
        text = self.text
        char = text[at] if at < len(text) else ""
        if char == '"':
            match = _STRING_REST.match(text, at + 1)
            if match is None:
                raise self.fail(at, "an unterminated string")
            return match.end()
        if char in "{[":
            flat = _FLAT.match(text, at)
            if flat is not None:
                return flat.end()
            if depth + 1 > self.max_depth:
                raise self.fail(at, f"nested deeper than {self.max_depth}")
            return self.skip_container(at, depth + 1)
        return self.value(at, depth)[1]

    def skip_container(self, at: int, depth: int) -> int:
        text = self.text
        close = "}" if text[at] == "{" else "]"
        at = self.ws(at + 1)
        if text.startswith(close, at):
            return at + 1
        while True:
            if close == "}":
                at = self.ws(self.skip(at, depth))
                if not text.startswith(":", at):
                    raise self.fail(at, "':' was expected")
                at = self.ws(at + 1)
            at = self.ws(self.skip(at, depth))
            if text.startswith(",", at):
                at = self.ws(at + 1)
            elif text.startswith(close, at):
                return at + 1
            else:
                raise self.fail(at, f"',' or '{close}' was expected")

    def object(self, at: int, depth: int) -> tuple[dict[str, Any], int]:
        if depth > self.max_depth:
            raise self.fail(at, f"nested deeper than {self.max_depth}")
        text = self.text
        out: dict[str, Any] = {}
        count = 0
        at = self.ws(at + 1)
        if text.startswith("}", at):
            return out, at + 1
        while True:
            if not text.startswith('"', at):
                raise self.fail(at, "a member name was expected")
            key, at = _scanstring(text, at + 1)
            at = self.ws(at)
            if not text.startswith(":", at):
                raise self.fail(at, "':' was expected")
            at = self.ws(at + 1)
            count += 1
            if count <= self.max_items:
                out[key], at = self.value(at, depth)
            else:
                at = self.skip(at, depth)
            at = self.ws(at)
            if text.startswith(",", at):
                at = self.ws(at + 1)
            elif text.startswith("}", at):
                break
            else:
                raise self.fail(at, "',' or '}' was expected")
        if count > self.max_items:
            cut = CutDict(out)
            cut.original = count
            return cut, at + 1
        return out, at + 1

    def array(self, at: int, depth: int) -> tuple[list[Any], int]:
        if depth > self.max_depth:
            raise self.fail(at, f"nested deeper than {self.max_depth}")
        text = self.text
        out: list[Any] = []
        count = 0
        at = self.ws(at + 1)
        if text.startswith("]", at):
            return out, at + 1
        while True:
            count += 1
            if count <= self.max_items:
                item, at = self.value(at, depth)
                out.append(item)
            else:
                at = self.skip(at, depth)
                # A run of flat elements (the common hostile case: many small blocks) is
                # skipped one regular-expression match per element.
                while (run := _NEXT_FLAT.match(text, at)) is not None:
                    at = run.end()
                    count += 1
            at = self.ws(at)
            if text.startswith(",", at):
                at = self.ws(at + 1)
            elif text.startswith("]", at):
                break
            else:
                raise self.fail(at, "',' or ']' was expected")
        if count > self.max_items:
            cut = CutList(out)
            cut.original = count
            return cut, at + 1
        return out, at + 1


def decode_sliced(text: str, *, max_items: int, max_chars: int, max_depth: int = 64) -> Any:
    """The JSON value of ``text``, keeping ``max_items`` per container, ``max_chars`` per string.

    Raises:
        ValueError: ``text`` is not one JSON value, or nests deeper than ``max_depth``.
    """
    decoder = _Decoder(text, max_items, max_chars, max_depth)
    value, end = decoder.value(decoder.ws(0), 0)
    if decoder.ws(end) != len(text):
        raise decoder.fail(end, "extra data after the value")
    return value
