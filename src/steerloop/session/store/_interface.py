"""The persistence seam: the ``SessionStore`` interface and the writer state machine every
store shares (``BufferedWriter``), the stored header and the decoding of stored rows.

A store keeps each session's log in its JSON form (``_codec``) and hands out one write
handle (an ``EventSink``) per session at a time — the write lease (G-2): opening a second
writer for a session that has one raises ``SessionConflictError``.

A writer buffers everything until ``publish()`` (C7.2-19): a fresh session that never
publishes, or a resume whose creation rolls back, leaves the stored artifact exactly as it
was (``discard()``). After ``publish()`` every ``write`` is handed to the store in seq order
before it returns. ``publish`` re-checks that nobody stored the id (fresh) or extended the
log (resume) since the writer was opened.

The backends (``_memory``, ``sqlite``, ``postgres``) implement this interface; the database
ones share group commit (``_group``); ``open_store`` (``_open``) maps a URL to a store.
"""

from __future__ import annotations

import abc
import json
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Final

from ...errors import (
    SessionConflictError,
    SessionCorruptError,
    SessionPersistenceError,
    SessionPersistenceNotFoundError,
    SessionStorageError,
)
from ...messages import check_json
from .._blobs import BlobPut, StoredBlob, event_blobs
from .._codec import bulk_decoding, decode_log
from .._events import SessionEvent
from .._json import dumps_event, loads
from .._session import EventSink

__all__ = [
    "LOG_VERSION",
    "BlobPut",
    "BufferedWriter",
    "SessionInfo",
    "SessionStore",
    "StoredBlob",
    "check_page",
    "decode_header",
    "decode_rows",
    "encode_header",
    "last_time",
    "page_rows",
    "stored_header",
]

LOG_VERSION: Final = 1
"""``version`` of the session header: the version of the persisted event JSON form."""

_OPTIONAL_HEADER = ("cwd", "parent_session", "origin", "delegation_depth")


@dataclass(frozen=True, slots=True)
class SessionInfo:
    """What a listing shows of a stored session, read without decoding its log."""

    session_id: str
    events: int
    last_time: int | None
    """Epoch ms of the last event (``None`` for an empty or unreadable last event)."""
    header: Mapping[str, Any]


def last_time(line: str | bytes | None) -> int | None:
    """The ``time`` of one stored event's JSON text, ``None`` when it has none."""
    if line is None:
        return None
    try:
        time_ = loads(line).get("time")
    except (ValueError, AttributeError, TypeError):
        return None
    return time_ if type(time_) is int else None


class _BadRow(Exception):
    """Internal: a stored row that is not a decodable event (the message says why)."""


def check_page(after: int, limit: int) -> None:
    """Refuse a page request no store can answer (``load_after``)."""
    if type(after) is not int or after < 0:
        raise ValueError(f"after must be an integer >= 0, not {after!r}")
    if type(limit) is not int or limit < 1:
        raise ValueError(f"limit must be an integer >= 1, not {limit!r}")


def decode_rows(rows: Iterable[Any], where: str) -> tuple[SessionEvent, ...]:
    """A database store's stored log, from its ``(seq, JSON text)`` rows in seq order.

    One pass with the collector paused: each row is parsed and decoded as it is read, so
    neither the rows' text nor their parsed JSON need all be alive at once. Seqs must run
    1, 2, 3 … and each body must carry its row's seq.

    Raises:
        SessionCorruptError: ``where: <what is wrong, naming the seq>``.
    """
    try:
        with bulk_decoding():
            return decode_log(_parsed(rows))
    except (_BadRow, SessionCorruptError) as exc:
        raise SessionCorruptError(f"{where}: {exc}") from None


def _parsed(rows: Iterable[Any]) -> Iterator[Any]:
    for expected, (seq, body) in enumerate(rows, start=1):
        if seq != expected:
            raise _BadRow(f"seq {expected} is missing (the next stored event is seq {seq})")
        try:
            item = loads(body)
        except (ValueError, TypeError) as exc:  # incl. JSONDepthError: never RecursionError
            raise _BadRow(f"seq {seq} is not JSON: {exc}") from None
        if isinstance(item, dict) and item.get("seq") != seq:
            raise _BadRow(f"the event stored at seq {seq} says seq {item.get('seq')!r}")
        yield item


