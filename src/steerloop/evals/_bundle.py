"""Session bundles: one file holding a session's header, events and blobs (a test cassette).

The file is JSON lines (UTF-8). Its first line says what follows::

    {"format": "steerloop-session-bundle", "version": 1, "session_id": "s-1",
     "header": {...}, "events": 42, "blobs": 1}

then one line per event (the stored JSON form, seq 1 first), then one line per blob::

    {"blob": "sha256:<64 hex>", "media_type": "image/png", "data": "<base64>"}

A bundle is input from anywhere: every line is bounded, the events are decoded and validated
as a stored log is, each blob's bytes must hash to its name, and nothing is stored unless the
whole file is valid.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Final

from .. import Runtime
from ..errors import SessionCorruptError
from ..session import SessionEvent, SessionStore, event_blobs
from ..session.store import decode_log

__all__ = [
    "BUNDLE_FORMAT",
    "BUNDLE_VERSION",
    "Blob",
    "Bundle",
    "export_bundle",
    "import_bundle",
    "load_bundle",
    "read_bundle",
    "write_bundle",
]

BUNDLE_FORMAT: Final = "steerloop-session-bundle"
BUNDLE_VERSION: Final = 1
#: Longest line read (an event with a large tool result, a blob in base64).
MAX_LINE: Final = 96 * 1024 * 1024
#: Most events one bundle may hold.
MAX_EVENTS: Final = 10_000_000
_HASH = re.compile(r"^sha256:[0-9a-f]{64}$")
_SESSION_ID = re.compile(r"^[^\x00-\x1f\x7f]{1,128}$")


@dataclass(frozen=True, slots=True)
class Blob:
    """Bytes a session's events refer to by content hash."""

    hash: str
    data: bytes
    media_type: str | None = None


@dataclass(frozen=True, slots=True)
class Bundle:
    """A bundle read and validated."""

    session_id: str
    header: Mapping[str, Any]
    events: tuple[SessionEvent, ...]
    blobs: tuple[Blob, ...] = field(default=())


def write_bundle(
    out: IO[str],
    session_id: str,
    header: Mapping[str, Any],
    events: Sequence[SessionEvent],
    blobs: Sequence[Blob] = (),
) -> None:
    """Write a session as a bundle to ``out`` (a text stream)."""
    first = {
        "format": BUNDLE_FORMAT,
        "version": BUNDLE_VERSION,
        "session_id": session_id,
        "header": dict(header),
        "events": len(events),
        "blobs": len(blobs),
    }
    out.write(_line(first))
    for event in events:
        out.write(_line(event.to_json()))
    for blob in blobs:
        out.write(
            _line(
                {
                    "blob": blob.hash,
                    "media_type": blob.media_type,
                    "data": base64.b64encode(blob.data).decode("ascii"),
                }
            )
        )


