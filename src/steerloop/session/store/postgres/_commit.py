"""The PostgreSQL store's writing side: its writer task drives the shared group committer
(``store._group``), and each batch commits in one fenced transaction.

* **Group commit.** ``EventSink.write`` is synchronous: it queues the event and wakes the
  store's single writer task, which hands everything queued (for every session of the store)
  to ``commit_batch`` as one transaction. ``flush`` is a barrier on that queue; ``close`` is
  a last barrier after which the task gives the lease back. A commit that fails fails the
  writers of that batch for good (``SessionStorageError``, or ``SessionConflictError`` for a
  refused fence): their next write raises at once, the stored log stays a valid prefix, and
  resume repair continues from there.
* **Fencing.** The batch transaction first fences the leases of its writers (``PgLeases``):
  an owner whose lease was taken over matches no row, so nothing of its batch is stored.
  Row locks on the lease row order a commit and a takeover: whichever commits first wins.
* **Riders** run in a savepoint with the batch that stores their seq; a failing one fails
  its writer and its events of the batch with it.
* **Notify.** With ``notify=True``, one ``pg_notify('steerloop_feed', …)`` per batch inside
  its transaction: delivered at commit, and only if the batch commits.
* **Heartbeat.** Between batches the task renews the leases of its open writers every third
  of the TTL; a lease found taken over fences its writer.
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import time
from typing import Any

from ....errors import SessionConflictError, SessionPersistenceError, SessionStorageError
from .._group import Barrier, Batch, Fence, GroupCommitter, Op, Unit, Waiter
from .._interface import encode_header
from ._lease import PgLeases
from ._notify import feed_payloads
from ._pool import Connected
from ._writer import PostgresWriter

__all__ = ["GroupCommit"]


class GroupCommit(Connected):
    """The writers of a store, its operation queue, its writer task and batch commit."""

    def __init__(self, url: str, **options: Any) -> None:
        super().__init__(url, **options)
        self._leases = PgLeases(self)
        self._writers: dict[str, PostgresWriter] = {}
        self._by_key: dict[int, PostgresWriter] = {}
        self._keys = 0
        # Group commit: operations in order, drained by the writer task (``_run``).
        self._group = GroupCommitter(self.url)
        self._ops: builtins.list[Op] = []
        self._inflight: builtins.list[Op] = []  # the batch being committed
        self._wake: asyncio.Event | None = None
        self._task: asyncio.Task[None] | None = None
        self._stopping = False
        self._commits = 0

    def writer(self, session_id: str) -> PostgresWriter | None:
        """The open write handle of ``session_id`` in this store, if any (for ``attach``)."""
        return self._writers.get(session_id)

    @property
    def commits(self) -> int:
        """Batch transactions committed so far (group commit makes this < events written)."""
        return self._commits

    # --- the writer task --------------------------------------------------------------------

    def _ensure_task(self, loop: asyncio.AbstractEventLoop) -> None:
        if self._task is None:
            self._wake = asyncio.Event()
            self._task = loop.create_task(self._run(), name=f"steerloop-postgres {self.url}")
            self._task.add_done_callback(self._task_ended)
        assert self._wake is not None
        self._wake.set()  # start heartbeats for the new lease

    def _enqueue(self, op: Op) -> None:
        self._ops.append(op)
        if self._wake is not None:
            self._wake.set()

    def _check_task(self) -> None:
        if self._task is None or self._task.done():
            raise SessionStorageError(f"PostgreSQL store {self.url}: the writer task is gone")

    async def _barrier(self, key: int) -> None:
        """Return once everything queued so far was committed (or refused); raise the
        writer's failure."""
        self._check_task()
        waiter = Waiter()
        self._enqueue(Barrier(key, waiter))
        await waiter.future

    async def _fence(self, key: int, session_id: str) -> None:
        """A barrier whose commit also fences the writer's lease (``Fence``)."""
        self._check_task()
        waiter = Waiter()
        self._enqueue(Fence(key, session_id, waiter))
        await waiter.future

    def _task_ended(self, task: asyncio.Task[None]) -> None:
        error = None if task.cancelled() else task.exception()
        message = f"PostgreSQL store {self.url}: the writer task ended ({error!r})"
        if not self._stopping:  # nothing more will be committed: every write must fail
            for writer in self._writers.values():
                writer.fail(
                    SessionStorageError,
                    f"{message}; session {writer.session_id!r} takes no more writes",
                )
        ops, self._ops = self._inflight + self._ops, []
        self._inflight = []
        self._group.abandon(ops, SessionStorageError(message))
        self._group.drop_releases()  # nobody runs them now: those leases expire instead
        self._group.deliver()

    async def _run(self) -> None:
        """The store's writer task (the group-commit driver of PostgreSQL): group commits,
        and lease heartbeats between them."""
        assert self._wake is not None
        loop = asyncio.get_running_loop()
        group = self._group
        interval = self.lease_ttl / 3
        next_beat = loop.time() + interval
        while True:
            if not self._ops and not self._stopping:
                timeout = max(0.0, next_beat - loop.time()) if self._writers else None
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(timeout):
                        await self._wake.wait()
            self._wake.clear()
            if self._ops:
                ops, self._ops = self._ops, []
                self._inflight = ops
                try:
                    batch = group.plan(ops)
                    group.finish(batch, await self.commit_batch(batch))
                except Exception as exc:  # a bug must fail this batch, not end the task
                    group.abandon(ops, exc)
                await group.released()  # a close returns after its lease is given back
                self._inflight = []
                group.deliver()
            if self._writers and loop.time() >= next_beat:
                await self._renew()
                next_beat = loop.time() + interval
            if self._stopping and not self._ops:
                return

    # --- one batch --------------------------------------------------------------------------

    async def commit_batch(self, batch: Batch) -> str | None:
        """One transaction for the whole batch; a refused fence drops only that session."""
        units = {key: unit for key, unit in batch.units.items() if key in self._by_key}
        if not units:
            return None
        lost: builtins.list[int] = []
        sent = time.monotonic()  # before the transaction whose now() renews the leases
        try:
            pool = await self._acquire_pool()
            with self._errors("committing events"):
                async with pool.acquire() as conn, conn.transaction():
                    lost = await self._commit_in(conn, units)
            self._commits += 1
            for key in units:
                if key not in lost:  # fenced in a committed transaction: renewed
                    self._by_key[key]._lease.confirmed(sent, self.lease_ttl)
        except SessionPersistenceError as exc:
            for key in units:
                if key not in lost:
                    self._group.fail(key, (type(exc), str(exc)))
        except Exception as exc:  # a bug must fail this batch, not end the writer task
            for key in units:
                self._group.fail(
                    key, (SessionStorageError, f"committing to {self.url} failed: {exc!r}")
                )
        for key in lost:
            self._by_key[key].lose()
        for key in units:  # ran (with their events) or lost with them
            writer = self._by_key.get(key)
            if writer is not None and writer._riders:
                top = writer._planned
                failed = writer.error is not None
                writer._riders = [] if failed else [r for r in writer._riders if r[0] > top]
        return None

    async def _commit_in(self, conn: Any, units: dict[int, Unit]) -> builtins.list[int]:
        """The body of a batch transaction; returns the writers whose fence was refused."""
        t = self._tables
        writers = {key: self._by_key[key] for key in units}
        fenced = await self._leases.fence(conn, [w._lease for w in writers.values()])
        lost = [key for key, w in writers.items() if w.session_id not in fenced]
        live = [key for key, w in writers.items() if w.session_id in fenced]
        for key in live:
            top = units[key].last_seq()
            if top is not None:
                writers[key]._planned = max(writers[key]._planned, top)
        live = [key for key in live if await self._run_riders(conn, writers[key])]
        fresh: builtins.list[tuple[int, dict[str, Any]]] = []  # new sessions and headers
        for key in live:
            publish = units[key].publish
            if publish is not None and publish.header is not None:
                fresh.append((key, publish.header))
        if fresh:
            created = await conn.fetch(
                f"INSERT INTO {t.sessions} (session_id, header) "
                "SELECT * FROM unnest($1::text[], $2::json[]) "
                "ON CONFLICT DO NOTHING RETURNING session_id",
                [units[key].session_id for key, _ in fresh],
                [encode_header(header) for _, header in fresh],
            )
            clash = {units[key].session_id for key, _ in fresh} - {row[0] for row in created}
            for key in live:
                if units[key].session_id in clash:
                    self._group.fail(
                        key,
                        (
                            SessionConflictError,
                            f"session {units[key].session_id!r} was stored in {self.url} by "
                            "someone else since its writer was opened",
                        ),
                    )
            live = [key for key in live if units[key].session_id not in clash]
        live = await self._store_blobs(conn, units, live)
        sids: builtins.list[str] = []
        seqs: builtins.list[int] = []
        texts: builtins.list[str] = []
        for key in live:
            unit = units[key]
            if unit.publish is not None:
                for seq, text in unit.publish.rows:
                    sids.append(unit.session_id)
                    seqs.append(seq)
                    texts.append(text)
            for sid, seq, text in unit.rows:
                sids.append(sid)
                seqs.append(seq)
                texts.append(text)
        if sids:
            await conn.execute(t.insert_events, sids, seqs, texts)
            if self.notify:
                # Delivered at commit, and only if the batch commits: a refused fence or a
                # failed transaction announces nothing.
                tops: dict[str, int] = {}
                for sid, seq in zip(sids, seqs, strict=True):
                    tops[sid] = max(seq, tops.get(sid, 0))
                for payload in feed_payloads(tops):
                    await conn.execute("SELECT pg_notify($1, $2)", t.feed_channel, payload)
        return lost

    async def _store_blobs(
        self, conn: Any, units: dict[int, Unit], live: builtins.list[int]
    ) -> builtins.list[int]:
        """Store the blobs of the live units and their sessions' references, before the
        events; a writer that references a blob the schema does not hold is failed (its
        events are not stored). Returns the writers still live."""
        t = self._tables
        carried = [key for key in live if units[key].blobs]
        if not carried:
            return live
        puts = {p.hash: p for key in carried for p in units[key].blobs if p.data is not None}
        if puts:
            await conn.execute(
                t.insert_blobs,
                list(puts),
                [p.media_type for p in puts.values()],
                [p.data for p in puts.values()],
            )
        wanted = {p.hash for key in carried for p in units[key].blobs}
        held = {row[0] for row in await conn.fetch(t.held_blobs, list(wanted))}
        sids: builtins.list[str] = []
        hashes: builtins.list[str] = []
        for key in carried:
            unit = units[key]
            missing = [p.hash for p in unit.blobs if p.hash not in held]
            if missing:
                self._group.fail(
                    key,
                    (
                        SessionStorageError,
                        f"session {unit.session_id!r}: blob {missing[0]} is referenced but "
                        f"not stored in {self.url}; the events that reference it are not "
                        "stored and the session takes no more writes",
                    ),
                )
                continue
            for put in unit.blobs:
                sids.append(unit.session_id)
                hashes.append(put.hash)
        if sids:
            await conn.execute(t.insert_blob_refs, sids, hashes)
        failed = self._group.failed
        return [key for key in live if key not in failed]

    async def _run_riders(self, conn: Any, writer: PostgresWriter) -> bool:
        """Run the statements attached to the events of ``writer`` this batch commits, in a
        savepoint: a failing one fails that writer (its events of this batch are not stored
        either, so event and statement stay together). Returns whether the writer is kept."""
        due = [r for r in writer._riders if r[0] <= writer._planned]
        if not due:
            return True
        try:
            async with conn.transaction():  # a savepoint inside the batch transaction
                for _seq, sql, args in due:
                    await conn.execute(sql, *args)
        except self._pg.PostgresError as exc:
            writer.fail(
                SessionStorageError,
                f"session {writer.session_id!r}: a statement attached to seq {due[0][0]} "
                f"failed: {type(exc).__name__}: {self._url.scrub(str(exc))}",
            )
            return False
        return True

    # --- leases of the open writers ---------------------------------------------------------

    async def _renew(self) -> None:
        """Heartbeat: extend this store's leases; a lease found taken over fences its writer."""
        held = [w for w in self._writers.values() if w.error is None]
        if not held:
            return
        sent = time.monotonic()
        try:
            renewed = await self._leases.renew([w._lease for w in held])
        except Exception:
            return  # transient: a lease that really expires is caught by the next fence
        for w in held:
            if w.session_id not in renewed:
                w.lose()
            else:
                w._lease.confirmed(sent, self.lease_ttl)

    async def _release(self, writer: PostgresWriter) -> None:
        if self._writers.get(writer.session_id) is writer:
            del self._writers[writer.session_id]
        self._by_key.pop(writer.key, None)
        await writer._lease.release()  # nothing once lost: the lease is not ours any more
