"""The agent: phase machine, sends with wake latching, cancel, ``when_idle``, maintenance.

Phases are ``idle``, ``maintenance`` and ``running``; ``status`` reports ``running`` only
for ``running``. An *activity* (a driver or a maintenance job) owns an abort controller
and a completion future. When an activity converges, a latched wake relays to a new
driver *before* the old activity's future resolves, so ``when_idle`` follows the relay.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from .._cancel import CancelCause
from .._owned import RuntimeOwned
from .._signal import AbortController, AbortSignal
from ..llm._types import CallConfig
from ..messages import UserMessage
from ..session._events import SessionEvent
from ._decisions import CompactPayload, ErrorPayload, StatusPayload
from ._inbox import Inbox, InboxTarget, fold_inbox
from ._options import AgentOptions

if TYPE_CHECKING:
    from .._runtime import Runtime
    from ..session._session import Session

__all__ = ["Agent"]

T = TypeVar("T")
Phase = Literal["idle", "maintenance", "running"]


class _Activity:
    __slots__ = ("done",)

    def __init__(self) -> None:
        self.done: asyncio.Future[None] = asyncio.get_running_loop().create_future()


class Agent(metaclass=RuntimeOwned):
    """A live agent over one session. Create it with ``rt.agents.create``."""

    owned_hint = "use `await rt.agents.create(...)` (or `resume` / `restore_or_create`)"

    def __init__(
        self,
        runtime: Runtime,
        session: Session,
        options: AgentOptions,
        *,
        parent: Agent | None = None,
        meta: dict[str, Any] | None = None,
        pending: Mapping[str, list[UserMessage]] | None = None,
    ) -> None:
        self.id = session.id
        self.session = session
        self.options = options
        self.parent = parent
        self.meta = dict(meta or {})
        self._rt = runtime
        if pending is None:  # a resumed inbox is the fold of its splices
            pending = fold_inbox(session.events)
        self.inbox = Inbox._create(
            session, runtime.hooks, self, pending["next-turn"], pending["next-step"]
        )
        self._phase: Phase = "idle"
        self._reported: Literal["idle", "running"] = "idle"
        self._activity: _Activity | None = None
        self._controller: AbortController | None = None
        self._wake_latched = False
        self._published = False
        self._disposing = False
        self._disposed = False
        self._header_config: tuple[int, CallConfig] | None = None  # decoded latest header
        # (config, adapter defaults, tool schemas, header body) of the last request built
        self._header_body: tuple[CallConfig, dict[str, Any], Any, dict[str, Any]] | None = None
        self._requested = False  # this loop instance sent its first request
        self._replaced_at_request = session.surface_replaced
        self._driver_tasks: set[asyncio.Task[None]] = set()

    def __repr__(self) -> str:
        return f"<Agent {self.id} {self._phase}>"

    @property
    def status(self) -> Literal["idle", "running"]:
        return "running" if self._phase == "running" else "idle"

    @property
    def runtime(self) -> Runtime:
        return self._rt

    # --- sending ---------------------------------------------------------------------

    def followup(self, message: UserMessage) -> None:
        """Queue ``message`` for the next turn and wake the agent."""
        self.send(message, "next-turn", True)

    def steer(self, message: UserMessage) -> None:
        """Queue ``message`` for the next step and wake the agent."""
        self.send(message, "next-step", True)

    def inject(self, message: UserMessage) -> None:
        """Queue ``message`` for the next step without waking the agent."""
        self.send(message, "next-step", False)

    def send(self, message: UserMessage, target: InboxTarget, wakeup: bool) -> None:
        """Insert ``message`` into ``target``; with ``wakeup``, start or latch a driver.

        Raises:
            RuntimeError: the agent is disposed, or unpublished and ``wakeup`` is set.
            ValueError: a bad target or message, or a message id that is already pending.
        """
        if self._disposed:
            raise RuntimeError(f"agent {self.id!r} is disposed")
        if wakeup and not self._published:
            raise RuntimeError("setup composes, it does not drive: the agent is not published yet")
        if not isinstance(message, UserMessage):
            raise ValueError(f"send() takes a UserMessage, not {type(message).__name__}")
        if target not in ("next-turn", "next-step"):
            raise ValueError(f"target must be 'next-turn' or 'next-step', not {target!r}")
        # Decided before insertion so a re-entrant cancel in an observer cannot reclassify.
        redirect = (
            wakeup
            and not self._disposing
            and self._phase == "running"
            and self._controller is not None
            and self._controller.signal.aborted
        )
        self.inbox.append("next-turn" if redirect else target, message)
        if not wakeup or self._disposing:
            return
        if redirect or self._phase == "maintenance":
            # Disposal never latches: the owner is exiting, nothing may run after it (C7.4-14).
            if not self._aborted_by_disposal():
                self._wake_latched = True
        elif self._phase == "idle":
            self._start_driver()

    # --- cancel ----------------------------------------------------------------------

    def cancel(self, cause: CancelCause, keep_inbox: bool = False) -> None:
        """Abort the active turn or maintenance job with ``cause``.

        Without ``keep_inbox`` the inbox is cleared first. A latched wake is forgotten.
        """
        if not isinstance(cause, CancelCause):
            raise ValueError("cancel() takes a CancelCause")
        if not keep_inbox:
            self.inbox.clear()
        self._wake_latched = False
        if self._controller is not None:
            self._controller.abort(cause)

    def _aborted_by_disposal(self) -> bool:
        controller = self._controller
        if controller is None or not controller.signal.aborted:
            return False
        reason = controller.signal.reason
        return isinstance(reason, CancelCause) and reason.kind == "disposed"

    # --- idle and maintenance --------------------------------------------------------

    async def when_idle(self) -> None:
        """Return once no activity runs, following relays to latched drivers."""
        while (activity := self._activity) is not None:
            await asyncio.shield(activity.done)

    def run_maintenance(self, job: Callable[[AbortSignal], Awaitable[T]]) -> Awaitable[T]:
        """Run ``job(signal)`` while no turn may start; wakes sent meanwhile are latched.

        Raises:
            RuntimeError: at once, when the agent is not idle.
        """
        if self._phase != "idle" or self._disposing or self._disposed:
            raise RuntimeError(f"agent {self.id!r} is not idle")
        controller = self._begin_maintenance()

        async def run() -> T:
            try:
                return await job(controller.signal)
            finally:
                self._converge()

        return asyncio.ensure_future(run())

    async def compact(self) -> SessionEvent | None:
        """Compact the history now, through the policy ``install_compaction`` registered.

        Runs as a maintenance job (sends meanwhile are latched) and writes exactly one
        ``context/compacted``; returns it, or ``None`` when nothing is old enough to compact.

        Raises:
            RuntimeError: the agent is not idle, or no compaction policy is installed.
        """
        hooks = self._rt.hooks
        if not hooks.has("agent/compact"):
            raise RuntimeError(
                "agent.compact() needs a compaction policy: steerloop.context.install_compaction"
            )

        async def job(signal: AbortSignal) -> SessionEvent | None:
            result = await hooks.serial("agent/compact", CompactPayload(self, signal))
            return result if isinstance(result, SessionEvent) else None

        return await self.run_maintenance(job)

    def _begin_maintenance(self) -> AbortController:
        self._phase = "maintenance"
        self._activity = _Activity()
        self._controller = AbortController()
        return self._controller

    # --- drivers ---------------------------------------------------------------------

    def _set_phase(self, phase: Phase) -> None:
        self._phase = phase
        status = self.status
        if status != self._reported:
            self._reported = status
            self._rt.hooks.emit("agent/status", StatusPayload(self, status))

    def _start_driver(self) -> None:
        """Open the first turn synchronously, then drive the rest in a task."""
        from ._driver import open_turn, run_driver

        previous = self._activity
        self._activity = _Activity()
        controller = self._controller = AbortController()
        self._set_phase("running")
        state = None
        if not controller.signal.aborted:
            try:
                state = open_turn(self, controller)
            except Exception as exc:
                self.report_error(0, 0, exc)
        if state is None:
            self._converge(previous)
            return
        task = asyncio.get_running_loop().create_task(run_driver(self, state))
        self._driver_tasks.add(task)
        task.add_done_callback(self._driver_tasks.discard)
        if previous is not None and not previous.done.done():
            previous.done.set_result(None)

    def _converge(self, previous: _Activity | None = None) -> None:
        """End the current activity; replay a latched wake if input is pending."""
        done = self._activity
        self._controller = None
        latched, self._wake_latched = self._wake_latched, False
        if latched and self.inbox.has_pending and not self._disposing:
            self._start_driver()
        else:
            self._activity = None
            self._set_phase("idle")
        for activity in (previous, done):
            if activity is not None and activity is not self._activity and not activity.done.done():
                activity.done.set_result(None)

    def report_error(self, turn: int, step: int, error: BaseException) -> None:
        self._rt.hooks.emit("agent/error", ErrorPayload(self, turn, step, error))
