"""The agent: sends with wake latching, cancel, ``when_idle``, maintenance, drivers.

The phase, the activity, its abort controller, the wake latch and the lifecycle live in one
``PhaseMachine`` (``agent.phase``, ``_phase.py``), whose methods refuse invalid transitions.
When an activity converges, a latched wake relays to a new driver *before* the old
activity's future resolves, so ``when_idle`` follows the relay.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any, Literal, TypeVar, overload

from .._cancel import CancelCause
from .._owned import RuntimeOwned
from .._signal import AbortSignal
from ..messages import UserMessage
from ..session._events import ApprovalRequested, SessionEvent, TurnEnd, TurnEndReason
from ..session._input_events import InputAction, InputRequest
from ..session._repair import plan_repair
from ..session._waits import WaitingStep
from ._approvals import Approvals, Decision
from ._attachments import check_limits
from ._client_calls import ClientCalls
from ._decisions import CompactPayload, ErrorPayload, StatusPayload
from ._handles import AGENT_COMPACT, AGENT_ERROR, STATUS
from ._inbox import Inbox, InboxTarget, fold_inbox
from ._inputs import Inputs
from ._options import AgentOptions
from ._phase import PhaseMachine
from ._request import RequestBuilder
from ._run import DEFAULT_OUTPUT_RETRIES, DEFAULT_STREAM_BUFFER, TurnResult, TurnStream, run, stream
from ._state import SharedState

if TYPE_CHECKING:
    from ..session._session import Session
    from ..tools._agent_ref import AgentRef
    from ._services import LoopServices

__all__ = ["Agent", "live_agent"]

_log = logging.getLogger("steerloop")
T = TypeVar("T")


class Agent(metaclass=RuntimeOwned):
    """A live agent over one session. Create it with ``rt.agents.create``."""

    owned_hint = "use `await rt.agents.create(...)` (or `resume` / `restore_or_create`)"

    def __init__(
        self,
        services: LoopServices,
        session: Session,
        options: AgentOptions,
        *,
        parent: Agent | None = None,
        meta: dict[str, Any] | None = None,
        pending: Mapping[str, list[UserMessage]] | None = None,
        host: object = None,
        waiting: WaitingStep | None = None,
    ) -> None:
        self.id = session.id
        self.session = session
        self.options = options
        self.parent = parent
        self.meta = dict(meta or {})
        self._host = host
        self.services = services  # what the loop uses (the agent layer never sees the runtime)
        if pending is None:  # a resumed inbox is the fold of its splices
            pending = fold_inbox(session.events)
        self.inbox = Inbox._create(
            session, self.services.hooks, self, pending["next-turn"], pending["next-step"]
        )
        # The factory (publish, dispose) and the driver (next turn, converge) move it.
        self.phase = PhaseMachine(
            start_driver=self._start_driver,
            has_pending=lambda: self.inbox.has_pending,
            on_status=self._status_changed,
        )
        self._abandoned = False  # a dispose timeout left the running activity behind
        # Owns the request-header cache.
        self._requests = RequestBuilder(session, options, services.ids)
        self._driver_tasks: set[asyncio.Task[None]] = set()
        self.approvals = Approvals(session)  # calls held for a person's decision
        self.inputs = Inputs(session)  # what tools' servers asked a person during a call
        # calls waiting for a client's result (AG-UI frontend tools)
        self.client_calls = ClientCalls(self.id, session, services.tools)
        self._state = SharedState(session)
        # The step a crashed process left waiting durably (restore repair kept its turn
        # open): the first driver takes it up instead of opening a turn (``_waits``).
        self._waiting = waiting

    def __repr__(self) -> str:
        return f"<Agent {self.id} {self.phase.phase}>"

    @property
    def status(self) -> Literal["idle", "running"]:
        return self.phase.status

    @property
    def runtime(self) -> object:
        """What created the agent (the ``Runtime``), opaque to this layer: plugins that
        need the runtime check its type; the loop uses ``services``."""
        return self._host

    # --- sending ---------------------------------------------------------------------

    def followup(self, message: UserMessage) -> int:
        """Queue ``message`` for the next turn and wake the agent; returns the seq of the
        ``agent/inbox/spliced`` written, synchronously, by this call."""
        return self.send(message, "next-turn", True)

    def steer(self, message: UserMessage) -> int:
        """Queue ``message`` for the next step and wake the agent; returns the splice's seq."""
        return self.send(message, "next-step", True)

    def inject(self, message: UserMessage) -> int:
        """Queue ``message`` for the next step without waking the agent; returns the
        splice's seq."""
        return self.send(message, "next-step", False)

    def send(self, message: UserMessage, target: InboxTarget, wakeup: bool) -> int:
        """Insert ``message`` into ``target``; with ``wakeup``, start or latch a driver.
        Returns the seq of the ``agent/inbox/spliced`` that inserted it.

        Raises:
            RuntimeError: the agent is disposed, or unpublished and ``wakeup`` is set.
            ValueError: a bad target or message, or a message id that is already pending.
        """
        phase = self.phase
        if phase.disposed:
            raise RuntimeError(f"agent {self.id!r} is disposed")
        if wakeup and not phase.published:
            raise RuntimeError("setup composes, it does not drive: the agent is not published yet")
        if not isinstance(message, UserMessage):
            raise ValueError(f"send() takes a UserMessage, not {type(message).__name__}")
        check_limits(message, self.services.limits.attachments)
        if target not in ("next-turn", "next-step"):
            raise ValueError(f"target must be 'next-turn' or 'next-step', not {target!r}")
        # Decided before insertion so a re-entrant cancel in an observer cannot reclassify.
        controller = phase.controller
        redirect = (
            wakeup
            and not phase.disposing
            and phase.phase == "running"
            and controller is not None
            and controller.signal.aborted
        )
        seq = self.inbox.append("next-turn" if redirect else target, message)
        if not wakeup or phase.disposing:
            return seq
        if redirect or phase.phase == "maintenance":
            # Disposal never latches: the owner is exiting, nothing may run after it (C7.4-14).
            if not self._aborted_by_disposal():
                phase.latch()
        elif phase.phase == "idle":
            self._start_driver()
        return seq

    # --- shared state (state/changed) -------------------------------------------------

    @property
    def state(self) -> Mapping[str, Any]:
        """The session's shared state document: a read-only copy of the fold of its
        ``state/changed`` events (``{}`` before the first)."""
        return self._state.document

    def update_state(self, patch: list[dict[str, Any]]) -> int:
        """Apply an RFC 6902 ``patch`` to the state document as one durable
        ``state/changed`` event; returns its seq.

        Raises:
            ValueError: a malformed patch, or one that does not apply (a missing path, a
                failed ``test``) or leaves something other than a JSON object; nothing is
                written.
        """
        return self._state.update(patch)

    # --- approvals (EVENTS.md §2.4a) ---------------------------------------------------

    def decide_approval(
        self,
        call_id: str,
        decision: Decision,
        *,
        reason: str | None = None,
        by: str | None = None,
    ) -> int:
        """Answer the call ``call_id`` a ``ToolDecision.ask`` holds; returns the seq of the
        ``tool/approval-decided`` written, synchronously, by this call.

        ``deny`` gives the call the result ``DENIED`` (``reason`` as its content); ``allow``
        runs it. ``by`` records who decided.

        Raises:
            ValueError: a bad argument (``decision`` other than ``"allow"``/``"deny"``).
            ApprovalError: the call is not waiting for a decision (never asked about,
                already decided, or its turn was cancelled); nothing is written.
        """
        return self.approvals.decide(call_id, decision, reason, by)

    @property
    def pending_approvals(self) -> tuple[ApprovalRequested, ...]:
        """The ``tool/approval-requested`` records still waiting for ``decide_approval``."""
        return self.approvals.pending

    # --- input requests (agent/_inputs.py) -------------------------------------------

    @property
    def pending_inputs(self) -> tuple[InputRequest, ...]:
        """The ``input/requested`` records still waiting for ``answer_input``."""
        return self.inputs.pending

    def answer_input(
        self,
        id: str,
        action: InputAction,
        content: Mapping[str, Any] | None = None,
        *,
        by: str | None = None,
    ) -> int:
        """Answer the input request ``id``; returns the seq of the ``input/answered``
        written, synchronously, by this call.

        ``accept`` carries ``content`` valid against the request's schema; ``decline`` and
        ``cancel`` carry none. ``by`` records who answered.

        Raises:
            ValueError: a bad argument, or content the requested schema refuses; nothing
                is written.
            InputError: the request is not waiting (never made, already answered, or its
                call ended); nothing is written.
        """
        return self.inputs.answer(id, action, content, by)

    # --- one call (agent/_run.py) ----------------------------------------------------

    @overload
    async def run(self, message: str | UserMessage) -> TurnResult[None]: ...
    @overload
    async def run(
        self,
        message: str | UserMessage,
        *,
        output_type: type[T],
        output_retries: int = DEFAULT_OUTPUT_RETRIES,
    ) -> TurnResult[T]: ...
    @overload
    async def run(
        self,
        message: str | UserMessage,
        *,
        output_type: Mapping[str, Any],
        output_retries: int = DEFAULT_OUTPUT_RETRIES,
    ) -> TurnResult[Any]: ...
    async def run(
        self,
        message: str | UserMessage,
        *,
        output_type: Any = None,
        output_retries: int = DEFAULT_OUTPUT_RETRIES,
    ) -> TurnResult[Any]:
        """Send ``message`` as a followup; return the result of the turn that claims it.

        With ``output_type`` (a pydantic model, any ``TypeAdapter`` type, or a JSON-schema
        dict) the turn's answer must validate; an invalid one is sent back at most
        ``output_retries`` times, then the turn ends ``error`` with code ``OUTPUT_INVALID``.
        Never raises for a turn outcome; a message removed before a turn claimed it gives
        ``kind="aborted"`` and ``turn=None``.

        Raises:
            RuntimeError: the agent is disposed (or not published yet).
            ValueError: a bad message, ``output_type`` or ``output_retries``.
        """
        return await run(self, message, output_type=output_type, output_retries=output_retries)

    def stream(
        self,
        message: str | UserMessage,
        *,
        output_type: Any = None,
        output_retries: int = DEFAULT_OUTPUT_RETRIES,
        max_buffer: int = DEFAULT_STREAM_BUFFER,
    ) -> TurnStream:
        """Send ``message`` like ``run`` and iterate the live frames and durable events of
        the turn that claims it, ending after its ``turn/end``. Stopping early does not
        cancel the turn; a slow consumer loses live frames past ``max_buffer``, never events.

        Raises:
            RuntimeError: the agent is disposed (or not published yet).
            ValueError: a bad message, ``output_type``, ``output_retries`` or ``max_buffer``.
        """
        return stream(
            self,
            message,
            output_type=output_type,
            output_retries=output_retries,
            max_buffer=max_buffer,
        )

    # --- cancel ----------------------------------------------------------------------

    def cancel(self, cause: CancelCause, keep_inbox: bool = False) -> None:
        """Abort the active turn or maintenance job with ``cause``.

        Without ``keep_inbox`` the inbox is cleared first. A latched wake is forgotten.
        """
        if not isinstance(cause, CancelCause):
            raise ValueError("cancel() takes a CancelCause")
        try:
            if not keep_inbox:
                self.inbox.clear()
        finally:
            # The abort happens even when clearing could not be written (a fenced-out
            # writer refuses the splice): otherwise nothing would stop the running turn.
            self.phase.forget_wake()
            controller = self.phase.controller
            if controller is not None:
                controller.abort(cause)

    def _aborted_by_disposal(self) -> bool:
        controller = self.phase.controller
        if controller is None or not controller.signal.aborted:
            return False
        reason = controller.signal.reason
        return isinstance(reason, CancelCause) and reason.kind == "disposed"

    # --- idle and maintenance --------------------------------------------------------

    async def when_idle(self) -> None:
        """Return once no activity runs, following relays to latched drivers."""
        while (activity := self.phase.activity) is not None:
            await asyncio.shield(activity.done)

    def run_maintenance(self, job: Callable[[AbortSignal], Awaitable[T]]) -> Awaitable[T]:
        """Run ``job(signal)`` while no turn may start; wakes sent meanwhile are latched.

        Raises:
            RuntimeError: at once, when the agent is not idle.
        """
        phase = self.phase
        if phase.phase != "idle" or phase.disposing:
            raise RuntimeError(f"agent {self.id!r} is not idle")
        controller = phase.begin_maintenance()

        async def run() -> T:
            try:
                return await job(controller.signal)
            finally:
                phase.converge()

        return asyncio.ensure_future(run())

    async def compact(self) -> SessionEvent | None:
        """Compact the history now, through the policy ``install_compaction`` registered.

        Runs as a maintenance job (sends meanwhile are latched) and writes exactly one
        ``context/compacted``; returns it, or ``None`` when nothing is old enough to compact.

        Raises:
            RuntimeError: the agent is not idle, or no compaction policy is installed.
        """
        hooks = self.services.hooks
        if not hooks.has(AGENT_COMPACT):
            raise RuntimeError(
                "agent.compact() needs a compaction policy: steerloop.context.install_compaction"
            )

        async def job(signal: AbortSignal) -> SessionEvent | None:
            result = await hooks.serial(AGENT_COMPACT, CompactPayload(self, signal))
            return result if isinstance(result, SessionEvent) else None

        return await self.run_maintenance(job)

    # --- drivers ---------------------------------------------------------------------

    def _status_changed(self, status: Literal["idle", "running"]) -> None:
        self.services.hooks.emit(STATUS, StatusPayload(self, status))

    def take_up_waiting(self) -> None:
        """Start the driver that takes up the turn a crashed process left waiting, if there
        is one and nothing has started it yet (the factory, once the agent is live)."""
        phase = self.phase
        if self._waiting is not None and phase.phase == "idle" and phase.lifecycle == "live":
            self._start_driver()

    def _start_driver(self) -> None:
        """Open the first turn synchronously (or take up the one a crashed process left
        waiting: its waits are armed before this returns), then drive the rest in a task."""
        from ._driver import open_turn, reenter_turn, run_driver

        controller, previous = self.phase.begin_turn()
        state = None
        if not controller.signal.aborted:
            try:
                if self._waiting is not None:
                    state = reenter_turn(self, controller, self._waiting)
                    self._waiting = None
                else:
                    state = open_turn(self, controller)
            except Exception as exc:
                self.report_error(0, 0, exc)
        if state is None:
            self.phase.converge(previous)
            return
        task = asyncio.get_running_loop().create_task(run_driver(self, state))
        self._driver_tasks.add(task)
        task.add_done_callback(_driver_done)
        task.add_done_callback(self._driver_tasks.discard)
        if previous is not None:
            previous.resolve()

    def abandon(self, timeout: float | None) -> None:
        """Stop waiting for the running activity (a dispose timeout elapsed).

        Same-process work cannot be killed: its task is left to the event loop. What the log
        owes is written now — ``TOOL_OUTCOME_UNKNOWN`` for every call without a result (it
        may still have effects), ``step/end``, ``turn/end{aborted}`` — the session is sealed
        so the stray task can write nothing after it, and the activity converges.
        """
        cause = CancelCause.disposed()
        controller = self.phase.controller
        if controller is not None and isinstance(controller.signal.reason, CancelCause):
            cause = controller.signal.reason
        turn = 0
        for fix in plan_repair(self.session.events):
            data = fix.data
            if isinstance(data, TurnEnd):
                turn = data.turn
                data = TurnEnd(turn=turn, reason=TurnEndReason(kind="aborted", reason=cause))
            self.session.append(
                data, surface_op=fix.surface_op, source_event_seqs=fix.source_event_seqs
            )
        self.session.seal(f"agent {self.id!r} was abandoned by a dispose timeout")
        error = TimeoutError(
            f"agent {self.id!r} was still running {timeout}s after it was cancelled; "
            "its task is left to the event loop"
        )
        _log.warning("%s", error)
        self.report_error(turn, 0, error)
        self._abandoned = True
        self.phase.converge()

    def report_error(self, turn: int, step: int, error: BaseException) -> None:
        if self._abandoned:
            # The stray task of an abandoned activity: the agent is gone, only log it.
            _log.warning("agent %r: stray task after abandon: %r", self.id, error)
            return
        self.services.hooks.emit(AGENT_ERROR, ErrorPayload(self, turn, step, error))


def live_agent(agent: AgentRef, needed_by: str = "this plugin") -> Agent:
    """The runtime's ``Agent`` behind a hook payload's ``AgentRef``.

    Payloads name the protocol (they sit below the agent layer); a plugin that drives the
    agent (its inbox, its services) narrows here.

    Raises:
        TypeError: ``agent`` is another implementation of the protocol.
    """
    if not isinstance(agent, Agent):
        raise TypeError(f"{needed_by} needs a steerloop Agent, not {type(agent).__name__}")
    return agent


def _driver_done(task: asyncio.Task[None]) -> None:
    # A driver ends with an exception only for the host's own (KeyboardInterrupt, SystemExit),
    # which asyncio already raised out of the event loop after the turn was closed; retrieve
    # it so the task is not reported as "exception was never retrieved" as well.
    if not task.cancelled():
        task.exception()
