"""Shared feeds: one read of a session's feed per process, fanned out to all its readers.

Without it every SSE / AG-UI reader of a session pulled its own pages: 400 readers of one
busy session meant 400 database reads per committed batch, which queued behind each other in
the feed's small pool and delayed every *other* session's readers by seconds. ``SharedFeeds``
wraps a ``FeedSource`` (the PostgreSQL feed or the in-process host) so that:

* each session with readers in this process has **one** ``_SessionFeed``: one subscription
  to the source, one cursor, and one *pump* task that reads (a page at a time, then the
  live frames of the open step) whenever the source's version moves, and only then wakes
  the readers, when the read brought something: one read per wake, whatever the readers;
* what it read is kept in a **window** shared by the readers (the same dicts for all,
  read-only, with their JSON and SSE encodings made once), trimmed to what the slowest
  reader has not been handed yet, at most ``window`` events; live frames likewise (at most
  ``max_frames``, the oldest dropped: the committed ``assistant/message`` supersedes them);
* a reader **behind the window** (resuming by ``Last-Event-ID``, or one that fell behind)
  reads its own pages from the source, as before, until it reaches the window;
* nothing is pushed to a reader: each pulls by its own cursor, so a slow reader delays only
  itself. What it holds is the transport's bounded buffer; when that stays full for
  ``send_timeout`` the server drops it (sse-starlette), and the client resumes by
  ``Last-Event-ID`` after the ``retry:`` it was given — the reconnect hint.

A reader's page is exact as of the pump's last read, and anything newer moves the version
the reader waits on once the pump has read it, so no wake is lost.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable
from typing import Any

from ..session._json import dumps
from ._source import FeedReader, FeedSource, Wakeup

__all__ = ["SharedFeeds", "event_json", "event_sse"]

log = logging.getLogger("steerloop.service.feed")

_PAGE = 500
_PING_SECONDS = 15.0  # a quiet source is read again this often (a lost wake costs this much)
_RETRY_SECONDS = 1.0


class _Held(dict[str, Any]):
    """An event held in a shared window: its encodings are made once for all its readers."""

    __slots__ = ("json", "sse")

    def __init__(self, event: dict[str, Any]) -> None:
        super().__init__(event)
        self.json: str | None = None
        self.sse: bytes | None = None


def event_json(event: dict[str, Any]) -> str:
    """The JSON text of a feed event (made once per shared event, whatever its readers)."""
    if type(event) is _Held:
        if event.json is None:
            event.json = dumps(event)
        return event.json
    return dumps(event)


def event_sse(event: dict[str, Any]) -> bytes | None:
    """The SSE message of a shared feed event, ``id`` = its seq (LF-separated, as
    sse-starlette writes it with ``sep`` LF), made once for all its readers; ``None`` for
    an event no window holds (its reader encodes it)."""
    if type(event) is not _Held:
        return None
    if event.sse is None:
        # JSON text holds no raw line break, so the data is one line; type names neither.
        event.sse = (
            f"id: {event['seq']}\nevent: {event['type']}\ndata: {event_json(event)}\n\n".encode()
        )
    return event.sse


class _SessionFeed:
    """The shared state of one session's readers in this process, kept current by its pump:
    one task that reads whenever the source's version moves and then wakes the readers."""

    def __init__(
        self, inner: FeedReader, closed: Callable[[], bool], window: int, max_frames: int
    ) -> None:
        self.inner = inner
        self._closed = closed
        self.window = window
        self.events: deque[dict[str, Any]] = deque()  # seqs base+1 .. last, contiguous
        self.base = -1  # set by the first reader's cursor (-1: not yet)
        self.last = -1
        self.frames_seq = -1  # the frames held follow this event
        self.frames: deque[tuple[int, dict[str, Any]]] = deque(maxlen=max_frames)
        # The frames that followed the previous ``frames_seq``: a reader whose cursor is
        # there reads them before the event that ended them (a steer mid-stream).
        self.prev: tuple[int, list[tuple[int, dict[str, Any]]]] | None = None
        self.caught_up = False  # the last read reached the end of the log
        self.read_version = -1  # the source's version when the last complete read began
        self.ready = Wakeup()  # moves when a read brought something new (readers wait here)
        self.cursors: dict[int, int] = {}  # reader id -> the seq it was last handed
        self.reads = 0  # source reads (pages and frame queries) made for this session
        self._task: asyncio.Task[bool] | None = None  # the read under way
        self._waiters: list[asyncio.Future[None]] = []
        self._pump: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self._pump is None:
            self._pump = asyncio.get_running_loop().create_task(
                self._run(), name="steerloop-fanout"
            )

    def stop(self) -> None:
        pump, self._pump = self._pump, None
        if pump is not None:
            pump.cancel()  # this feed's own task; its last reader left

    def slice(self, after: int, limit: int) -> list[dict[str, Any]]:
        """Held events with seq > ``after`` (which is within the window), at most ``limit``."""
        start = after - self.base
        return [self.events[i] for i in range(start, min(len(self.events), start + limit))]

    def frames_after(self, seq: int, n: int) -> list[tuple[int, dict[str, Any]]]:
        if seq == self.frames_seq:
            return [(i, frame) for i, frame in self.frames if i > n]
        if self.prev is not None and seq == self.prev[0]:
            return [(i, frame) for i, frame in self.prev[1] if i > n]
        return []

    async def _run(self) -> None:
        """Read whenever the source moves; wake the readers when a read brought anything."""
        while True:
            seen = self.inner.version
            try:
                changed = await self.refresh(seen)
            except Exception:  # the source failed (a restart, a lost connection): again soon
                log.warning("feed of a session: reading failed; retrying", exc_info=True)
                await self.inner.wait(self.inner.version, _RETRY_SECONDS)
                continue
            if changed:
                self.ready.bump()
            if not self.caught_up:
                continue  # more pages behind: read on (the readers take this one meanwhile)
            if self._closed():
                self.ready.bump()  # the service stops: every reader looks and sees it
                return
            await self.inner.wait(seen, _PING_SECONDS)

    async def refresh(self, version: int) -> bool:
        """Return once a read that began at ``version`` or later has completed and the
        window reaches the end of the log (single flight: a read under way is joined).
        Returns whether anything new came. A failed read raises to every waiter."""
        changed = False
        while self.read_version < version or not self.caught_up:
            task = self._task
            if task is None:
                task = self._task = asyncio.get_running_loop().create_task(self._read())
                task.add_done_callback(self._done)
            # Each waiter has a future of its own: one leaving (its stream cancelled)
            # cancels only that, never the read the others wait on.
            waiter = asyncio.get_running_loop().create_future()
            self._waiters.append(waiter)
            await waiter
            changed |= bool(task.result())
            if not self.caught_up and self.read_version >= version:
                return changed  # a full page came: the caller takes it before reading on
        return changed

    def _done(self, task: asyncio.Task[bool]) -> None:
        self._task = None
        waiters, self._waiters = self._waiters, []
        error = None if task.cancelled() else task.exception()
        for waiter in waiters:
            if waiter.done():
                continue
            if task.cancelled():
                waiter.cancel()
            elif error is not None:
                waiter.set_exception(error)
            else:
                waiter.set_result(None)

    async def _read(self) -> bool:
        """One page of events after the window's end and, once caught up, the live frames of
        the open step; whether anything new came."""
        began = self.inner.version
        page = await self.inner.events_after(self.last, _PAGE)
        self.reads += 1
        if page and self.frames_seq == self.last:
            # The frames still numbered after ``last`` were all written before the page's
            # first event: read them before the cursor moves past it (see ``_pages``).
            known = self.frames[-1][0] if self.frames else 0
            self.frames.extend(await self.inner.frames_after(self.last, known))
            self.reads += 1
        changed = self._take(page)
        self.caught_up = len(page) < _PAGE
        if self.caught_up:
            known = self.frames[-1][0] if self.frames and self.frames_seq == self.last else 0
            frames = await self.inner.frames_after(self.last, known)
            self.reads += 1
            if self.frames_seq != self.last:
                if self.frames:
                    self.prev = (self.frames_seq, list(self.frames))
                self.frames_seq = self.last
                self.frames.clear()
            self.frames.extend(frames)
            changed |= bool(frames)
        self.read_version = max(self.read_version, began)
        return changed

    def _take(self, page: list[dict[str, Any]]) -> bool:
        taken = False
        for event in page:
            seq = event.get("seq")
            if not isinstance(seq, int) or seq <= self.last:
                continue  # a page never repeats what was read; a stray row is skipped
            if seq != self.last + 1:  # a gap the source skipped: the window restarts here
                self.events.clear()
                self.base = seq - 1
            self.events.append(_Held(event))
            self.last = seq
            taken = True
        self.trim()
        return taken

    def trim(self) -> None:
        """Drop what every reader was handed already; at most ``window`` events stay (a
        reader left behind reads its own pages)."""
        keep_from = min(self.cursors.values(), default=self.last)
        keep_from = max(keep_from, self.last - self.window)
        while self.events and self.base < keep_from:
            self.events.popleft()
            self.base += 1


