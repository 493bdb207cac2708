"""The SSE feed of a PostgreSQL service, across hosts (design/SERVICE.md "SSE subscribe,
reconnect and resume", "Back-pressure").

* ``FeedHub``: ONE connection per process LISTENing on ``steerloop_feed``. Its callback only
  bumps per-session coalescing flags (never blocks, never queues payloads): a reader that was
  busy sees one bump however many batches committed, and re-reads by its own cursor. When the
  connection dies the hub reconnects and then wakes every reader, so a notification lost
  while it was away costs nothing (the re-read finds what committed).
* ``PgFeedSource``: the ``FeedSource`` of an API node: durable events are paged from the
  events table by seq; live frames of an open step come from ``steerloop_live``, only those
  written under the session's current lease token (a taken-over owner's frames are dropped).
* ``LivePublisher``: run by every worker; ``agent/assistant-stream`` frames are coalesced
  every 50 ms into one INSERT into ``steerloop_live`` (``after_seq``, ``n``, the lease
  token) plus one NOTIFY ``<sid>:<after_seq>:<n>``; a step's rows are deleted once the event
  that ends it has had a tick to commit, and rows of tokens no longer holding a lease are
  swept as stale. Live frames are best effort: the committed ``assistant/message``
  supersedes them.

Committed batches are announced by the store itself (``PostgresStore(notify=True)``: one
``pg_notify`` per batch inside its transaction).
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from ... import Runtime
from ...errors import SessionStorageError
from ...hooks import ASSISTANT_STREAM, SESSION_EVENT, SessionEventPayload, StreamFramePayload
from ...session._json import dumps, loads
from ...session.store import page_rows
from ...session.store.postgres import PostgresStore
from ...session.store.postgres._schema import Tables, asyncpg_module
from ...session.store.postgres._store import (
    FEED_CHANNEL,
    PAYLOAD_BYTES,
    escape_id,
    parse_feed_payload,
)
from .._host import frame_json
from .._source import Wakeup

__all__ = ["FeedHub", "LivePublisher", "PgFeed", "PgFeedSource", "open_pg_feed"]

log = logging.getLogger("steerloop.service.feed")

_FRAME_PAGE = 500
_UNKNOWN = 1 << 62  # ``live_after`` before anything is known: every cursor may have frames


class _Flag(Wakeup):
    """A coalescing per-session flag: ``version`` moves, waiters wake; nothing is queued."""

    __slots__ = ("live", "live_after", "readers")

    def __init__(self) -> None:
        super().__init__()
        self.live = 0  # moves with each live-frame announcement (and each reconnect)
        self.live_after = _UNKNOWN  # the highest after_seq announced (unknown at first)
        self.readers = 0


class FeedHub:
    """One LISTEN connection on ``steerloop_feed`` for the whole process.

    Args:
        dsn: the server (a ``postgresql://`` DSN asyncpg accepts).
        channel: the schema's feed channel (``Tables.feed_channel``).
        name: shown as ``application_name`` ``steerloop-feed:<name>`` (operators, tests).
        check_every: seconds between liveness probes of an idle connection (a half-open
            socket is found within this).
        retry: seconds between reconnection attempts.
    """

    def __init__(
        self,
        dsn: str,
        *,
        channel: str = FEED_CHANNEL,
        name: str = "api",
        connect_timeout: float = 5.0,
        check_every: float = 5.0,
        retry: float = 0.25,
    ) -> None:
        self._pg = asyncpg_module()
        self._dsn = dsn
        self.channel = channel
        self.application_name = f"steerloop-feed:{name}"[:63]
        self._connect_timeout = connect_timeout
        self._check_every = check_every
        self._retry = retry
        self._flags: dict[str, _Flag] = {}
        self._conn: Any = None
        self._lost = asyncio.Event()
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.connects = 0
        """Successful (re)connections so far."""
        self.notifications = 0

    @property
    def backend_pid(self) -> int | None:
        """The server pid of the LISTEN connection (``None`` while disconnected)."""
        conn = self._conn
        return None if conn is None or conn.is_closed() else int(conn.get_server_pid())

    async def start(self) -> None:
        """Connect and LISTEN (a first failure raises ``SessionStorageError``), then keep
        the connection alive in a task of this loop."""
        if self._task is not None:
            return
        try:
            await self._connect()
        except (OSError, TimeoutError, self._pg.PostgresError, self._pg.InterfaceError) as exc:
            raise SessionStorageError(
                f"the feed listener cannot connect: {type(exc).__name__}"
            ) from None
        self._task = asyncio.get_running_loop().create_task(self._run(), name="steerloop-feed-hub")

    async def close(self) -> None:
        """Stop (cooperatively) and disconnect; every reader is woken to see the end."""
        self._stop.set()
        self._lost.set()
        if self._task is not None:
            with contextlib.suppress(Exception):
                await self._task
        await self._disconnect()
        self._wake_all()

    @property
    def closed(self) -> bool:
        return self._stop.is_set()

    # --- readers ----------------------------------------------------------------------------

    def subscribe(self, session_id: str) -> _Flag:
        flag = self._flags.get(session_id)
        if flag is None:
            flag = self._flags[session_id] = _Flag()
        flag.readers += 1
        return flag

    def unsubscribe(self, session_id: str, flag: _Flag) -> None:
        flag.readers -= 1
        if flag.readers <= 0 and self._flags.get(session_id) is flag:
            del self._flags[session_id]

    def readers(self) -> int:
        return sum(flag.readers for flag in self._flags.values())

    def _wake_all(self) -> None:
        for flag in builtins.list(self._flags.values()):
            flag.live += 1  # nothing is known to be unannounced: readers look again
            flag.live_after = _UNKNOWN
            flag.bump()

    def _on_notify(self, conn: Any, pid: int, channel: str, payload: str) -> None:
        # Never blocks: bump flags only. A payload that names nothing parseable wakes
        # everyone (a reader re-reads by cursor, so a spurious wake is only a query).
        self.notifications += 1
        items = parse_feed_payload(payload)
        if not items:
            self._wake_all()
            return
        for session_id, seq, n in items:
            flag = self._flags.get(session_id)
            if flag is not None:
                if n is not None:
                    flag.live += 1
                    if flag.live_after != _UNKNOWN:
                        flag.live_after = max(flag.live_after, seq)
                flag.bump()

    def _on_terminated(self, conn: Any) -> None:
        if conn is self._conn:
            self._lost.set()

    # --- the connection ---------------------------------------------------------------------

    async def _connect(self) -> None:
        conn = await self._pg.connect(
            self._dsn,
            timeout=self._connect_timeout,
            server_settings={"application_name": self.application_name},
        )
        try:
            await conn.add_listener(self.channel, self._on_notify)
        except BaseException:
            conn.terminate()
            raise
        conn.add_termination_listener(self._on_terminated)
        self._conn = conn
        self._lost.clear()
        self.connects += 1
        # Whatever committed while nobody listened is found by the readers' re-read.
        self._wake_all()

    async def _disconnect(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None and not conn.is_closed():
            try:
                await asyncio.wait_for(conn.close(), 2)
            except Exception:
                conn.terminate()

    async def _run(self) -> None:
        delay = self._retry
        while not self._stop.is_set():
            if self._conn is None:
                try:
                    await self._connect()
                except Exception as exc:
                    log.warning("feed listener: reconnecting failed (%s)", type(exc).__name__)
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self._stop.wait(), delay)
                    delay = min(delay * 2, 2.0)  # a server that is down is not hammered
                    continue
                delay = self._retry
                log.info("feed listener: reconnected")
            try:
                await asyncio.wait_for(self._lost.wait(), self._check_every)
            except TimeoutError:
                if await self._alive():
                    continue
            if self._stop.is_set():
                return
            log.warning("feed listener: connection lost; reconnecting")
            await self._disconnect()
            self._wake_all()  # readers re-read now; again once reconnected

    async def _alive(self) -> bool:
        conn = self._conn
        if conn is None or conn.is_closed():
            return False
        try:
            await asyncio.wait_for(conn.fetchval("SELECT 1"), self._check_every)
        except Exception:
            return False
        return True


class PgFeedSource:
    """The ``FeedSource`` of a PostgreSQL service (API node or ``--role all``)."""

    def __init__(self, hub: FeedHub, pool: Any, tables: Tables) -> None:
        self.hub = hub
        self._pool = pool
        self._tables = tables
        self._pg = asyncpg_module()
        t = tables
        self._frames_sql = f"""
            SELECT v.n, v.frame FROM {t.live} v
              JOIN {t.leases} l ON l.session_id = v.session_id AND l.token = v.token
             WHERE v.session_id = $1 AND v.after_seq = $2 AND v.n > $3
             ORDER BY v.n LIMIT $4"""

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
            rows = await self._pool.fetch(self._frames_sql, session_id, seq, n, _FRAME_PAGE)
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

    def __init__(self, source: PgFeedSource, session_id: str, flag: _Flag) -> None:
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
        if flag.live_after == _UNKNOWN and flag.live == looked[1] and seq >= self._read_through:
            # Nothing was announced while the query ran and no event follows ``seq``: what
            # it found is what there is. (The feed loop also reads the frames of a cursor an
            # event has since passed, which tells nothing about the open step.)
            flag.live_after = seq if frames else seq - 1
        return frames

    def close(self) -> None:
        if self._open:
            self._open = False
            self._source.hub.unsubscribe(self._session_id, self._flag)


@dataclass(slots=True)
class _Step:
    """The open step of one session as published: frames after ``after_seq`` under
    ``token``, the last one numbered ``n``."""

    after_seq: int
    token: int
    n: int = 0


_Row = tuple[str, int, int, int, str]  # session_id, after_seq, n, token, frame JSON


class LivePublisher:
    """Publishes a worker's live frames to ``steerloop_live`` (see the module docstring).

    ``start()`` subscribes to the runtime's hooks and starts the flusher; ``await close()``
    stops it cooperatively after a last flush. Frames of sessions whose writer has no lease
    token (not a PostgreSQL store) are not published.

    Args:
        rt: the runtime whose frames are published (``None``: a publisher that only sweeps
            stale rows; ``start`` refuses it).
        every: the coalescing window in seconds (one INSERT + one NOTIFY per window).
        max_pending: frames held between flushes; past it the oldest are dropped (the
            committed ``assistant/message`` supersedes them).
        stale_every: seconds between sweeps of rows whose token holds no lease.
    """

    def __init__(
        self,
        pool: Any,
        tables: Tables,
        rt: Runtime | None,
        *,
        every: float = 0.05,
        max_pending: int = 4096,
        stale_every: float = 30.0,
    ) -> None:
        self._pool = pool
        self._tables = tables
        self._rt = rt
        self.every = every
        self.max_pending = max_pending
        self.stale_every = stale_every
        self._steps: dict[str, _Step] = {}
        self._pending: builtins.list[_Row] = []
        self._retire: dict[str, int] = {}  # sid -> rows below this after_seq are superseded
        self._retiring: dict[str, int] = {}  # retired one tick ago: committed by now
        self._kick = asyncio.Event()
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._disposers: builtins.list[Any] = []
        self.flushes = 0
        self.published = 0
        """Frames committed to ``steerloop_live`` so far."""
        self.dropped = 0
        t = tables
        self._insert_sql = f"""
            INSERT INTO {t.live} AS v (session_id, after_seq, n, token, frame)
            SELECT * FROM unnest($1::text[], $2::bigint[], $3::int[], $4::bigint[], $5::json[])
            ON CONFLICT (session_id, after_seq, n) DO UPDATE
               SET token = EXCLUDED.token, frame = EXCLUDED.frame
             WHERE v.token < EXCLUDED.token"""
        self._retire_sql = f"""
            DELETE FROM {t.live} v USING unnest($1::text[], $2::bigint[]) AS d (sid, below)
             WHERE v.session_id = d.sid AND v.after_seq < d.below"""
        self._stale_sql = f"""
            DELETE FROM {t.live} v WHERE NOT EXISTS (
                SELECT 1 FROM {t.leases} l WHERE l.session_id = v.session_id
                   AND l.token = v.token AND l.lease_id IS NOT NULL)"""

    def start(self) -> None:
        if self._task is not None:
            return
        if self._rt is None:
            raise ValueError("a LivePublisher without a runtime has no frames to publish")
        self._disposers = [
            self._rt.hooks.on(ASSISTANT_STREAM, self._on_frame),
            self._rt.hooks.on(SESSION_EVENT, self._on_event),
        ]
        self._task = asyncio.get_running_loop().create_task(
            self._run(), name="steerloop-live-publisher"
        )

    async def close(self) -> None:
        for dispose in self._disposers:
            dispose()
        self._disposers = []
        self._stop.set()
        self._kick.set()
        if self._task is not None:
            with contextlib.suppress(Exception):
                await self._task

    # --- hooks (synchronous, never block) ---------------------------------------------------

    def _on_frame(self, payload: StreamFramePayload) -> None:
        agent = payload.agent
        token = getattr(agent.session._sink, "token", None)
        if type(token) is not int:
            return
        session_id = agent.id
        after = agent.session.next_seq - 1
        step = self._steps.get(session_id)
        if step is None or step.after_seq != after or step.token != token:
            if step is not None and step.token != token:
                # A new lease: frames queued under the old token are not ours to publish.
                self._pending = [r for r in self._pending if r[0] != session_id]
            step = self._steps[session_id] = _Step(after, token)
        step.n += 1
        if len(self._pending) >= self.max_pending:
            del self._pending[0]
            self.dropped += 1
        self._pending.append((session_id, after, step.n, token, dumps(frame_json(payload.frame))))
        self._kick.set()

    def _on_event(self, payload: SessionEventPayload) -> None:
        session_id = payload.session.id
        step = self._steps.get(session_id)
        if step is None or payload.event.seq <= step.after_seq:
            return
        # The event that ends the step supersedes its frames once it has committed.
        del self._steps[session_id]
        self._retire[session_id] = max(self._retire.get(session_id, 0), payload.event.seq)
        self._kick.set()

    # --- the flusher --------------------------------------------------------------------------

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        next_sweep = loop.time() + self.stale_every
        while True:
            idle = not self._pending and not self._retire and not self._retiring
            if idle and self._stop.is_set():
                return
            timeout = max(0.0, next_sweep - loop.time()) if idle else self.every
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout):
                    if idle:
                        await self._kick.wait()
                    else:
                        await self._stop.wait()  # the window: gather what comes
            self._kick.clear()
            sweep = loop.time() >= next_sweep
            if sweep:
                next_sweep = loop.time() + self.stale_every
            await self._flush(sweep)

    async def _flush(self, sweep: bool) -> None:
        rows, self._pending = self._pending, []
        ready, self._retiring, self._retire = self._retiring, self._retire, {}
        if not rows and not ready and not sweep:
            return
        tops: dict[tuple[str, int], int] = {}
        for sid, after, n, _token, _frame in rows:
            tops[(sid, after)] = max(n, tops.get((sid, after), 0))
        try:
            async with self._pool.acquire() as conn, conn.transaction():
                if rows:
                    await conn.execute(
                        self._insert_sql, *map(builtins.list, zip(*rows, strict=True))
                    )
                    for payload in _live_payloads(tops):
                        await conn.execute(
                            "SELECT pg_notify($1, $2)", self._tables.feed_channel, payload
                        )
                if ready:
                    await conn.execute(
                        self._retire_sql, builtins.list(ready), builtins.list(ready.values())
                    )
                if sweep:
                    await conn.execute(self._stale_sql)
            self.flushes += 1
            self.published += len(rows)
        except Exception as exc:  # best effort: the committed events supersede live frames
            log.warning("live frames: publishing failed (%s)", type(exc).__name__)
            for sid, below in ready.items():
                self._retire[sid] = max(self._retire.get(sid, 0), below)


def _live_payloads(tops: dict[tuple[str, int], int]) -> builtins.list[str]:
    """``<sid>:<after_seq>:<n>`` items, comma-separated, split below the server's limit."""
    payloads: builtins.list[str] = []
    items: builtins.list[str] = []
    size = 0
    for (sid, after), n in tops.items():
        item = f"{escape_id(sid)}:{after}:{n}"
        if items and size + len(item.encode()) + 1 > PAYLOAD_BYTES:
            payloads.append(",".join(items))
            items, size = [], 0
        items.append(item)
        size += len(item.encode()) + 1
    if items:
        payloads.append(",".join(items))
    return payloads


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
    await store._acquire_pool()  # the schema exists (migrated) before anyone reads it
    dsn = store._url.dsn
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
    hub = FeedHub(dsn, channel=store._tables.feed_channel, name=name)
    try:
        await hub.start()
    except BaseException:
        pool.terminate()
        raise
    tables = store._tables
    publisher = LivePublisher(pool, tables, rt) if rt is not None else None
    if publisher is not None:
        publisher.start()
    return PgFeed(hub, pool, PgFeedSource(hub, pool, tables), publisher)
