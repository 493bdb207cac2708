"""The ``steerloop_feed`` payloads a ``notify=True`` store sends with each committed batch."""

from __future__ import annotations

from collections.abc import Mapping

__all__ = ["FEED_CHANNEL", "PAYLOAD_BYTES", "escape_id", "feed_payloads", "parse_feed_payload"]

FEED_CHANNEL = "steerloop_feed"
"""The channel a ``notify=True`` store announces its committed batches on."""

PAYLOAD_BYTES = 7900  # the server refuses a payload of 8000 bytes or more


def escape_id(session_id: str) -> str:
    """A session id as it appears in a ``steerloop_feed`` payload (no bare ``,`` or ``:``)."""
    return session_id.replace("%", "%25").replace(",", "%2C").replace(":", "%3A")


def _unescape(text: str) -> str:
    return text.replace("%3A", ":").replace("%2C", ",").replace("%25", "%")


def feed_payloads(tops: Mapping[str, int]) -> list[str]:
    """The ``steerloop_feed`` payloads announcing ``{session_id: max_seq}``:
    ``<sid>:<max_seq>[,<sid>:<max_seq>…]`` with ids escaped (``escape_id``). One payload
    unless it would pass the server's 8000-byte limit."""
    payloads: list[str] = []
    items: list[str] = []
    size = 0
    for sid, seq in tops.items():
        item = f"{escape_id(sid)}:{seq}"
        length = len(item.encode()) + 1
        if items and size + length > PAYLOAD_BYTES:
            payloads.append(",".join(items))
            items, size = [], 0
        items.append(item)
        size += length
    if items:
        payloads.append(",".join(items))
    return payloads


def parse_feed_payload(payload: str) -> list[tuple[str, int, int | None]]:
    """The items of a ``steerloop_feed`` payload as ``(session_id, seq, n)``: a committed
    batch is ``<sid>:<max_seq>`` (``n`` None), live frames are ``<sid>:<after_seq>:<n>``.
    Malformed items are skipped."""
    out: list[tuple[str, int, int | None]] = []
    for item in payload.split(","):
        parts = item.split(":")
        if len(parts) not in (2, 3) or not parts[0] or not all(p.isdigit() for p in parts[1:]):
            continue
        n = int(parts[2]) if len(parts) == 3 else None
        out.append((_unescape(parts[0]), int(parts[1]), n))
    return out
