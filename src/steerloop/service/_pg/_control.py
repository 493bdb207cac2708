"""A worker's control connection: its liveness lock, its worker row and its NOTIFY channels.

Liveness (design/SERVICE.md §3.3): each worker process holds a *session-level* advisory lock
``(ns, key)`` on one dedicated connection. When the process dies the kernel closes the socket,
the server ends the backend and the lock disappears from ``pg_locks``; the sweeper leader sees
that and revokes the worker's leases. ``ns`` is derived from the schema, so two deployments
in one database never read each other's locks; ``key`` is fresh per registration (key 0 is
the sweeper's leadership lock), so a worker that re-registers after losing its connection
never inherits its old identity — its old leases are fenced by then.

Loss detection has two paths, because a half-dead socket (a paused peer, a partition, a
dropped NAT entry) can look healthy to the kernel for a long time:

* asyncpg's termination listener fires when the connection is closed under us (the backend
  was terminated, the server restarted, the socket reset);
* a periodic check (``UPDATE workers SET heartbeat_at = now()`` bounded by a timeout) notices
  a connection that no longer answers, and a worker row that someone deleted.

Client-side TCP keepalive and ``TCP_USER_TIMEOUT`` are set on the socket where the platform
has them (asyncpg has no option for them), and the server side gets ``tcp_keepalives_*`` and
``tcp_user_timeout`` through the connection's settings, so a half-open connection is closed
on both ends within bounded time.

``on_lost()`` is called once, synchronously from the loop, when the connection is lost for any
reason other than ``close()``; the worker then self-fences (aborts its resident agents with
``CancelCause.disposed()``) and registers again with a new ``ControlConnection``.
``on_notify(channel, payload)`` is called from asyncpg's notification callback and must not
block (it sets flags); an exception from it is logged and dropped.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import secrets
import socket
import zlib
from collections.abc import Callable, Mapping
from typing import Any

from ...session.store.postgres._schema import asyncpg_module
from ._schema import ServiceTables
from ._sql import TRY_LOCK, UNLOCK, UNLOCK_ALL, Sql

__all__ = ["LEADER_KEY", "ControlConnection", "namespace"]

log = logging.getLogger("steerloop.service")

LEADER_KEY = 0
"""The advisory key (in the schema's namespace) whose holder is the sweeper leader."""

_KEY_ATTEMPTS = 32


def namespace(schema: str) -> int:
    """The advisory-lock namespace (first int4 of the two-key form) of a schema's workers.

    Positive, so ``pg_locks.classid`` (an ``oid``) compares to it without sign games.
    """
    return zlib.crc32(f"steerloop-workers:{schema}".encode()) & 0x7FFFFFFF


class ControlConnection:
    """One worker's registration: the ``steerloop_workers`` row, the lock, the listeners.

    Args:
        dsn: the server (what asyncpg gets; no steerloop query options).
        schema: the schema holding steerloop's tables (already migrated).
        worker_id: unique name of this worker process (``application_name`` carries it).
        profiles: profile name → version this worker serves (stored in its row).
        capacity: how many sessions it hosts at most (stored in its row).
        on_lost: called once when the connection is lost (not after ``close()``).
        on_notify: ``(channel, payload)`` for ``steerloop_w_<key>`` and ``steerloop_wake``.
        check_interval: seconds between liveness checks of the connection.
        check_timeout: seconds a check may take before the connection counts as lost.
        connect_timeout: seconds to wait for the server when starting.
    """

    def __init__(
        self,
        dsn: str,
        schema: str,
        *,
        worker_id: str,
        profiles: Mapping[str, int],
        capacity: int,
        on_lost: Callable[[], None],
        on_notify: Callable[[str, str], None],
        check_interval: float = 1.0,
        check_timeout: float = 5.0,
        connect_timeout: float = 5.0,
    ) -> None:
        if not check_interval > 0 or not check_timeout > 0:
            raise ValueError("check_interval and check_timeout must be positive")
        self._pg = asyncpg_module()
        self._dsn = dsn
        self.tables = ServiceTables(schema)
        self.q = Sql(self.tables)
        self.ns = namespace(schema)
        self.worker_id = worker_id
        self._profiles = dict(profiles)
        self._capacity = capacity
        self._on_lost = on_lost
        self._on_notify = on_notify
        self._check_interval = check_interval
        self._check_timeout = check_timeout
        self._connect_timeout = connect_timeout
        self.key = -1
        """The worker's advisory key (``steerloop_workers.key``); set by ``start()``."""
        self.backend_pid = 0
        self.lost = False
        """The connection was lost (``on_lost`` was called); the registration is void."""
        self._conn: Any = None
        self._query_lock = asyncio.Lock()  # asyncpg runs one query at a time per connection
        self._closing = False
        self._stop = asyncio.Event()
        self._checker: asyncio.Task[None] | None = None

    @property
    def application_name(self) -> str:
        return f"steerloop-ctl:{self.worker_id}"[:63]  # the server keeps 63 bytes

    @property
    def channel(self) -> str:
        """This worker's own NOTIFY channel (``steerloop_w_<key>`` in the default schema)."""
        return self.tables.worker_channel(self.key)

    async def start(self) -> None:
        """Connect, take a fresh key's lock, insert the worker row, LISTEN.

        Raises:
            RuntimeError: already started.
            OSError, asyncpg errors: the server could not be reached (nothing is left behind).
        """
        if self._conn is not None:
            raise RuntimeError("the control connection was already started")
        conn = await self._pg.connect(
            dsn=self._dsn,
            timeout=self._connect_timeout,
            server_settings={
                "application_name": self.application_name,
                # The server's side of a half-open connection: probe after 5 s idle, give up
                # after about 11 s, and bound unacknowledged writes the same way.
                "tcp_keepalives_idle": "5",
                "tcp_keepalives_interval": "2",
                "tcp_keepalives_count": "3",
                "tcp_user_timeout": "11000",
            },
        )
        try:
            _tune_socket(conn, user_timeout_ms=int(max(self._check_timeout, 1.0) * 2000))
            self.backend_pid = conn.get_server_pid()
            self.key = await self._register(conn)
            await conn.add_listener(self.tables.worker_channel(self.key), self._notified)
            await conn.add_listener(self.tables.wake_channel, self._notified)
        except BaseException:
            conn.terminate()
            raise
        self._conn = conn
        conn.add_termination_listener(self._terminated)
        self._checker = asyncio.get_running_loop().create_task(
            self._check_loop(), name=f"steerloop-ctl {self.worker_id}"
        )

    async def _register(self, conn: Any) -> int:
        """Pick a random free key: its lock first (so a row never exists without its lock),
        then the row. A key whose row is still there (a dead worker not yet swept) is skipped;
        this worker's own previous row (same ``worker_id``, registering again after a loss)
        is replaced once its lock is gone — its leases and claims still carry the old key,
        so the sweeper revokes them all the same."""
        for _ in range(_KEY_ATTEMPTS):
            key = secrets.randbelow(0x7FFFFFFF) + 1
            if not await conn.fetchval(TRY_LOCK, self.ns, key):
                continue
            async with conn.transaction():
                await conn.execute(
                    self.q.drop_own_dead_row,
                    self.worker_id,
                    self.ns,
                )
                inserted = await conn.fetchval(
                    self.q.insert_worker,
                    key,
                    self.worker_id,
                    socket.gethostname(),
                    os.getpid(),
                    json.dumps(self._profiles),
                    self._capacity,
                )
            if inserted is not None:
                return key
            await conn.fetchval(UNLOCK, self.ns, key)
            taken = await conn.fetchval(self.q.worker_id_taken, self.worker_id)
            if taken:
                raise ValueError(
                    f"worker id {self.worker_id!r} is registered by a live control connection"
                )
        raise RuntimeError(f"no free worker key after {_KEY_ATTEMPTS} attempts")

    async def fetchval(self, query: str, *args: Any, timeout: float | None = None) -> Any:
        """Run one query on the control connection (serialised with the liveness check).

        The sweeper takes its leadership lock through this, so leadership lives exactly as
        long as this connection.

        Raises:
            ConnectionError: the connection is lost or closed.
        """
        conn = self._conn
        if conn is None or self.lost or self._closing:
            raise ConnectionError(f"control connection of {self.worker_id!r} is not usable")
        async with self._query_lock:
            return await conn.fetchval(query, *args, timeout=timeout or self._check_timeout)

    def _notified(self, _conn: Any, _pid: int, channel: str, payload: str) -> None:
        try:
            self._on_notify(channel, payload)
        except Exception:
            log.exception("control connection %s: on_notify failed", self.worker_id)

    def _terminated(self, _conn: Any) -> None:
        self._lose("the connection was closed")

    def _lose(self, why: str) -> None:
        if self.lost or self._closing:
            return
        self.lost = True
        self._stop.set()
        log.warning("control connection %s (key %s) lost: %s", self.worker_id, self.key, why)
        if self._conn is not None and not self._conn.is_closed():
            self._conn.terminate()  # whatever state it is in, it must not hold the lock on
        try:
            self._on_lost()
        except Exception:
            log.exception("control connection %s: on_lost failed", self.worker_id)

    async def _check_loop(self) -> None:
        while not self._stop.is_set():
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self._check_interval):
                    await self._stop.wait()
            if self._stop.is_set():
                return
            try:
                alive = await self.fetchval(self.q.heartbeat, self.key)
            except ConnectionError:
                return  # closing, or already lost
            except Exception as e:  # timeout, socket, server or driver: no answer is no life
                if self._closing:
                    return
                self._lose(f"liveness check failed: {type(e).__name__}: {e}")
                return
            if alive is None:
                self._lose("its worker row was deleted")
                return

    async def close(self) -> None:
        """Unlock, delete the worker row, disconnect (idempotent; never calls ``on_lost``)."""
        if self._closing:
            return
        self._closing = True
        self._stop.set()
        if self._checker is not None:
            with contextlib.suppress(Exception):
                await self._checker
        conn, self._conn = self._conn, None
        if conn is None:
            return
        conn.remove_termination_listener(self._terminated)
        if self.lost or conn.is_closed():
            conn.terminate()
            return
        try:
            async with self._query_lock:
                await conn.execute(self.q.delete_worker, self.key, timeout=self._check_timeout)
                await conn.execute(UNLOCK_ALL, timeout=self._check_timeout)
            await asyncio.wait_for(conn.close(), self._check_timeout)
        except Exception:
            # The server drops the locks with the backend; the sweeper removes the row.
            log.warning("control connection %s: unclean close", self.worker_id, exc_info=True)
        finally:
            conn.terminate()


def _tune_socket(conn: Any, *, user_timeout_ms: int) -> None:
    """Client-side keepalive and ``TCP_USER_TIMEOUT`` (Linux) on asyncpg's socket."""
    transport = getattr(conn, "_transport", None)
    sock = transport.get_extra_info("socket") if transport is not None else None
    if sock is None or sock.family not in (socket.AF_INET, socket.AF_INET6):
        return  # a Unix socket: the peer is on this host, the kernel reports its death
    options = [(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)]
    for name, value in (
        ("TCP_KEEPIDLE", 5),
        ("TCP_KEEPINTVL", 2),
        ("TCP_KEEPCNT", 3),
        ("TCP_USER_TIMEOUT", user_timeout_ms),
    ):
        if hasattr(socket, name):
            options.append((socket.IPPROTO_TCP, getattr(socket, name), value))
    for level, option, value in options:
        with contextlib.suppress(OSError):
            sock.setsockopt(level, option, value)