def page_rows(rows: Iterable[Any], after: int, where: str) -> tuple[dict[str, Any], ...]:
    """A page of stored ``(seq, JSON text)`` rows as event JSON objects, checked: seqs run
    ``after + 1, after + 2 …`` and each object carries its row's seq. A page is not a whole
    log, so its events are not decoded into records nor validated as a log.

    Raises:
        SessionCorruptError: ``where: <what is wrong, naming the seq>``.
    """
    page: list[dict[str, Any]] = []
    for expected, (seq, body) in enumerate(rows, start=after + 1):
        if seq != expected:
            raise SessionCorruptError(
                f"{where}: seq {expected} is missing (the next stored event is seq {seq})"
            )
        try:
            item = loads(body)
        except (ValueError, TypeError) as exc:
            raise SessionCorruptError(f"{where}: seq {seq} is not JSON: {exc}") from None
        if not isinstance(item, dict) or item.get("seq") != seq:
            said = item.get("seq") if isinstance(item, dict) else item
            raise SessionCorruptError(f"{where}: the event stored at seq {seq} says seq {said!r}")
        page.append(item)
    return tuple(page)


def stored_header(session_id: str, header: Mapping[str, Any]) -> dict[str, Any]:
    """The header a store keeps for a new session (EVENTS.md §2.7): ``version``, ``id``,
    ``created_at`` (now, unless the session set it) and ``is_seeded`` always; ``cwd``,
    ``parent_session``, ``origin`` and ``delegation_depth`` when set.

    Raises:
        ValueError: an optional field of the wrong kind (every store refuses it alike, at
            publication, so nothing is stored).
    """
    created = header.get("created_at")
    stored: dict[str, Any] = {
        "version": LOG_VERSION,
        "id": session_id,
        "created_at": created if isinstance(created, int) else int(time.time() * 1000),
        "is_seeded": bool(header.get("is_seeded")),
    }
    for key in _OPTIONAL_HEADER:
        value = header.get(key)
        if value is None:
            continue
        if key == "origin":
            check_json(value, f"session {session_id!r}: header origin")
        elif key == "delegation_depth":
            if type(value) is not int or value < 0:
                raise ValueError(
                    f"session {session_id!r}: header delegation_depth must be an integer "
                    f">= 0, not {value!r}"
                )
        elif not isinstance(value, str):
            raise ValueError(f"session {session_id!r}: header {key} must be a string")
        stored[key] = value
    return stored


# The header codec of the database stores: one JSON object per session (EVENTS.md §2.7).
_HEADER_REQUIRED: Final = (("version", int), ("id", str), ("created_at", int), ("is_seeded", bool))


def encode_header(header: Mapping[str, Any]) -> str:
    """A ``stored_header`` as the JSON text a database store keeps in its sessions table."""
    return json.dumps(header, separators=(",", ":"))


def decode_header(text: object, where: str) -> dict[str, Any]:
    """The header stored as ``text``, checked: a JSON object with the required fields.

    Raises:
        SessionCorruptError: ``text`` is not JSON text of a header (names ``where``).
    """
    if not isinstance(text, str):
        raise SessionCorruptError(f"{where}: the stored header is {type(text).__name__}, not text")
    try:
        header = loads(text)
    except (ValueError, TypeError) as exc:
        raise SessionCorruptError(f"{where}: the stored header is not JSON: {exc}") from None
    if not isinstance(header, dict):
        raise SessionCorruptError(f"{where}: the stored header is not a JSON object")
    for key, kind in _HEADER_REQUIRED:
        value = header.get(key)
        # bool is an int: a version or time of true/false is refused too.
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            raise SessionCorruptError(
                f"{where}: the stored header's {key} must be {kind.__name__}, not {value!r:.40}"
            )
    return header


