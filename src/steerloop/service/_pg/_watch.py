"""Death as an event: a connection waiting for another session's advisory lock.

A worker's liveness is its advisory lock ``(ns, key)``, held on its control connection:
when the process dies the server ends that backend and the lock is released. A periodic
look at ``pg_locks`` finds that only at its next pass; a connection *waiting* for the lock
(``pg_advisory_lock`` blocks until it is free) learns it the moment it happens. So:

* the sweeper leader watches every other live worker's key (up to a bound; the periodic
  pass covers the rest): a watch that gets its lock proves that worker dead, and the leader
  sweeps at once (design/SERVICE.md §3.3 "fast failure detection");
* every other sweeper watches the leadership lock: when the leader dies, they try to lead
  at once and the new leader revokes the dead leader's leases without waiting for a grace.

A watch releases the lock the moment it gets it (it must not look alive under the dead
worker's key), closes its connection, then calls ``on_free`` (synchronously, never
blocking: it sets flags). One watch fires at most once; the sweeper starts a new one.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import Callable
from typing import Any

from ...session.store.postgres._schema import asyncpg_module
from ._sql import LOCK, UNLOCK, Sql

__all__ = ["LockWatch"]

log = logging.getLogger("steerloop.service")


class LockWatch:
    """Waits on a connection of its own until ``(ns, key)`` is free, then ``on_free()``.

    Args:
        dsn: the server (what asyncpg gets).
        ns, key: the advisory lock (two-int form) to wait for.
        on_free: called once, from the loop, when the lock was free (its holder ended).
        name: shown as ``application_name`` ``steerloop-watch:<name>``.
        connect_timeout: seconds to wait for the server (a failed watch just ends; the
            sweeper's periodic pass still covers the key).
    """

    def __init__(
        self,
        dsn: str,
        ns: int,
        key: int,
        on_free: Callable[[], None],
        *,
        name: str,
        connect_timeout: float = 5.0,
    ) -> None:
        self._pg = asyncpg_module()
        self._dsn = dsn
        self.ns = ns
        self.key = key
        self._on_free = on_free
        self.application_name = f"steerloop-watch:{name}"[:63]
        self._connect_timeout = connect_timeout
        self._conn: Any = None
        self._closing = False
        self._task: asyncio.Task[None] | None = None
        self.fired = False

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(
                self._run(), name=f"steerloop-watch {self.ns}:{self.key}"
            )

    @property
    def done(self) -> bool:
        """It fired, failed or was closed: the sweeper may start another."""
        return self._task is not None and self._task.done()

    async def close(self) -> None:
        """Stop waiting. The wait is cancelled on the server (asyncpg sends a cancel request
        when the waiting task is cancelled) before the connection closes: a backend whose
        client merely went away would stay queued for the lock as long as its holder lives."""
        self._closing = True
        task = self._task
        if task is not None and not task.done():
            task.cancel()  # this watch's own task: its wait is cancelled server-side
            with contextlib.suppress(BaseException):
                await asyncio.wait_for(task, 5.0)
        conn, self._conn = self._conn, None
        if conn is not None and not conn.is_closed():
            try:
                await asyncio.wait_for(conn.close(), 2.0)
            except Exception:
                conn.terminate()

    async def _connect(self) -> Any:
        """A connection whose backend notices a vanished client even while it waits for the
        lock (``client_connection_check_interval``, PostgreSQL 14+): a watching process that
        dies must not leave a backend queued for the lock as long as its holder lives. An
        older server refuses the setting: it gets a plain connection."""
        settings = {"application_name": self.application_name}
        try:
            return await self._pg.connect(
                self._dsn,
                timeout=self._connect_timeout,
                server_settings={**settings, "client_connection_check_interval": "1000"},
            )
        except self._pg.PostgresError:
            return await self._pg.connect(
                self._dsn, timeout=self._connect_timeout, server_settings=settings
            )

    async def _run(self) -> None:
        try:
            conn = await self._connect()
        except Exception as exc:
            log.info("lock watch %s:%s: cannot connect (%s)", self.ns, self.key, exc)
            return
        self._conn = conn
        if self._closing:
            return
        try:
            # Blocks until the holder's backend ends (or unlocks), then gives it back at
            # once: while held here the key would look alive to the sweeper.
            await conn.execute(LOCK, self.ns, self.key)
            await conn.execute(UNLOCK, self.ns, self.key)
        except Exception as exc:
            if not self._closing:
                log.info("lock watch %s:%s ended: %s", self.ns, self.key, type(exc).__name__)
                conn.terminate()
            return
        self._conn = None
        conn.terminate()  # nothing is held or waited for on it any more
        if self._closing:
            return
        self.fired = True
        try:
            self._on_free()
        except Exception:
            log.exception("lock watch %s:%s: on_free failed", self.ns, self.key)


class Watches:
    """The lock watches of one sweeper: the leader watches the other live workers' keys
    (``limit`` at most, oldest workers first), the others watch the leadership lock.
    ``on_dead(key)`` gets the key proven dead (the watched worker's, or the dead leader's
    when it was known); it must not block.

    Args:
        dsn: the server.
        ns: the schema's advisory namespace.
        leader_key: the leadership lock's key in ``ns``.
        name: this worker's id (the watches' ``application_name``).
        on_dead: called with each key proven dead.
        limit: most worker keys the leader watches (each is one connection).
    """

    def __init__(
        self,
        dsn: str,
        ns: int,
        leader_key: int,
        name: str,
        on_dead: Callable[[int], None],
        *,
        limit: int = 32,
    ) -> None:
        self._dsn = dsn
        self._ns = ns
        self._leader_key = leader_key
        self._name = name
        self._on_dead = on_dead
        self.limit = limit
        self._workers: dict[int, LockWatch] = {}
        self._fired: set[int] = set()  # proven dead: not watched again while listed
        self._leader: LockWatch | None = None

    @property
    def watching(self) -> tuple[int, ...]:
        """The worker keys watched now (the leader's watches)."""
        return tuple(k for k, w in self._workers.items() if not w.done)

    async def sync(self, conn: Any, q: Sql, own_key: int, leading: bool) -> None:
        """Start and stop watches for this sweeper's role (one query, then connects in the
        background)."""
        if leading:
            await self._close_leader_watch()
            await self._sync_workers(conn, q, own_key)
        else:
            await self._close_worker_watches()
            await self._sync_leader(conn, q)

    async def _sync_workers(self, conn: Any, q: Sql, own_key: int) -> None:
        rows = await conn.fetch(
            q.watched_workers,
            own_key,
            self.limit,
            timeout=10.0,
        )
        keys = [row["key"] for row in rows]
        self._fired &= set(keys)
        for key, watch in list(self._workers.items()):
            if key not in keys or watch.done:
                if watch.fired:
                    self._fired.add(key)
                del self._workers[key]
                await watch.close()
        for key in keys:
            if key not in self._workers and key not in self._fired:
                watch = LockWatch(
                    self._dsn,
                    self._ns,
                    key,
                    functools.partial(self._on_dead, key),
                    name=self._name,
                )
                self._workers[key] = watch
                watch.start()

    async def _sync_leader(self, conn: Any, q: Sql) -> None:
        if self._leader is not None and not self._leader.done:
            return
        # The leader's worker key: the other advisory lock of the backend holding the
        # leadership lock (both live on its control connection).
        leader = await conn.fetchval(
            q.leader_key,
            self._ns,
            self._leader_key,
            timeout=10.0,
        )
        if leader is None:
            self._leader = None
            return  # nobody leads (or the leader is not a worker): the election tries
        watch = LockWatch(
            self._dsn,
            self._ns,
            self._leader_key,
            functools.partial(self._on_dead, int(leader)),
            name=self._name,
        )
        self._leader = watch
        watch.start()

    async def _close_leader_watch(self) -> None:
        watch, self._leader = self._leader, None
        if watch is not None:
            await watch.close()

    async def _close_worker_watches(self) -> None:
        watches = list(self._workers.values())
        self._workers.clear()
        self._fired.clear()
        for watch in watches:
            await watch.close()

    async def close(self) -> None:
        await self._close_leader_watch()
        await self._close_worker_watches()