def _line(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")) + "\n"


async def export_bundle(store: SessionStore, session_id: str, out: IO[str]) -> int:
    """Write the stored session ``session_id`` as a bundle; returns its event count.

    Raises:
        SessionPersistenceNotFoundError: nothing is stored under the id.
    """
    events = await store.load(session_id)
    header = await store.load_header(session_id)
    blobs: dict[str, Blob] = {}
    for event in events:
        for put in event_blobs(event):
            if put.hash not in blobs:
                stored = await store.get_blob(put.hash, session_id=session_id)
                blobs[put.hash] = Blob(put.hash, stored.data, stored.media_type)
    write_bundle(out, session_id, header, events, tuple(blobs.values()))
    return len(events)


class _Lines:
    """The lines of a bundle file, each bounded, numbered for error messages."""

    def __init__(self, stream: IO[str], where: str) -> None:
        self._stream = stream
        self.where = where
        self.number = 0

    def error(self, message: str) -> ValueError:
        return ValueError(f"{self.where}, line {self.number}: {message}")

    def next(self) -> Any:
        """The next line's JSON value; ``ValueError`` at the end or for a bad line."""
        line = self._stream.readline(MAX_LINE + 1)
        self.number += 1
        if not line:
            raise self.error("the bundle ends early")
        if len(line) > MAX_LINE:
            raise self.error(f"a line longer than {MAX_LINE} characters")
        try:
            return json.loads(line)
        except (ValueError, RecursionError) as exc:
            raise self.error(f"not JSON: {exc}") from None

    def at_end(self) -> bool:
        return not self._stream.readline(1)


def read_bundle(path: str | Path) -> Bundle:
    """Read and validate the bundle at ``path``.

    Raises:
        ValueError: the file is not a valid bundle (names the line and what is wrong).
        OSError: the file cannot be read.
    """
    where = str(path)
    with open(path, encoding="utf-8", newline="\n") as stream:
        lines = _Lines(stream, where)
        try:
            return _read(lines)
        except UnicodeDecodeError as exc:
            raise lines.error(f"not UTF-8 text: {exc.reason}") from None


def _read(lines: _Lines) -> Bundle:
    first = lines.next()
    if not isinstance(first, dict) or first.get("format") != BUNDLE_FORMAT:
        raise lines.error(f"not a steerloop session bundle (no format {BUNDLE_FORMAT!r})")
    version = first.get("version")
    if version != BUNDLE_VERSION:
        raise lines.error(f"bundle version {version!r} is not one this build reads (1)")
    session_id = first.get("session_id")
    if not isinstance(session_id, str) or not _SESSION_ID.match(session_id):
        raise lines.error("session_id must be 1 to 128 characters without control characters")
    header = first.get("header")
    if not isinstance(header, dict):
        raise lines.error("header must be a JSON object")
    n_events, n_blobs = first.get("events"), first.get("blobs")
    for name, count, bound in (("events", n_events, MAX_EVENTS), ("blobs", n_blobs, MAX_EVENTS)):
        if type(count) is not int or not 0 <= count <= bound:
            raise lines.error(f"{name} must be an integer from 0 to {bound}")
    assert isinstance(n_events, int) and isinstance(n_blobs, int)
    raw = [lines.next() for _ in range(n_events)]
    try:
        events = decode_log(raw)
    except SessionCorruptError as exc:
        raise ValueError(f"{lines.where}: {exc}") from None
    blobs = tuple(_blobs(lines, n_blobs))
    if not lines.at_end():
        lines.number += 1
        raise lines.error(f"more lines than the {n_events} events and {n_blobs} blobs announced")
    return Bundle(session_id, header, events, blobs)


def _blobs(lines: _Lines, count: int) -> Iterator[Blob]:
    seen: set[str] = set()
    for _ in range(count):
        item = lines.next()
        if not isinstance(item, dict) or set(item) - {"blob", "media_type", "data"}:
            raise lines.error("a blob line is an object of blob, media_type and data")
        name, media_type, data = item.get("blob"), item.get("media_type"), item.get("data")
        if not isinstance(name, str) or not _HASH.match(name):
            raise lines.error("blob must be sha256:<64 lowercase hex>")
        if name in seen:
            raise lines.error(f"blob {name} appears twice")
        if media_type is not None and not isinstance(media_type, str):
            raise lines.error("media_type must be a string or null")
        if not isinstance(data, str):
            raise lines.error("data must be base64 text")
        try:
            content = base64.b64decode(data, validate=True)
        except (binascii.Error, ValueError) as exc:
            raise lines.error(f"data is not base64: {exc}") from None
        if "sha256:" + hashlib.sha256(content).hexdigest() != name:
            raise lines.error(f"the bytes of blob {name} hash to something else")
        seen.add(name)
        yield Blob(name, content, media_type)


async def load_bundle(
    path: str | Path, target: Runtime | SessionStore, *, session_id: str | None = None
) -> str:
    """Import the bundle at ``path`` into ``target``'s store; returns the session id.

    Args:
        path: a file written by ``steerloop sessions export ID --format bundle``.
        target: a runtime (its store) or a store.
        session_id: store the session under this id instead of the bundle's.

    Raises:
        ValueError: the file is not a valid bundle.
        RuntimeError: the runtime has no store.
        SessionConflictError: the id is already stored.
    """
    store = target.sessions.persistence if isinstance(target, Runtime) else target
    if store is None:
        raise RuntimeError("load_bundle needs a store: open the runtime with store=...")
    return await import_bundle(read_bundle(path), store, session_id=session_id)


async def import_bundle(
    bundle: Bundle, store: SessionStore, *, session_id: str | None = None
) -> str:
    """Store a read bundle's session (under ``session_id`` when given); returns its id.

    The blobs go in first (durable before the events that name them); an event naming a
    blob the bundle does not carry (nor the store hold) fails the import.
    """
    new_id = bundle.session_id if session_id is None else session_id
    if not isinstance(new_id, str) or not _SESSION_ID.match(new_id):
        raise ValueError("session_id must be 1 to 128 characters without control characters")
    await store.check_absent(new_id)
    for blob in bundle.blobs:
        await store.put_blob(blob.data, blob.media_type or "application/octet-stream")
    writer = await store.open_writer(new_id)
    try:
        writer.set_header(bundle.header)
        for event in bundle.events:
            writer.write(event)
        writer.publish()
    except BaseException:
        await writer.discard()
        raise
    await writer.close()
    return new_id