class SessionStore(abc.ABC):
    """Where session logs live between lifecycles (``rt.sessions.persistence``)."""

    url: str = ""

    @abc.abstractmethod
    async def load(self, session_id: str) -> tuple[SessionEvent, ...]:
        """The decoded, validated log of ``session_id``.

        Raises:
            SessionPersistenceNotFoundError: nothing is stored under the id.
            SessionCorruptError: the stored log is malformed (names the seq).
            SessionStorageError: the backend failed.
        """

    async def load_after(
        self, session_id: str, after: int, limit: int
    ) -> tuple[dict[str, Any], ...]:
        """One page of the stored log: the JSON objects of the events with seq > ``after``
        (at most ``limit``, in seq order; ``()`` past the end). What a reader that follows
        a log by its cursor needs without loading the whole log each time. This default
        loads the log; the built-in stores read only the page.

        Raises:
            SessionPersistenceNotFoundError: nothing is stored under the id.
            SessionCorruptError: a stored row of the page is malformed (names the seq).
            ValueError: a negative ``after`` or a ``limit`` below 1.
        """
        check_page(after, limit)
        events = await self.load(session_id)
        return tuple(event.to_json() for event in events[after : after + limit])

    async def check_absent(self, session_id: str) -> None:
        """Raise ``SessionConflictError`` if ``session_id`` is already stored."""
        if await self.exists(session_id):
            raise SessionConflictError(
                f"session {session_id!r} is already stored in {self.url}; resume it instead"
            )

    @abc.abstractmethod
    async def open_writer(self, session_id: str) -> EventSink:
        """Take the write lease of ``session_id`` and return its buffered writer.

        Raises:
            SessionConflictError: another writer holds the session.
        """

    async def load_header(self, session_id: str) -> dict[str, Any]:
        """The stored session header (EVENTS.md §2.7); resume restores it as
        ``session.header``. A store that keeps no header returns ``{}``.

        Raises:
            SessionPersistenceNotFoundError: nothing is stored under the id.
        """
        if not await self.exists(session_id):
            raise SessionPersistenceNotFoundError(f"no session {session_id!r} in {self.url}")
        return {}

    async def info(self, session_id: str) -> SessionInfo:
        """Event count, last activity and header of a stored session, without decoding or
        validating its log (a corrupt log shows up when it is loaded). This default loads
        the log; the built-in stores read only the last event.

        Raises:
            SessionPersistenceNotFoundError: nothing is stored under the id.
        """
        events = await self.load(session_id)
        return SessionInfo(
            session_id,
            len(events),
            events[-1].time if events else None,
            await self.load_header(session_id),
        )

    @abc.abstractmethod
    async def list(self) -> tuple[str, ...]:
        """Every stored session id, sorted."""

    @abc.abstractmethod
    async def delete(self, session_id: str) -> None:
        """Remove a stored session.

        Raises:
            SessionPersistenceNotFoundError: nothing is stored under the id.
            SessionConflictError: a writer holds the session.
        """

    @abc.abstractmethod
    async def exists(self, session_id: str) -> bool:
        """Whether a log is stored under ``session_id``."""

    async def close(self) -> None:  # noqa: B027 - optional hook, no-op by default
        """Release the backend (flushing what is pending)."""

    # --- blobs: the bytes of image and file blocks, once per store by content hash --------

    async def put_blob(self, data: bytes, media_type: str) -> str:
        """Store ``data`` durably (once per store) and return its hash (``sha256:…``).

        A blob is kept while an event references it: one stored here that no event comes
        to reference may be collected with the next deletion that frees its hash. Writers
        store the blobs of the events they write themselves; this is for moving logs in
        (a bundle import).

        Raises:
            SessionStorageError: the store keeps no blobs, or the backend failed.
        """
        raise SessionStorageError(f"{self.url or type(self).__name__} keeps no blobs")

    async def get_blob(self, hash: str, *, session_id: str | None = None) -> StoredBlob:
        """The blob stored under ``hash``; with ``session_id``, only if an event of that
        session references it (what a per-session endpoint serves).

        Raises:
            SessionPersistenceNotFoundError: no such blob (for that session).
            SessionCorruptError: the stored bytes do not hash to ``hash``.
            ValueError: ``hash`` is not ``sha256:<64 hex>``.
        """
        raise SessionPersistenceNotFoundError(
            f"no blob {hash} in {self.url or type(self).__name__}"
        )

    async def blob_exists(self, hash: str) -> bool:
        """Whether a blob is stored under ``hash``."""
        return False