class SharedFeeds:
    """A ``FeedSource`` sharing one read of each session among its readers (see the module
    docstring). ``window``: most events held per session; ``max_frames``: live frames."""

    def __init__(self, source: FeedSource, *, window: int = 2048, max_frames: int = 4096):
        self.source = source
        self.window = window
        self.max_frames = max_frames
        self._feeds: dict[str, _SessionFeed] = {}
        self._ids = 0

    @property
    def closed(self) -> bool:
        return self.source.closed

    def subscribe(self, session_id: str) -> _SharedReader:
        feed = self._feeds.get(session_id)
        if feed is None:
            inner = self.source.subscribe(session_id)
            feed = _SessionFeed(inner, lambda: self.source.closed, self.window, self.max_frames)
            self._feeds[session_id] = feed
        self._ids += 1
        return _SharedReader(self, session_id, feed, self._ids)

    def readers(self, session_id: str) -> int:
        """Readers of ``session_id`` now (for tests and metrics)."""
        feed = self._feeds.get(session_id)
        return len(feed.cursors) if feed is not None else 0

    def reads(self, session_id: str) -> int:
        """Source reads made for ``session_id``'s shared feed so far."""
        feed = self._feeds.get(session_id)
        return feed.reads if feed is not None else 0

    def _leave(self, session_id: str, feed: _SessionFeed, reader: int) -> None:
        feed.cursors.pop(reader, None)
        if not feed.cursors and self._feeds.get(session_id) is feed:
            del self._feeds[session_id]
            feed.stop()
            feed.inner.close()
        else:
            feed.trim()


