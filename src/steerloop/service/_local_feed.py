"""The in-process host's feed: the live frames of a session's open step, the wake of its
SSE readers, and the durability rounds that let readers serve only stored events."""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any

from ..session import Session
from ._source import Wakeup

__all__ = ["Durability", "LocalFeed", "LocalFeeds", "LocalReader"]

_MAX_FRAMES = 4096
"""Live frames kept per open step; older ones are dropped (the committed
``assistant/message`` supersedes them), so a slow reader never makes the host buffer more."""


class LocalFeed(Wakeup):
    """Wakes SSE readers of one session; holds the live frames of its open step.

    A durable event in the middle of a stream (a steer's splice) starts a new numbering
    (``seq:n`` after it). The frames numbered after the previous seq stay readable (``prev``)
    until frames under another seq replace them: a reader that had not yet read the last of
    them when the event landed reads them first (``_pages``), so it loses no word.
    """

    __slots__ = ("after_seq", "first_n", "frames", "prev", "readers")

    def __init__(self) -> None:
        super().__init__()
        self.readers = 0
        self.after_seq = 0
        self.first_n = 1
        self.frames: deque[dict[str, Any]] = deque(maxlen=_MAX_FRAMES)
        self.prev: tuple[int, int, deque[dict[str, Any]]] | None = None

    def restart(self, after_seq: int) -> None:
        """Number the next frames after ``after_seq``; the current ones become ``prev``."""
        if self.frames:
            self.prev = (self.after_seq, self.first_n, self.frames)
            self.frames = deque(maxlen=_MAX_FRAMES)
        self.after_seq = after_seq
        self.first_n = 1

    def frames_after(self, seq: int, n: int) -> list[tuple[int, dict[str, Any]]]:
        """Live frames ``(n, frame)`` numbered after ``seq`` with a number > ``n``."""
        if seq == self.after_seq:
            first, frames = self.first_n, self.frames
        elif self.prev is not None and seq == self.prev[0]:
            _, first, frames = self.prev
        else:
            return []
        return [(i, frame) for i, frame in enumerate(frames, start=first) if i > n]


class LocalFeeds:
    """The feeds of one process's sessions: made on demand, kept while a reader or the
    session's live agent (``live``) needs them."""

    def __init__(self, live: Callable[[str], bool]) -> None:
        self._feeds: dict[str, LocalFeed] = {}
        self._live = live

    def get(self, session_id: str, reader: bool = False) -> LocalFeed:
        feed = self._feeds.get(session_id)
        if feed is None:
            feed = self._feeds[session_id] = LocalFeed()
        if reader:
            feed.readers += 1
        return feed

    def release(self, session_id: str) -> None:
        """A reader leaves; the feed goes when it has no readers and no live agent."""
        feed = self._feeds.get(session_id)
        if feed is None:
            return
        feed.readers -= 1
        if feed.readers <= 0 and not self._live(session_id):
            del self._feeds[session_id]

    def drop_unread(self, session_id: str) -> None:
        """The agent was unloaded: its feed goes unless a reader holds it."""
        feed = self._feeds.get(session_id)
        if feed is not None and feed.readers <= 0:
            del self._feeds[session_id]

    def wake_all(self) -> None:
        for feed in self._feeds.values():
            feed.bump()

    def on_event(self, session_id: str, seq: int) -> None:
        """A durable event: frames after it are numbered anew; readers wake."""
        feed = self._feeds.get(session_id)
        if feed is not None:
            feed.restart(seq)
            feed.bump()

    def on_frame(self, session_id: str, after_seq: int, body: dict[str, Any]) -> None:
        """A live frame of the step open after ``after_seq``."""
        feed = self.get(session_id)
        if after_seq != feed.after_seq:
            feed.restart(after_seq)
        if len(feed.frames) == feed.frames.maxlen:
            feed.first_n += 1
        feed.frames.append(body)
        feed.bump()


class Durability:
    """Makes the events readers ask for durable, for every reader of the process at once.

    Readers (SSE feeds, log pages) serve a live session's events only once they are durable.
    Each flushing on its own turned every group commit into a synced one, once per reader
    wake (measured: a third of the turn throughput with two readers per session). Here a
    reader registers what it needs and joins the next *round*: one ``flush`` per session in
    demand, all issued together (group commit syncs them in one commit); one round runs at
    a time, so the sync rate no longer grows with the number of readers.
    """

    def __init__(self) -> None:
        self.marks: dict[str, int] = {}  # durable through this seq (per session)
        self._want: dict[str, Session] = {}  # session id -> Session, for the next round
        self._next: asyncio.Future[dict[str, BaseException]] | None = None
        self._runner: asyncio.Task[None] | None = None

    async def through(self, session_id: str, session: Session, seq: int) -> None:
        """Return once ``session`` is durable through ``seq``; raise its flush's error."""
        while self.marks.get(session_id, 0) < seq:
            self._want[session_id] = session
            if self._next is None:
                self._next = asyncio.get_running_loop().create_future()
            round_ = self._next
            if self._runner is None or self._runner.done():
                self._runner = asyncio.get_running_loop().create_task(self._run())
            errors = await asyncio.shield(round_)
            if session_id in errors:
                raise errors[session_id]

    def forget(self, session_id: str) -> None:
        self.marks.pop(session_id, None)

    async def _run(self) -> None:
        while self._want:
            want, self._want = self._want, {}
            round_, self._next = self._next, None
            marks = {sid: session.next_seq - 1 for sid, session in want.items()}
            results = await asyncio.gather(
                *(session.flush() for session in want.values()), return_exceptions=True
            )
            errors: dict[str, BaseException] = {}
            for (sid, mark), result in zip(marks.items(), results, strict=True):
                if isinstance(result, BaseException):
                    errors[sid] = result
                else:
                    self.marks[sid] = max(mark, self.marks.get(sid, 0))
            if round_ is not None and not round_.done():
                round_.set_result(errors)


class LocalReader:
    """An SSE reader of the in-process feed (``FeedReader``)."""

    def __init__(
        self,
        feed: LocalFeed,
        events_after: Callable[[int, int], Awaitable[list[dict[str, Any]]]],
        release: Callable[[], None],
    ) -> None:
        self._feed = feed
        self._events_after = events_after  # the host's durable events of the session
        self._release = release  # the host's release of this reader's feed
        self._open = True

    @property
    def version(self) -> int:
        return self._feed.version

    async def wait(self, seen: int, timeout: float) -> None:
        await self._feed.wait(seen, timeout)

    async def events_after(self, after: int, limit: int) -> list[dict[str, Any]]:
        return await self._events_after(after, limit)

    async def frames_after(self, seq: int, n: int) -> list[tuple[int, dict[str, Any]]]:
        return self._feed.frames_after(seq, n)

    def close(self) -> None:
        if self._open:
            self._open = False
            self._release()
