"""Applying a resident session's commands: the rows past what was applied, in ``cmd_seq``
order, each read back as a command (``_commands.parse_command``) and applied with the one
``_commands.apply`` both hosts use.

Exactly once with respect to the log: a followup/steer/inject (or a decision) writes its
event synchronously, and the row's consumption is *attached* to that event
(``writer.attach``), so both commit in one fenced batch or neither does; a message id
already in the log is only marked consumed. A cancel or an AG-UI command is consumed by a
fenced update first, then applied (at most once). A row that is no command, or that the
agent refuses, is consumed with its ``error`` recorded: never silently, and the commands
after it still apply.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from ...errors import ApprovalError, InputError, SessionConflictError, SessionPersistenceError
from ...session.store.postgres import PostgresStore
from ...session.store.postgres._writer import PostgresWriter
from .._commands import (
    Answer,
    CommandError,
    Decide,
    Followup,
    Inject,
    Steer,
    apply,
    parse_command,
)
from ._residents import Resident, Residents

__all__ = ["CommandApplier"]

log = logging.getLogger("steerloop.service")

_PAGE = 100
"""Command rows read at a time."""


class CommandApplier:
    """Applies the commands of one worker's resident sessions (one task per session)."""

    def __init__(
        self,
        residents: Residents,
        store: PostgresStore,
        *,
        worker_id: str,
        clock: Callable[[], float],
        stopped: Callable[[], bool],
        drop: Callable[[str], Awaitable[None]],
    ) -> None:
        self._residents = residents
        self._store = store
        self._q = residents.q
        self._worker_id = worker_id
        self._clock = clock
        self._stopped = stopped  # leaving or fenced: apply nothing more
        self._drop = drop  # unload a session this worker must not drive any more

    def schedule(self, session_id: str) -> None:
        """Commands may wait for ``session_id``: apply them (a task, if none runs)."""
        resident = self._residents.get(session_id)
        if resident is None:
            return
        resident.dirty = True
        if resident.drain is None or resident.drain.done():
            resident.drain = asyncio.get_running_loop().create_task(
                self._run(session_id, resident), name=f"steerloop-drain {session_id}"
            )

    def tasks(self) -> list[asyncio.Task[None]]:
        return [r.drain for _, r in self._residents.items() if r.drain is not None]

    async def recheck(self) -> None:
        """A lost NOTIFY must not leave a command of a resident session waiting: one query
        finds the residents with unconsumed commands beyond what this worker applied."""
        residents = self._residents.items()
        if not residents:
            return
        rows = await self._residents.pool.fetch(
            self._q.unapplied,
            [sid for sid, _ in residents],
            [r.applied_upto for _, r in residents],
        )
        for row in rows:
            self.schedule(row["session_id"])

    async def _run(self, session_id: str, resident: Resident) -> None:
        pool = self._residents.pool
        while resident.dirty and not self._stopped():
            resident.dirty = False
            if self._residents.get(session_id) is not resident:
                return
            try:
                rows = await pool.fetch(
                    self._q.unconsumed_page, session_id, resident.applied_upto, _PAGE
                )
                for row in rows:
                    if self._residents.get(session_id) is not resident or self._stopped():
                        return
                    await self._apply(session_id, resident, row)
                    resident.applied_upto = row["cmd_seq"]
                    resident.idle_since = self._clock()
                if len(rows) == _PAGE:
                    resident.dirty = True
            except SessionPersistenceError as exc:
                # The lease is gone (fenced) or the store failed: this worker must not
                # drive the session any more; whoever owns it now applies.
                log.warning("worker %s: dropping %s: %s", self._worker_id, session_id, exc)
                await self._drop(session_id)
                return
            except Exception:
                log.exception("worker %s: draining %s failed", self._worker_id, session_id)
                return

    async def _apply(self, session_id: str, resident: Resident, row: Any) -> None:
        writer = self._store.writer(session_id)
        if writer is None or writer.error is not None:
            raise SessionConflictError(f"session {session_id!r}: no usable writer")
        cmd_seq = row["cmd_seq"]
        try:
            command = parse_command(row["kind"], row["message_id"], json.loads(row["body"]))
        except CommandError as exc:
            log.error("session %s: command %d is no command: %s", session_id, cmd_seq, exc)
            await self._consume(session_id, cmd_seq, writer, error=str(exc))
            return
        match command:
            case Followup() | Steer() | Inject() | Decide() | Answer():
                await self._apply_logged(session_id, resident, writer, cmd_seq, command)
            case _:
                # At most once (a cancel, an AG-UI command): consumed (fenced) first.
                if await self._consume(session_id, cmd_seq, writer):
                    try:
                        apply(resident.agent, command)
                    except ValueError as exc:
                        log.info("session %s: command %d refused: %s", session_id, cmd_seq, exc)
                        await self._residents.pool.execute(
                            self._q.record_error, session_id, cmd_seq, str(exc)
                        )

    async def _apply_logged(
        self,
        session_id: str,
        resident: Resident,
        writer: PostgresWriter,
        cmd_seq: int,
        command: Followup | Steer | Inject | Decide | Answer,
    ) -> None:
        """A command that writes one event (a splice, a decision, an answer): its consumption rides
        on that event's batch. A message id already in the log is only marked consumed."""
        message_id = getattr(command, "message_id", None)
        if message_id is not None and message_id in resident.message_ids():
            await self._consume(session_id, cmd_seq, writer)
            return
        try:
            seq = apply(resident.agent, command)
        except SessionPersistenceError:
            raise
        except (ValueError, ApprovalError, InputError) as exc:  # refused, or no longer waiting
            log.info("session %s: command %d not applied: %s", session_id, cmd_seq, exc)
            await self._consume(session_id, cmd_seq, writer, error=str(exc))
            return
        assert seq is not None  # a splice or a decision: written synchronously
        if message_id is not None:
            resident.seen_ids.add(message_id)
        try:
            writer.attach(seq, self._q.consume, session_id, cmd_seq, seq)
        except ValueError:  # its batch already took the event: consume on its own
            await self._consume(session_id, cmd_seq, writer)

    async def _consume(
        self, session_id: str, cmd_seq: int, writer: PostgresWriter, *, error: str | None = None
    ) -> bool:
        """Mark one command consumed (with the ``error`` it met, if any) only while this
        writer's lease is current."""
        done = await self._residents.pool.fetchval(
            self._q.consume_fenced, session_id, cmd_seq, writer.lease_id, writer.token, error
        )
        return done is not None
