"""The host the HTTP app talks to on a PostgreSQL store (roles ``api``, ``worker``, ``all``).

Its API side writes commands and specs (``Commands``) and reads sessions from the tables;
its worker side (``Worker``, roles ``worker`` and ``all``) drives agents. The two sides of
``all`` meet through PostgreSQL exactly as separate processes do.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from ... import Runtime
from ...messages import Block, FileBlock, ImageBlock, block_to_json
from ...session import (
    InputAction,
    InputRequest,
    approval_state,
    pending_approvals,
    pending_inputs,
)
from ...session._json import loads
from ...session.events import SessionEvent
from ...session.store.postgres import PostgresStore
from .._commands import not_waiting
from .._host import ApiError, check_session_id, choose_profile, require_found, shared_fields
from .._inputs_api import checked_answer, input_json
from .._ledger import request_fingerprint
from .._profile import Profile
from .._text import check_text, check_texts
from ._commands import CommandKind, Commands
from ._queue import queued_reason
from ._worker import Worker

__all__ = ["PgHost"]

Role = Literal["all", "api", "worker"]


class PgHost:
    """API and/or worker over one PostgreSQL schema (see the module docstring)."""

    def __init__(
        self,
        rt: Runtime,
        store: PostgresStore,
        profiles: dict[str, Profile],
        role: Role,
        *,
        worker_id: str,
        idle_unload: float | None = 300.0,
        max_unconsumed: int = 100,
        capacity: int = 100,
        drain_timeout: float = 10.0,
    ) -> None:
        self.rt = rt
        self.store = store
        self.profiles = profiles
        self.role = role
        self.worker_id = worker_id
        self._idle_unload = idle_unload
        self._max_unconsumed = max_unconsumed
        self._capacity = capacity
        self._drain_timeout = drain_timeout
        self.commands: Commands | None = None
        self.worker: Worker | None = None
        self._closed = False

    async def start(self) -> None:
        pool = await self.store.pool()
        self.commands = Commands(pool, self.store.tables, max_unconsumed=self._max_unconsumed)
        if self.role in ("worker", "all"):
            self.worker = Worker(
                self.rt,
                self.store,
                self.profiles,
                worker_id=self.worker_id,
                capacity=self._capacity,
                idle_unload=self._idle_unload,
                drain_timeout=self._drain_timeout,
            )
            await self.worker.start()

    async def close(self) -> None:
        self._closed = True
        if self.worker is not None:
            await self.worker.close()

    @property
    def closed(self) -> bool:
        return self._closed

    def _sql(self) -> Commands:
        if self.commands is None:
            raise ApiError(503, "not_ready", "the service is not running")
        return self.commands

    # --- sessions -------------------------------------------------------------------------

    def profile(self, name: str | None) -> Profile:
        return choose_profile(self.profiles, name)

    async def exists(self, session_id: str) -> bool:
        return await self._sql().spec(session_id) is not None

    async def require(self, session_id: str) -> None:
        require_found(session_id, await self.exists(session_id))

    async def create(
        self,
        session_id: str,
        profile: Profile,
        meta: dict[str, Any] | None,
        first: str | tuple[Block, ...] | None,
    ) -> dict[str, Any]:
        check_session_id(session_id)
        check_texts(meta, "meta")
        if isinstance(first, str):
            check_text(first, "input")
        stored = None if first is None else await self._stored_content(first)
        return await self._sql().create(session_id, profile.name, profile.version, meta, stored)

    async def _stored_content(self, content: str | tuple[Block, ...]) -> str | list[Any]:
        """What a command row holds of ``content``: the text, or each block's stored form,
        the bytes of its images and files stored first (durably, by hash: the worker's
        message only references them)."""
        if isinstance(content, str):
            return content
        for block in content:
            if isinstance(block, ImageBlock | FileBlock) and block.data is not None:
                await self.store.put_blob(block.data, block.media_type)
        return [block_to_json(b) for b in content]

    async def send(
        self,
        session_id: str,
        kind: CommandKind,
        content: str | tuple[Block, ...],
        message_id: str | None,
        key: str | None,
        *,
        keep_inbox: bool = False,
        trace: Mapping[str, str] | None = None,
        extra: Mapping[str, Any] | None = None,
        source: Mapping[str, Any] | None = None,
    ) -> dict[str, Any]:
        if isinstance(content, str):
            check_text(content, "content")
        check_text(message_id, "message_id")
        check_text(key, "idempotency_key")
        body: dict[str, Any] = {}
        if kind in ("followup", "steer", "inject"):
            body["content"] = await self._stored_content(content)
            if key is not None:
                body["request"] = request_fingerprint(kind, content, message_id)
        if kind == "cancel":
            body["keep_inbox"] = keep_inbox
        if trace:
            body["trace"] = dict(trace)
        if source:
            body["source"] = dict(source)  # the message's source extras (an MCP prompt's)
        if extra:
            body.update(extra)
        return await self._sql().submit(session_id, kind, body, message_id, key)

    async def status_of(self, session_id: str) -> str:
        """``idle``/``running`` while a worker holds the session, else ``unloaded``."""
        sql = self._sql()
        spec = await sql.spec(session_id)
        if spec is None or await sql.owner(session_id) is None:
            return "unloaded"
        status = spec["status"]
        return status if status in ("idle", "running") else "unloaded"

    async def describe(self, session_id: str) -> dict[str, Any]:
        sql = self._sql()
        spec = await sql.spec(session_id)
        if spec is None:
            raise ApiError(404, "session_not_found", f"no session {session_id!r}")
        owner = await sql.owner(session_id)
        return {
            "session_id": session_id,
            "profile": spec["profile"],
            **await self._status_fields(spec, owner),
            "last_seq": await sql.last_seq(session_id),
            "owner": owner,
            "pending_approvals": [
                approval_json(r) for r in await self.pending_approvals(session_id)
            ],
            "pending_inputs": [input_json(r) for r in await self.pending_inputs(session_id)],
        } | shared_fields(await self._stored_events(session_id))

    async def _status_fields(self, spec: Any, owner: Any) -> dict[str, Any]:
        """``status`` (``idle``/``running`` while a worker holds the session; ``queued``,
        with ``queued_reason``, while its work waits for one; else ``unloaded``)."""
        if owner is not None:
            status = spec["status"]
            return {"status": status if status in ("idle", "running") else "unloaded"}
        sql = self._sql()
        reason = await queued_reason(
            sql.pool, sql.t, sql.ns, spec["session_id"], spec["profile"], spec["profile_version"]
        )
        if reason is None:
            return {"status": "unloaded"}
        return {"status": "queued", "queued_reason": reason}

    async def _stored_events(self, session_id: str) -> tuple[SessionEvent, ...]:
        if not await self.store.exists(session_id):
            return ()
        return await self.store.load(session_id)

    async def log_events(self, session_id: str) -> tuple[SessionEvent, ...]:
        """The session's stored log (the owner may be another process)."""
        return await self._stored_events(session_id)

    async def command(
        self, session_id: str, kind: CommandKind, body: Mapping[str, Any]
    ) -> dict[str, Any]:
        """Queue one AG-UI command (``_agui_input.AGUI_COMMANDS``) behind the others."""
        return await self._sql().submit(session_id, kind, dict(body), None, None)

    async def pending_approvals(self, session_id: str) -> tuple[Any, ...]:
        """The ``tool/approval-requested`` records still waiting, folded from the stored
        log (the owner may be another process: the log is what every node shares)."""
        return pending_approvals(await self._stored_events(session_id))

    async def submit_approval(
        self, session_id: str, call_id: str, decision: str, reason: str | None
    ) -> dict[str, Any]:
        """A decision for a pending call, as the session's next command (``approval``).

        Raises:
            ApiError: 404 when the call waits for no decision, 409 ``ALREADY_DECIDED``
                when it was decided or another decision for it was accepted.
        """
        sql = self._sql()
        events = await self._stored_events(session_id)
        if not any(r.call_id == call_id for r in pending_approvals(events)):
            raise not_waiting(session_id, call_id, approval_state(events, call_id))
        # The check that decides: under the session's row lock, with the decision's insert.
        body = {"call_id": call_id, "decision": decision, "reason": reason}
        return await sql.submit(session_id, "approval", body, None, None)

    async def pending_inputs(self, session_id: str) -> tuple[InputRequest, ...]:
        """The input requests still waiting for an answer, folded from the stored log."""
        return pending_inputs(await self._stored_events(session_id))

    async def submit_input(
        self,
        session_id: str,
        input_id: str,
        action: InputAction,
        content: Mapping[str, Any] | None,
    ) -> dict[str, Any]:
        """An answer to a pending input request, checked against the requested schema, as
        the session's next command (``input``).

        Raises:
            ApiError: 404 when the input is not pending, 409 ``ALREADY_DECIDED`` when it
                was answered or another answer to it was accepted, 422 ``invalid_answer``.
        """
        events = await self._stored_events(session_id)
        checked = checked_answer(
            session_id, events, pending_inputs(events), input_id, action, content
        )
        # The check that decides: under the session's row lock, with the answer's insert.
        body = {"id": input_id, "action": action, "content": checked}
        return await self._sql().submit(session_id, "input", body, None, None)

    async def listing(self) -> list[dict[str, Any]]:
        return await self._sql().listing()

    async def last_seq(self, session_id: str) -> int:
        return await self._sql().last_seq(session_id)

    async def events_after(self, session_id: str, after: int, limit: int) -> list[dict[str, Any]]:
        """Committed events with seq > ``after`` in their stored JSON form."""
        sql = self._sql()
        rows = await sql.pool.fetch(
            f"SELECT payload FROM {sql.t.events} WHERE session_id = $1 AND seq > $2 "
            "ORDER BY seq LIMIT $3",
            session_id,
            after,
            limit,
        )
        return [loads(row["payload"]) for row in rows]


def approval_json(request: Any) -> dict[str, Any]:
    """A pending approval as ``GET /v1/sessions/{id}`` lists it."""
    return {
        "call_id": request.call_id,
        "name": request.name,
        "arguments": request.arguments,
        "reason": request.reason,
    }
