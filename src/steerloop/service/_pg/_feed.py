"""The SSE feed of a PostgreSQL service, across hosts (design/SERVICE.md "SSE subscribe,
reconnect and resume", "Back-pressure").

``PgFeedSource`` is the ``FeedSource`` of an API node: durable events are paged from the
events table by seq; live frames of an open step come from ``steerloop_live``, only those
written under the session's current lease token (a taken-over owner's frames are dropped).
It is woken by the process's ``FeedHub`` (``_hub.py``); a process that runs agents also
publishes their live frames (``_live.py``). ``open_pg_feed`` puts the three together.
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import logging
from collections.abc import Iterator
from typing import Any

from ... import Runtime
from ...errors import SessionStorageError
from ...session._json import loads
from ...session.store import page_rows
from ...session.store.postgres._schema import asyncpg_module
from ...session.store.postgres._store import (
    PostgresStore,
)
from ._hub import UNKNOWN, FeedHub, Flag
from ._live import LivePublisher
from ._schema import ServiceTables, service_migrations
from ._sql import Sql

__all__ = ["PgFeed", "PgFeedSource", "open_pg_feed"]

log = logging.getLogger("steerloop.service.feed")

_FRAME_PAGE = 500


class PgFeedSource:
    """The ``FeedSource`` of a PostgreSQL service (API node or ``--role all``)."""

    def __init__(self, hub: FeedHub, pool: Any, tables: ServiceTables) -> None:
        self.hub = hub
        self._pool = pool
        self._tables = tables
        self._pg = asyncpg_module()
        self._q = Sql(tables)

    @property
    def closed(self) -> bool:
        return self.hub.closed

    def subscribe(self, session_id: str) -> _PgReader:
        return _PgReader(self, session_id, self.hub.subscribe(session_id))

    @contextlib.contextmanager
    def _errors(self, what: str) -> Iterator[None]:
        try:
            yield
        except (OSError, TimeoutError, self._pg.PostgresError, self._pg.InterfaceError) as exc:
            raise SessionStorageError(f"the feed: {what} failed: {type(exc).__name__}") from None

    async def events_after(
        self, session_id: str, after: int, limit: int
    ) -> builtins.list[dict[str, Any]]:
        with self._errors(f"reading session {session_id!r}"):
            rows = await self._pool.fetch(self._tables.page, session_id, after, limit)
        return builtins.list(page_rows(rows, after, f"session {session_id!r}"))

    async def frames_after(
        self, session_id: str, seq: int, n: int
    ) -> builtins.list[tuple[int, dict[str, Any]]]:
        with self._errors(f"reading live frames of {session_id!r}"):
            rows = await self._pool.fetch(self._q.live_frames, session_id, seq, n, _FRAME_PAGE)
        frames: builtins.list[tuple[int, dict[str, Any]]] = []
        for row in rows:
            try:
                body = loads(row["frame"])
            except ValueError:
                continue  # best effort: a malformed live row is skipped, never served
            if isinstance(body, dict):
                frames.append((row["n"], body))
        return frames


class _PgReader:
    """One SSE reader of the PostgreSQL feed (``FeedReader``)."""

    def __init__(self, source: PgFeedSource, session_id: str, flag: Flag) -> None:
        self._source = source
        self._session_id = session_id
        self._flag = flag
        self._open = True
        self._looked: tuple[int, int] | None = None  # (cursor seq, flag.live) last looked at
        self._read_through = 0  # the last seq the latest events read reached

    @property
    def version(self) -> int:
        return self._flag.version

    async def wait(self, seen: int, timeout: float) -> None:
        await self._flag.wait(seen, timeout)

    async def events_after(self, after: int, limit: int) -> builtins.list[dict[str, Any]]:
        events = await self._source.events_after(self._session_id, after, limit)
        self._read_through = events[-1]["seq"] if events else after
        return events

    async def frames_after(self, seq: int, n: int) -> builtins.list[tuple[int, dict[str, Any]]]:
        # Live rows are inserted in the transaction that announces them: with no
        # announcement since this reader last looked at this cursor, there is nothing new
        # (one query per wake instead of two when only durable events move).
        flag = self._flag
        looked = (seq, flag.live)
        if looked == self._looked:
            return []
        if self._looked is not None and flag.live_after < seq:
            # Frames after ``seq`` would have been announced as ``sid:seq:n``: none was
            # since the hub knows (one query per wake when only durable events move).
            self._looked = looked
            return []
        frames = await self._source.frames_after(self._session_id, seq, n)
        self._looked = looked
        if flag.live_after == UNKNOWN and flag.live == looked[1] and seq >= self._read_through:
            # Nothing was announced while the query ran and no event follows ``seq``: what
            # it found is what there is. (The feed loop also reads the frames of a cursor an
            # event has since passed, which tells nothing about the open step.)
            flag.live_after = seq if frames else seq - 1
        return frames

    def close(self) -> None:
        if self._open:
            self._open = False
            self._source.hub.unsubscribe(self._session_id, self._flag)


class PgFeed:
    """The feed of one PostgreSQL service process: a hub, a small read pool, the source
    and (where agents run) the live publisher. ``await open_pg_feed(...)`` builds it."""

    def __init__(
        self, hub: FeedHub, pool: Any, source: PgFeedSource, publisher: LivePublisher | None
    ) -> None:
        self.hub = hub
        self.pool = pool
        self.source = source
        self.publisher = publisher

    async def close(self) -> None:
        if self.publisher is not None:
            await self.publisher.close()
        await self.hub.close()
        try:
            await asyncio.wait_for(self.pool.close(), 5)
        except Exception:
            self.pool.terminate()


async def open_pg_feed(
    store: PostgresStore, rt: Runtime | None, *, name: str = "api", pool_size: int = 4
) -> PgFeed:
    """The feed of a process serving ``store`` (a ``PostgresStore``): its hub LISTENs, its
    own pool of ``pool_size`` reads pages, and with a runtime ``rt`` (a process that runs
    agents) a ``LivePublisher`` publishes that runtime's live frames through the same pool.

    Raises:
        SessionStorageError: the server cannot be reached.
    """
    pg = asyncpg_module()
    tables = ServiceTables(store.schema)
    # The schema (the store's tables and the service's) exists before anyone reads it.
    await store.migrate(service_migrations(tables))
    dsn = store.dsn
    try:
        pool = await pg.create_pool(
            dsn,
            min_size=1,
            max_size=pool_size,
            timeout=5.0,
            server_settings={"application_name": f"steerloop-feed-read:{name}"[:63]},
        )
    except (OSError, TimeoutError, pg.PostgresError, pg.InterfaceError) as exc:
        raise SessionStorageError(f"the feed cannot connect: {type(exc).__name__}") from None
    hub = FeedHub(dsn, channel=tables.feed_channel, name=name)
    try:
        await hub.start()
    except BaseException:
        pool.terminate()
        raise
    publisher = LivePublisher(pool, tables, rt) if rt is not None else None
    if publisher is not None:
        publisher.start()
    return PgFeed(hub, pool, PgFeedSource(hub, pool, tables), publisher)
