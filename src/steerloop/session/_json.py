"""The one JSON codec of the stores: orjson, with the stdlib as the fallback.

orjson is several times faster on both sides, which is what durable append throughput and
resume time are made of. It refuses what stdlib ``json`` accepts in a few corners (lone
surrogates, integers beyond 64 bits); those fall back to the stdlib so nothing valid is lost.
Text nested deeper than orjson's limit (1,024) is refused outright: the stdlib recurses
and would raise ``RecursionError`` (stored rows are hostile input).
"""

from __future__ import annotations

import json
from typing import Any

import orjson

from ._events import SessionEvent

__all__ = ["JSONDepthError", "dumps", "dumps_event", "loads"]


def dumps(value: Any) -> str:
    """Compact JSON text of ``value``."""
    try:
        return orjson.dumps(value).decode()
    except (orjson.JSONEncodeError, TypeError):
        return json.dumps(value, allow_nan=False, separators=(",", ":"))


def dumps_event(event: SessionEvent) -> str:
    """The stored text of one event.

    Raises:
        ValueError: the event holds text that is not Unicode (a lone surrogate): no UTF-8
            reader could get it back, so no store may take it (the log must serve what it
            holds). orjson refuses it already; this costs nothing on the common path.
    """
    value = event.to_json()
    try:
        return orjson.dumps(value).decode()
    except (orjson.JSONEncodeError, TypeError):
        pass
    text = json.dumps(value, allow_nan=False, separators=(",", ":"), ensure_ascii=False)
    try:
        text.encode()
    except UnicodeEncodeError as exc:
        raise ValueError(
            f"event {event.type!r} (seq {event.seq}) holds text that is not Unicode "
            f"({exc.reason}): a log must not hold what it cannot serve back"
        ) from None
    return text


class JSONDepthError(ValueError):
    """JSON text nested too deeply to parse."""


def loads(text: str | bytes) -> Any:
    """Parse JSON text.

    Raises:
        ValueError: it is not JSON (``json.JSONDecodeError``), or it is nested deeper than
            1,024 levels (``JSONDepthError``).
    """
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        if "depth" in str(exc):
            raise JSONDepthError(f"nested deeper than 1024 levels ({exc})") from None
    try:
        return json.loads(text)
    except RecursionError:
        raise JSONDepthError("nested too deeply to parse") from None
