"""The in-memory store (``memory://``): every event kept as its JSON text."""

from __future__ import annotations

import builtins
import json
from collections.abc import Iterable, Mapping
from typing import Any

from ..._media import blob_hash, check_blob_hash
from ...errors import SessionConflictError, SessionPersistenceNotFoundError, SessionStorageError
from .._blobs import checked_blob
from .._events import SessionEvent
from .._session import EventSink
from ._interface import (
    BlobPut,
    BufferedWriter,
    SessionInfo,
    SessionStore,
    StoredBlob,
    check_page,
    decode_rows,
    last_time,
    page_rows,
    stored_header,
)

__all__ = ["MemoryStore"]


class MemoryStore(SessionStore):
    """A store in process memory that keeps every event as its JSON text.

    ``load`` decodes that text, so a resume from a ``MemoryStore`` exercises the same
    decode and validation path as a database. ``raw``/``put_raw`` expose the stored text
    (tests use them to inspect an artifact or to plant a crashed or corrupt log). Blobs
    are kept once per store (``_blobs``) with the hashes each session references.
    """

    def __init__(self, url: str = "memory://") -> None:
        self.url = url
        self._logs: dict[str, list[str]] = {}
        self._headers: dict[str, dict[str, Any]] = {}
        self._writers: dict[str, _MemoryWriter] = {}
        self._blobs: dict[str, tuple[str, bytes]] = {}  # hash -> (media type, bytes)
        self._blob_refs: dict[str, set[str]] = {}  # session id -> the hashes it references

    async def load(self, session_id: str) -> tuple[SessionEvent, ...]:
        lines = self._logs.get(session_id)
        if lines is None:
            raise SessionPersistenceNotFoundError(f"no session {session_id!r} in {self.url}")
        return decode_rows(enumerate(lines, start=1), f"session {session_id!r}")

    async def load_after(
        self, session_id: str, after: int, limit: int
    ) -> tuple[dict[str, Any], ...]:
        check_page(after, limit)
        lines = self._logs.get(session_id)
        if lines is None:
            raise SessionPersistenceNotFoundError(f"no session {session_id!r} in {self.url}")
        rows = enumerate(lines[after : after + limit], start=after + 1)
        return page_rows(rows, after, f"session {session_id!r}")

    async def open_writer(self, session_id: str) -> EventSink:
        if session_id in self._writers:
            raise SessionConflictError(f"session {session_id!r} already has a writer")
        writer = _MemoryWriter(self, session_id, self._logs.get(session_id))
        self._writers[session_id] = writer
        return writer

    async def load_header(self, session_id: str) -> dict[str, Any]:
        if session_id not in self._logs:
            raise SessionPersistenceNotFoundError(f"no session {session_id!r} in {self.url}")
        header = self._headers.get(session_id) or stored_header(session_id, {})
        copy: dict[str, Any] = json.loads(json.dumps(header))  # as a database would return
        return copy

    async def info(self, session_id: str) -> SessionInfo:
        lines = self._logs.get(session_id)
        if lines is None:
            raise SessionPersistenceNotFoundError(f"no session {session_id!r} in {self.url}")
        last = last_time(lines[-1]) if lines else None
        return SessionInfo(session_id, len(lines), last, await self.load_header(session_id))

    async def list(self) -> tuple[str, ...]:
        return tuple(sorted(self._logs))

    async def delete(self, session_id: str) -> None:
        if session_id not in self._logs:
            raise SessionPersistenceNotFoundError(f"no session {session_id!r} in {self.url}")
        if session_id in self._writers:
            raise SessionConflictError(f"session {session_id!r} has an open writer")
        del self._logs[session_id]
        self._headers.pop(session_id, None)
        freed = self._blob_refs.pop(session_id, set())
        still = set().union(*self._blob_refs.values()) if self._blob_refs else set()
        for hash in freed - still:
            self._blobs.pop(hash, None)

    async def exists(self, session_id: str) -> bool:
        return session_id in self._logs

    # --- blobs -------------------------------------------------------------------------

    async def put_blob(self, data: bytes, media_type: str) -> str:
        if not isinstance(data, bytes) or not isinstance(media_type, str):
            raise ValueError("put_blob takes bytes and a media type")
        hash = blob_hash(data)
        self._blobs.setdefault(hash, (media_type, data))
        return hash

    async def get_blob(self, hash: str, *, session_id: str | None = None) -> StoredBlob:
        check_blob_hash(hash)
        stored = self._blobs.get(hash)
        refs = self._blob_refs.get(session_id, ()) if session_id is not None else None
        if stored is None or (refs is not None and hash not in refs):
            where = f"session {session_id!r}" if session_id is not None else self.url
            raise SessionPersistenceNotFoundError(f"no blob {hash} in {where}")
        return checked_blob(hash, stored[0], stored[1], self.url)

    async def blob_exists(self, hash: str) -> bool:
        return hash in self._blobs

    def _keep_blobs(self, session_id: str, blobs: builtins.list[BlobPut]) -> None:
        refs = self._blob_refs.setdefault(session_id, set())
        for put in blobs:
            if put.data is not None:
                self._blobs.setdefault(put.hash, (put.media_type, put.data))
            refs.add(put.hash)

    # --- raw access --------------------------------------------------------------------

    def raw(self, session_id: str) -> tuple[str, ...]:
        """The stored JSON text of each event (``()`` when nothing is stored)."""
        return tuple(self._logs.get(session_id, ()))

    def put_raw(self, session_id: str, lines: Iterable[str | Mapping[str, Any]]) -> None:
        """Store ``lines`` (JSON text or JSON objects) as the log of ``session_id``, unchecked."""
        if session_id in self._writers:
            raise SessionConflictError(f"session {session_id!r} has an open writer")
        self._logs[session_id] = [
            line if isinstance(line, str) else json.dumps(line, separators=(",", ":"))
            for line in lines
        ]
        self._headers.pop(session_id, None)

    def _release(self, writer: _MemoryWriter) -> None:
        if self._writers.get(writer.session_id) is writer:
            del self._writers[writer.session_id]


