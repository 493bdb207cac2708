"""One LISTEN connection per process on ``steerloop_feed`` (``FeedHub``).

Its callback only bumps per-session coalescing flags (never blocks, never queues payloads):
a reader that was busy sees one bump however many batches committed, and re-reads by its
own cursor. When the connection dies the hub reconnects and then wakes every reader, so a
notification lost while it was away costs nothing (the re-read finds what committed).
Committed batches are announced by the store itself (``PostgresStore(notify=True)``), live
frames by the workers' ``LivePublisher`` (``_live.py``).
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import logging
from typing import Any

from ...errors import SessionStorageError
from ...session.store.postgres._schema import asyncpg_module
from ...session.store.postgres._store import FEED_CHANNEL, parse_feed_payload
from .._source import Wakeup
from ._sql import PING

__all__ = ["UNKNOWN", "FeedHub", "Flag"]

log = logging.getLogger("steerloop.service.feed")

UNKNOWN = 1 << 62  # ``live_after`` before anything is known: every cursor may have frames


class Flag(Wakeup):
    """A coalescing per-session flag: ``version`` moves, waiters wake; nothing is queued."""

    __slots__ = ("live", "live_after", "readers")

    def __init__(self) -> None:
        super().__init__()
        self.live = 0  # moves with each live-frame announcement (and each reconnect)
        self.live_after = UNKNOWN  # the highest after_seq announced (unknown at first)
        self.readers = 0


class FeedHub:
    """One LISTEN connection on ``steerloop_feed`` for the whole process.

    Args:
        dsn: the server (a ``postgresql://`` DSN asyncpg accepts).
        channel: the schema's feed channel (``ServiceTables.feed_channel``).
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
        self._flags: dict[str, Flag] = {}
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

    def subscribe(self, session_id: str) -> Flag:
        flag = self._flags.get(session_id)
        if flag is None:
            flag = self._flags[session_id] = Flag()
        flag.readers += 1
        return flag

    def unsubscribe(self, session_id: str, flag: Flag) -> None:
        flag.readers -= 1
        if flag.readers <= 0 and self._flags.get(session_id) is flag:
            del self._flags[session_id]

    def readers(self) -> int:
        return sum(flag.readers for flag in self._flags.values())

    def _wake_all(self) -> None:
        for flag in builtins.list(self._flags.values()):
            flag.live += 1  # nothing is known to be unannounced: readers look again
            flag.live_after = UNKNOWN
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
                    if flag.live_after != UNKNOWN:
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
            await asyncio.wait_for(conn.fetchval(PING), self._check_every)
        except Exception:
            return False
        return True