class _SharedReader:
    """One reader of a shared feed (``FeedReader``): it waits on the feed's ``ready``
    version, which moves after a read brought something, and takes its pages from the
    window; only a reader behind it reads the source itself."""

    def __init__(self, feeds: SharedFeeds, session_id: str, feed: _SessionFeed, rid: int):
        self._feeds = feeds
        self._session_id = session_id
        self._feed = feed
        self._id = rid
        self._open = True
        feed.cursors[rid] = feed.last  # until it reads, it needs nothing held

    @property
    def version(self) -> int:
        return self._feed.ready.version

    async def wait(self, seen: int, timeout: float) -> None:
        await self._feed.ready.wait(seen, timeout)

    async def events_after(self, after: int, limit: int) -> list[dict[str, Any]]:
        feed = self._feed
        if feed.base < 0:  # the first reader places the window at its cursor
            feed.base = feed.last = after
            feed.start()
        feed.cursors[self._id] = after  # what it still needs is kept meanwhile
        if feed.read_version < 0:  # nothing read yet: join the first read
            await feed.refresh(0)
        if after < feed.base:  # behind the window: its own pages, as without sharing
            return self._handed(after, await feed.inner.events_after(after, limit))
        # Complete as of the feed's last read: anything newer moves ``ready`` once read.
        return self._handed(after, feed.slice(after, limit) if after <= feed.last else [])

    async def frames_after(self, seq: int, n: int) -> list[tuple[int, dict[str, Any]]]:
        return self._feed.frames_after(seq, n)

    def _handed(self, after: int, page: list[dict[str, Any]]) -> list[dict[str, Any]]:
        if self._open:
            self._feed.cursors[self._id] = page[-1]["seq"] if page else after
        return page

    def close(self) -> None:
        if self._open:
            self._open = False
            self._feeds._leave(self._session_id, self._feed, self._id)