class _MemoryWriter(BufferedWriter):
    """The write handle of one session in a ``MemoryStore``."""

    def __init__(self, store: MemoryStore, session_id: str, base: list[str] | None) -> None:
        super().__init__(session_id, 0 if base is None else len(base))
        self._store = store
        self._base = base  # the stored list at open time (None: a fresh session)
        self._log: list[str] | None = None  # the stored list once published
        self._held_blobs: list[BlobPut] = []  # blobs of the publication, kept with it

    def _check_blobs(self, blobs: list[BlobPut], seq: int) -> None:
        held = {put.hash for put in self._pending_blobs if put.data is not None}
        for put in blobs:
            if put.data is None and put.hash not in self._store._blobs and put.hash not in held:
                raise SessionStorageError(
                    f"session {self.session_id!r}: seq {seq} references blob {put.hash}, "
                    f"which {self._store.url} does not hold"
                )

    def _store_blobs(self, blobs: list[BlobPut]) -> None:
        if self._state == "open":  # the publication's: kept once it succeeds
            self._held_blobs = list(blobs)
        else:
            self._store._keep_blobs(self.session_id, blobs)

    def _store_line(self, seq: int, line: str) -> None:
        assert self._log is not None
        self._log.append(line)

    def _publish(self, pending: list[tuple[int, str]]) -> None:
        current = self._store._logs.get(self.session_id)
        if current is not self._base or (current is not None and len(current) != self._base_len):
            raise SessionConflictError(
                f"session {self.session_id!r} changed in {self._store.url} since it was opened"
            )
        if current is None:
            header = stored_header(self.session_id, self._header)  # may refuse: store nothing
            current = self._store._logs[self.session_id] = []
            self._store._headers[self.session_id] = header
        current.extend(line for _, line in pending)
        self._log = current
        self._store._keep_blobs(self.session_id, self._held_blobs)
        self._held_blobs = []

    async def _release(self) -> None:
        self._store._release(self)

    async def read_blob(self, hash: str) -> StoredBlob:
        return await self._store.get_blob(hash)

    async def flush(self) -> None:
        """Published writes are stored synchronously; buffered ones wait for ``publish``."""

    async def close(self) -> None:
        if self._state in ("closed", "discarded"):
            return
        self._pending = []  # closing an unpublished handle must not invent an artifact
        self._state = "closed"
        self._store._release(self)