class BufferedWriter(EventSink, abc.ABC):
    """The publication state machine every store's write handle shares (C7.2-19).

    ``open`` → ``published`` → ``closed`` | ``discarded``. Until ``publish()`` the encoded
    events wait in ``_pending``, so a creation that rolls back stores nothing; afterwards each
    write goes straight to the store. Seqs must continue the stored log without a gap.
    Subclasses say how a line is stored, how publication and release happen, and may refuse
    every write once a failure is known (``_refuse``).
    """

    def __init__(self, session_id: str, base_len: int) -> None:
        self.session_id = session_id
        self._base_len = base_len  # events stored when the writer was opened
        self._next = base_len + 1
        self._pending: list[tuple[int, str]] = []
        self._pending_blobs: list[BlobPut] = []
        self._header: dict[str, Any] = {}
        self._state = "open"

    def set_header(self, header: Mapping[str, Any]) -> None:
        self._header = dict(header)

    def write(self, event: SessionEvent) -> None:
        if self._state not in ("open", "published"):
            raise SessionStorageError(
                f"session {self.session_id!r}: write of seq {event.seq} after the writer was "
                f"{self._state}"
            )
        self._refuse()
        if event.seq != self._next:
            raise self._seq_error(event.seq)
        line = dumps_event(event)  # may raise: the expected seq advances only after it
        blobs = event_blobs(event)
        if blobs:
            self._check_blobs(blobs, event.seq)
        self._next += 1
        if self._state == "published":
            if blobs:  # durable no later than the event: queued (and committed) first
                self._store_blobs(blobs)
            self._store_line(event.seq, line)
        else:
            self._pending_blobs.extend(blobs)
            self._pending.append((event.seq, line))

    def publish(self) -> None:
        if self._state != "open":
            raise SessionStorageError(f"session {self.session_id!r}: writer is {self._state}")
        if self._pending_blobs:
            self._store_blobs(self._pending_blobs)
        self._publish(self._pending)
        self._pending = []
        self._pending_blobs = []
        self._state = "published"

    async def discard(self) -> None:
        if self._state in ("closed", "discarded"):
            return
        if self._state == "published":
            raise SessionStorageError(
                f"session {self.session_id!r} was already published; it cannot be discarded"
            )
        self._pending = []
        self._pending_blobs = []
        self._state = "discarded"
        await self._release()

    async def fence(self) -> None:
        if self._state != "published":
            # Buffered events are not durable before publication: nothing may act on them.
            raise SessionStorageError(
                f"session {self.session_id!r}: the writer is {self._state}, not published; "
                "no side effect may start"
            )
        await self.flush()

    def _refuse(self) -> None:
        """Raise to refuse every write (the store knows this session's writes fail)."""

    def _check_blobs(self, blobs: list[BlobPut], seq: int) -> None:
        """Raise to refuse an event whose blobs cannot be stored (before its seq is taken);
        a store that keeps blobs overrides this and ``_store_blobs``."""
        raise SessionStorageError(
            f"session {self.session_id!r}: seq {seq} holds an image or file block and "
            f"{type(self).__name__} keeps no blobs"
        )

    def _store_blobs(self, blobs: list[BlobPut]) -> None:
        """Hand the blobs of the next event(s) to the store, ahead of the events."""
        raise SessionStorageError(f"session {self.session_id!r}: this store keeps no blobs")

    @property
    def stored_length(self) -> int:
        """How many events the store held for this session when the writer was opened."""
        return self._base_len

    def _seq_error(self, seq: int) -> SessionPersistenceError:
        if self._next == self._base_len + 1 and seq <= self._base_len:
            return SessionConflictError(
                f"session {self.session_id!r}: write of seq {seq}, expected "
                f"{self._next}: the stored log changed since it was loaded"
            )
        return SessionStorageError(
            f"session {self.session_id!r}: write of seq {seq}, expected {self._next}"
        )

    @abc.abstractmethod
    def _store_line(self, seq: int, line: str) -> None:
        """Hand one published event's text to the store."""

    @abc.abstractmethod
    def _publish(self, pending: list[tuple[int, str]]) -> None:
        """Store the session (its header if new) and the buffered events, in seq order."""

    @abc.abstractmethod
    async def _release(self) -> None:
        """Give the write lease back."""
