"""The in-process command path of a ``--role all`` host (SQLite, memory): each session's
commands are applied one at a time in arrival order, and a command is answered only once
what it wrote is durable.

That answer is the contract (issue 24): a 2xx means the command — with its idempotency key
and message id — is in the stored log, so a process killed right after it loses nothing
acknowledged, and a client retrying after a restart is recognised from the log alone
(``_ledger.Ledger``): the same key and request → the first answer, the same key and another
request → 409 ``IDEMPOTENCY_KEY_REUSED``, a message id the session already holds → 409
``MESSAGE_ID_REUSED``. The checks run where the command is applied, in order, so two
requests racing with one key (or one id, or two decisions for one call) meet one after the
other: exactly one applies.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from .. import CancelCause
from ..agent import Agent
from ..errors import ApprovalError, InputError
from ..ids import new_id
from ..messages import Block, MessageSource, user_message
from ..session import approval_state
from ._agui_commands import apply_command
from ._errors import ApiError, to_api_error
from ._inputs_api import INPUT_BY, input_not_waiting
from ._ledger import HTTP_SOURCE, Ledger, request_fingerprint
from ._trace import continue_caller_trace

__all__ = ["APPROVAL_BY", "CommandKind", "LocalCommands"]

log = logging.getLogger("steerloop.service")

CommandKind = Literal[
    "followup",
    "steer",
    "inject",
    "cancel",
    "approval",
    "client_tools",
    "client_result",
    "state",
    "input",
]
"""The HTTP commands, and the AG-UI ones (``_agui_commands.AGUI_COMMANDS``: a body each)."""
APPROVAL_BY = "http"
"""``tool/approval-decided.by`` of a decision that came over HTTP."""

Applied = tuple[dict[str, Any], int]
"""A command's answer and the seq through which the log must be durable before it is sent."""


@dataclass(slots=True, kw_only=True)
class Command:
    kind: CommandKind
    content: str | tuple[Block, ...] = ""  # blocks: a message with images or files
    message_id: str | None = None  # as the client gave it
    key: str | None = None
    keep_inbox: bool = False
    trace: Mapping[str, str] | None = None  # traceparent/tracestate of the request
    call_id: str | None = None  # kind "approval": the call decided, the decision, the reason
    decision: Literal["allow", "deny"] | None = None
    body: Mapping[str, Any] | None = None  # the AG-UI kinds' (``_agui_input``)
    answer: Mapping[str, Any] | None = None  # kind "input": {"id", "action", "content"}
    source: Mapping[str, Any] | None = None  # a message's source extras (an MCP prompt's)
    done: asyncio.Future[Applied] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future()
    )


@dataclass(slots=True)
class _Queue:
    """One session's commands waiting to be applied, and those applied but not yet durable."""

    pending: deque[Command] = field(default_factory=deque)
    applying: bool = False
    settling: int = 0
    drain: asyncio.Task[None] | None = None
    next_cmd_seq: int = 1

    @property
    def unconsumed(self) -> int:
        return len(self.pending) + (1 if self.applying else 0) + self.settling


class LocalCommands:
    """Accepts, applies and acknowledges the commands of the sessions one process drives.

    ``load`` gives the live agent of a session (resumed when unloaded); ``durable`` returns
    once that session's log is stored through a seq.
    """

    def __init__(
        self,
        load: Callable[[str], Awaitable[Agent]],
        durable: Callable[[str, Agent, int], Awaitable[None]],
        *,
        max_unconsumed: int,
    ) -> None:
        self._load = load
        self._durable = durable
        self.max_unconsumed = max_unconsumed
        self._queues: dict[str, _Queue] = {}
        self._ledgers: dict[str, tuple[Agent, Ledger]] = {}
        self.closed = False

    def unconsumed(self, session_id: str) -> int:
        queue = self._queues.get(session_id)
        return 0 if queue is None else queue.unconsumed

    def forget(self, session_id: str) -> None:
        """The session was unloaded: its ledger is rebuilt from the log at the next load."""
        self._ledgers.pop(session_id, None)

    def drains(self) -> list[asyncio.Task[None]]:
        return [q.drain for q in self._queues.values() if q.drain is not None]

    async def submit(self, session_id: str, command: Command) -> dict[str, Any]:
        """Queue ``command`` behind the session's earlier ones; answer once it is applied
        and durable.

        Raises:
            ApiError: 503 while shutting down, 429 past ``max_unconsumed``, or the
                command's own refusal (409, 404, a load that failed).
        """
        if self.closed:
            raise ApiError(503, "shutting_down", "the service is shutting down")
        queue = self._queues.get(session_id)
        if queue is None:
            queue = self._queues[session_id] = _Queue()
        if queue.unconsumed >= self.max_unconsumed:
            raise ApiError(
                429,
                "too_many_commands",
                f"session {session_id!r} has {queue.unconsumed} commands not yet applied",
                {"Retry-After": "1"},
            )
        queue.pending.append(command)
        if queue.drain is None or queue.drain.done():
            queue.drain = asyncio.get_running_loop().create_task(
                self._drain(session_id, queue), name=f"steerloop-commands {session_id}"
            )
        try:
            answer, seq = await asyncio.shield(command.done)
        except asyncio.CancelledError:
            command.done.add_done_callback(lambda done: _release(queue, done))
            raise
        try:
            agent, _ledger = self._ledgers[session_id]
            await self._durable(session_id, agent, seq)
        finally:
            queue.settling -= 1  # counted from its application (``_drain``)
        return answer

    async def _drain(self, session_id: str, queue: _Queue) -> None:
        while queue.pending and not self.closed:
            command = queue.pending.popleft()
            queue.applying = True
            try:
                agent = await self._load(session_id)
            except Exception as exc:
                # Nothing of what waits here is stored: refuse it all rather than keep it
                # queued in memory (a 2xx would promise what a restart loses).
                error = to_api_error(exc)
                if error is None:
                    log.exception("session %s: not loaded", session_id)
                    error = ApiError(503, "not_loaded", f"session {session_id!r} did not load")
                _settle(command.done, error)
                while queue.pending:
                    _settle(queue.pending.popleft().done, error)
                queue.applying = False
                return
            try:
                result = self._apply(session_id, queue, agent, command)
            except Exception as exc:
                error = to_api_error(exc)
                if error is None:
                    log.exception("session %s: a %s command failed", session_id, command.kind)
                    error = ApiError(500, "command_failed", f"the {command.kind} failed: {exc}")
                _settle(command.done, error)
            else:
                # Applied, not yet durable: it still counts (the session is not idle) until
                # its request has waited for the log.
                queue.settling += 1
                command.done.set_result(result)
            finally:
                queue.applying = False
        while queue.pending:  # closed meanwhile
            _settle(queue.pending.popleft().done, ApiError(503, "shutting_down", "shutting down"))

    def ledger(self, session_id: str, agent: Agent) -> Ledger:
        """The session's ledger, folded through its last event."""
        held = self._ledgers.get(session_id)
        if held is None or held[0] is not agent:
            held = self._ledgers[session_id] = (agent, Ledger())
        return held[1].see(agent.session.events)

    def _apply(self, session_id: str, queue: _Queue, agent: Agent, command: Command) -> Applied:
        ledger = self.ledger(session_id, agent)
        if command.body is not None:
            try:
                apply_command(agent, command.kind, command.body)
            except ValueError as exc:
                # As on PostgreSQL: a command that no longer applies (an answer for a call
                # that stopped waiting) changes nothing and does not stop the ones after it.
                log.info("session %s: %s not applied: %s", session_id, command.kind, exc)
            return {"cmd_seq": _next(queue, ledger)}, agent.session.next_seq - 1
        if command.kind == "approval":
            return self._decide(agent, queue, command)
        if command.kind == "input":
            return self._answer(agent, queue, command)
        if command.kind == "cancel":
            agent.cancel(CancelCause.user(), keep_inbox=command.keep_inbox)
            return {"cmd_seq": _next(queue, ledger)}, agent.session.next_seq - 1
        request = request_fingerprint(command.kind, command.content, command.message_id)
        if command.key is not None and command.key in ledger.keys:
            seen = ledger.keys[command.key]
            if seen.request != request:
                raise ApiError(
                    409,
                    "IDEMPOTENCY_KEY_REUSED",
                    f"idempotency key {command.key!r} was used for another request",
                )
            return seen.answer, seen.seq
        if command.message_id is not None and command.message_id in ledger.message_ids:
            raise ApiError(
                409,
                "MESSAGE_ID_REUSED",
                f"session {session_id!r} already holds message {command.message_id!r}",
            )
        cmd_seq = _next(queue, ledger)
        record: dict[str, Any] = {"cmd_seq": cmd_seq}
        if command.key is not None:
            record |= {"idempotency_key": command.key, "request": request}
        message = user_message(
            command.content,
            id=command.message_id or new_id("msg"),
            source=MessageSource(extra={HTTP_SOURCE: record, **(command.source or {})}),
        )
        continue_caller_trace(agent, command.trace, message.id)
        if command.kind == "followup":
            agent.followup(message)
        elif command.kind == "steer":
            agent.steer(message)
        else:
            agent.inject(message)
        ledger.see(agent.session.events)
        return {"cmd_seq": cmd_seq, "message_id": message.id}, agent.session.next_seq - 1

    def _decide(self, agent: Agent, queue: _Queue, command: Command) -> Applied:
        call_id, decision = command.call_id, command.decision
        assert call_id is not None and decision is not None and isinstance(command.content, str)
        try:
            seq = agent.decide_approval(
                call_id, decision, reason=command.content or None, by=APPROVAL_BY
            )
        except ApprovalError:
            state = approval_state(agent.session.events, call_id)
            raise not_waiting(agent.id, call_id, state) from None
        return {"cmd_seq": _next(queue, self.ledger(agent.id, agent))}, seq

    def _answer(self, agent: Agent, queue: _Queue, command: Command) -> Applied:
        assert command.answer is not None
        input_id = command.answer["id"]
        try:
            seq = agent.answer_input(
                input_id, command.answer["action"], command.answer["content"], by=INPUT_BY
            )
        except InputError as exc:  # answered or closed since it was checked
            raise input_not_waiting(agent.id, input_id, exc.state) from None
        except ValueError as exc:
            raise ApiError(422, "invalid_answer", str(exc)) from None
        return {"cmd_seq": _next(queue, self.ledger(agent.id, agent))}, seq


def not_waiting(session_id: str, call_id: str, state: str) -> ApiError:
    """The answer to a decision for a call that waits for none: 409 when it was decided,
    else 404."""
    if state == "decided":
        return ApiError(409, "ALREADY_DECIDED", f"call {call_id!r} was already decided")
    return ApiError(
        404, "approval_not_found", f"session {session_id!r} has no pending call {call_id!r}"
    )


def _next(queue: _Queue, ledger: Ledger) -> int:
    """The next ``cmd_seq``: after the last one given here and the last one the log records."""
    cmd_seq = max(queue.next_cmd_seq, ledger.last_cmd_seq + 1)
    queue.next_cmd_seq = cmd_seq + 1
    return cmd_seq


def _release(queue: _Queue, done: asyncio.Future[Applied]) -> None:
    """The request of an applied command went away: it no longer counts."""
    if not done.cancelled() and done.exception() is None:
        queue.settling -= 1


def _settle(done: asyncio.Future[Applied], error: ApiError) -> None:
    if not done.done():
        done.set_exception(error)
