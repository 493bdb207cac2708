"""The tool scheduler: a bounded rolling pool whose results commit in model order (§7.9).

Design notes:

* Arguments are parsed once, up front. Each call is *classified* immediately before it
  starts, against the live registry: a concurrency-safe call joins the rolling pool
  (at most ``max_parallel_tool_calls`` bodies, the cap read when a parallel group begins);
  anything else is an exclusive barrier that waits for every started call to finish and
  commit, runs alone, and commits before the next call starts.
* Starting a call appends ``tool/call`` and awaits the pre-execute policy in the
  scheduler's own coroutine, so policies run in model order and never overlap; only
  bodies run as tasks.
* Finished bodies park their result in a slot; the commit cursor advances over consecutive
  ready slots: post-execute → ``tools/result`` → ``tool/result`` → deferred context.
* A policy's ``ask`` holds the call: ``tool/approval-requested`` is appended and the call's
  run (inline or a task, by the same rule as a body) first waits for the decision, racing
  the turn's signal; ``deny`` answers ``DENIED``, ``allow`` dispatches. An exclusive held
  call is still a barrier; a safe one waits in its task while later calls start, and
  results still commit in model order.
* Write-ahead intent (``_gate``): a call that may change the world (not concurrency-safe,
  unless its tool says otherwise with ``durable_dispatch``) starts only after a fence made
  its ``tool/call`` (and its approval decision) durable; the calls that start together
  share one fence. Every start, safe or not, first checks that the write lease cannot have
  expired. A failed fence is a failure of the scheduler's own steps.
* On abort nothing new starts; started bodies drain and commit; every unstarted call gets
  ``tool/call`` + ``ABORTED_BEFORE_DISPATCH`` back to back; then ``AbortedError``.
* A failure of the scheduler's own steps stops new starts, waits for started bodies and
  raises; the step's recovery answers whatever was not committed.
* ``resume`` takes up a step a crashed process left waiting (``_waits``): the committed
  results stay, each durable wait runs its re-armed body as a started call, every one of
  them commits (model order) before a later call starts — as behind an exclusive call —
  and the calls never started start as usual. A wait this process cannot finish is
  answered as recovery answers a started call (reconciled, else unknown).
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .._cancel import escapes
from .._media import MODALITIES
from .._signal import AbortController, AbortSignal
from ..errors import AbortedError, SessionPersistenceError
from ..messages import MessageSource, ToolCallBlock, UserMessage
from ..session._events import (
    ApprovalDecided,
    ApprovalRequested,
    ToolCallEvent,
    ToolResultEvent,
)
from ..tools._define import Tool, ToolDecision, ToolExec, ToolResult
from ..tools._hooks import TOOLS_APPROVAL_REQUESTED, ApprovalHookPayload
from ..tools._runtime import (
    UNVALIDATED,
    aborted_before_dispatch,
    denied,
    error_result,
    parse_arguments,
    result_event,
    run_continued,
)
from ._gate import DispatchGate
from ._waits import lost_answers

if TYPE_CHECKING:
    from ..session._waits import DurableWait
    from ._loop_agent import LoopAgent as Agent
    from ._waits import Reentry

__all__ = ["ToolScheduler", "parse_arguments"]

_UNSET = object()


class _Slot:
    __slots__ = ("call_seq", "event", "exec", "result")

    def __init__(self) -> None:
        self.exec: ToolExec | None = None
        self.call_seq = 0
        self.result: ToolResult | None = None
        # A lost wait's answer, written as recovery writes it (no post-execute).
        self.event: ToolResultEvent | None = None


class ToolScheduler:
    """Runs the tool calls of one assistant message."""

    input_modalities: frozenset[str] = MODALITIES  # of the model that made the calls

    def __init__(self, agent: Agent, turn: int, step: int, signal: AbortSignal) -> None:
        self.agent = agent
        self.rt = agent.services
        self.session = agent.session
        self.turn = turn
        self.step = step
        self.signal = signal
        self.concluded = False
        # Ends the approval waits: the turn's abort, or the scheduler giving up (a failure
        # of its own steps must not wait for a decision that may never come). Made by the
        # first ``ask`` only (``_holds``): a step without approvals pays nothing for it.
        self._hold_controller: AbortController | None = None
        self._relay: Callable[[], None] | None = None
        self.gate = DispatchGate(agent.session)

    async def run(self, calls: tuple[ToolCallBlock, ...]) -> bool:
        """Run ``calls``; returns whether a committed result concluded the turn."""
        self._prepare(calls)
        return await self._drive(0)

    async def resume(self, reentry: Reentry) -> bool:
        """Take up the calls of a step a crashed process left waiting (``_waits``); returns
        whether a committed result concluded the turn."""
        step = reentry.step
        self._prepare(step.calls)
        self.cursor = step.committed
        lost: list[tuple[int, DurableWait]] = []
        for offset, (wait, body) in enumerate(zip(step.waits, reentry.bodies, strict=True)):
            index = step.committed + offset
            slot = self.slots[index]
            slot.call_seq = wait.call_seq
            exec = slot.exec = self._exec(index)
            if body is None:
                lost.append((index, wait))
                continue
            task = asyncio.get_running_loop().create_task(run_continued(exec, body))
            self.running[task] = index
            task.add_done_callback(self._on_done)
        return await self._drive(step.committed + len(step.waits), lost)

    def _prepare(self, calls: tuple[ToolCallBlock, ...]) -> None:
        self.calls = calls
        self.parsed = [parse_arguments(c.arguments) for c in calls]
        self.slots = [_Slot() for _ in calls]
        self.validated: dict[int, tuple[Tool, Any]] = {}
        self.cursor = 0
        self.running: dict[asyncio.Task[ToolResult], int] = {}
        self.finished: collections.deque[asyncio.Task[ToolResult]] = collections.deque()
        self.wakeup: asyncio.Future[None] | None = None

    async def _drive(self, started: int, lost: list[tuple[int, DurableWait]] | None = None) -> bool:
        """Start the calls from ``started`` on, after the ones already running (re-armed
        waits, and ``lost`` ones answered as recovery would) have committed."""
        calls = self.calls
        try:
            if lost:
                for index, event in (await lost_answers(self.agent, lost)).items():
                    self.slots[index].event = event
            if self.running or lost:
                await self._wait_all()
            cap: int | None = None
            while started < len(calls) and not self.signal.aborted:
                # Classify again after every wait: a commit in between may re-register tools.
                if self._is_safe(started):
                    if cap is None:
                        cap = self.rt.limits.max_parallel_tool_calls
                    if len(self.running) >= cap:
                        await self._wait_some()
                        continue
                    await self._start(started, safe=True)
                else:
                    if self.running:
                        await self._wait_all()
                        continue
                    cap = None
                    await self._start(started, safe=False)
                    await self._wait_all()
                started += 1
            await self._wait_all()
        except BaseException as exc:
            if self._hold_controller is not None:
                self._hold_controller.abort(exc)
            if not escapes(exc):  # the host's exceptions do not wait for stray bodies
                await self._abandon()
            raise
        finally:
            if self._relay is not None:
                self._relay()
        for index in range(started, len(calls)):
            self._synthesise_aborted(index)
        if self.signal.aborted:
            raise AbortedError(self.signal.reason)
        return self.concluded

    # --- classification and starting ------------------------------------------------

    def _tool(self, index: int) -> Tool | None:
        return self.rt.tools.get(self.calls[index].name, self.agent.id)

    def _validated(self, index: int, tool: Tool) -> Any:
        """Arguments validated against ``tool``, once per call and tool definition."""
        cached = self.validated.get(index)
        if cached is not None and cached[0] is tool:
            return cached[1]
        args = tool.validate(self.parsed[index][0])
        self.validated[index] = (tool, args)
        return args

    def _is_safe(self, index: int) -> bool:
        tool = self._tool(index)
        if self.parsed[index][1] is not None or tool is None:
            return False
        if not callable(tool.concurrency_safe):  # a fixed answer needs no validated args
            return bool(tool.concurrency_safe)
        try:
            return tool.is_concurrency_safe(self._validated(index, tool))
        except Exception:
            return False

    def _exec(self, index: int) -> ToolExec:
        call = self.calls[index]
        return ToolExec(
            call_id=call.id,
            name=call.name,
            arguments=self.parsed[index][0],
            raw_arguments=call.arguments,
            signal=self.signal,
            agent=self.agent,
            turn=self.turn,
            step=self.step,
            input_modalities=self.input_modalities,
        )

    async def _start(self, index: int, *, safe: bool) -> None:
        call = self.calls[index]
        slot = self.slots[index]
        parse_error = self.parsed[index][1]
        slot.call_seq = self.session.append(
            ToolCallEvent(
                turn=self.turn,
                step=self.step,
                call_id=call.id,
                name=call.name,
                arguments=call.arguments,
            ),
        ).seq
        exec = slot.exec = self._exec(index)
        tool = self._tool(index)
        cached = self.validated.get(index)
        validated = cached[1] if cached is not None and cached[0] is tool else UNVALIDATED
        early = await self.rt.pipeline.prepare(exec, tool, parse_error, validated)
        durable = tool is not None and tool.needs_durable_dispatch(safe)
        if isinstance(early, ToolDecision) and tool is not None:
            run = self._held(exec, tool, self._ask(exec, early.reason), durable)
        elif early is not None or tool is None:
            slot.result = early if isinstance(early, ToolResult) else None
            await self._commit_ready()
            return
        else:
            run = self._dispatch(exec, tool, slot.call_seq, durable)
        if not self.running and (not safe or index == len(self.calls) - 1):
            # Nothing could overlap this body: run it inline, saving a task and a wake-up.
            slot.result = await run
            await self._commit_ready()
            return
        task = asyncio.get_running_loop().create_task(run)
        self.running[task] = index
        task.add_done_callback(self._on_done)

    # --- approvals ---------------------------------------------------------------------

    @property
    def _holds(self) -> AbortController:
        """The controller that ends every approval wait of this scheduler (made once)."""
        if self._hold_controller is None:
            self._hold_controller = AbortController()
            self._relay = self.signal.add_listener(self._hold_controller.abort)
        return self._hold_controller

    def _ask(self, exec: ToolExec, reason: str | None) -> asyncio.Future[ApprovalDecided]:
        """Record the approval request of ``exec`` and announce it to answerers."""
        request = ApprovalRequested(
            turn=self.turn,
            step=self.step,
            call_id=exec.call_id,
            name=exec.name,
            arguments=exec.raw_arguments,
            reason=reason,
        )
        seq, decided = self.agent.approvals.request(request, self._holds.signal)
        hooks = self.rt.hooks
        if hooks.has(TOOLS_APPROVAL_REQUESTED):
            hooks.emit(TOOLS_APPROVAL_REQUESTED, ApprovalHookPayload(exec, request, seq))
        return decided

    async def _held(
        self,
        exec: ToolExec,
        tool: Tool,
        decided: asyncio.Future[ApprovalDecided],
        durable: bool,
    ) -> ToolResult:
        """Wait for the decision on ``exec``, then deny it or run it."""
        try:
            decision = await self._holds.signal.race(decided)
        except AbortedError:
            return aborted_before_dispatch()
        finally:
            self.agent.approvals.release(exec.call_id)
        if decision.decision == "deny":
            return denied(decision.reason or "denied by the user")
        # The decision was appended before the wait ended: the fence must cover it too.
        return await self._dispatch(exec, tool, self.session.next_seq - 1, durable)

    async def _dispatch(self, exec: ToolExec, tool: Tool, seq: int, durable: bool) -> ToolResult:
        """Start the body once the gate lets it (``_gate``): nothing may await in between."""
        if durable or not self.session.lease_valid():
            await self.gate.enter(seq, durable)
        return await self.rt.pipeline.dispatch(exec, tool)

    def _on_done(self, task: asyncio.Task[ToolResult]) -> None:
        if not task.cancelled():
            # Retrieved here: a body's KeyboardInterrupt/SystemExit has already left the
            # event loop for the host; it must not be reported a second time at GC.
            task.exception()
        self.finished.append(task)
        if self.wakeup is not None and not self.wakeup.done():
            self.wakeup.set_result(None)

    # --- waiting and committing ------------------------------------------------------

    async def _wait_some(self) -> None:
        if not self.finished:
            self.wakeup = asyncio.get_running_loop().create_future()
            try:
                await self.wakeup
            finally:
                self.wakeup = None
        while self.finished:
            task = self.finished.popleft()
            index = self.running.pop(task)
            self.slots[index].result = _harvest(task)
        await self._commit_ready()

    async def _wait_all(self) -> None:
        while self.running:
            await self._wait_some()
        await self._commit_ready()

    async def _abandon(self) -> None:
        if self.running:
            await asyncio.wait(self.running)
            self.running.clear()

    async def _commit_ready(self) -> None:
        while self.cursor < len(self.slots) and (
            (slot := self.slots[self.cursor]).result is not None or slot.event is not None
        ):
            if slot.event is not None:
                self.session.append(
                    slot.event, surface_op="append", source_event_seqs=(slot.call_seq,)
                )
                self.cursor += 1
                continue
            assert slot.exec is not None and slot.result is not None
            result, contexts = await self.rt.pipeline.finalize(slot.exec, slot.result)
            self._append_result(self.calls[self.cursor], slot.call_seq, result)
            self.cursor += 1
            for message in (*slot.exec.deferred, *contexts):
                self.agent.inbox.append("next-step", _as_tool_context(message, slot.exec.call_id))
            if result.concludes_turn:
                self.concluded = True

    def _append_result(self, call: ToolCallBlock, call_seq: int, result: ToolResult) -> None:
        self.session.append(
            result_event(self.turn, self.step, call.id, result, self.rt.ids("msg")),
            surface_op="append",
            source_event_seqs=(call_seq,),
        )

    def _synthesise_aborted(self, index: int) -> None:
        call = self.calls[index]
        seq = self.session.append(
            ToolCallEvent(
                turn=self.turn,
                step=self.step,
                call_id=call.id,
                name=call.name,
                arguments=call.arguments,
            ),
        ).seq
        self._append_result(
            call,
            seq,
            aborted_before_dispatch(),
        )


def _harvest(task: asyncio.Task[ToolResult]) -> ToolResult:
    """A finished body's result; one the host took (cancelled, Ctrl-C, exit) is a failure.

    ``dispatch`` turns every other exception into a result, so only what already reached
    the host ends up here; if the host goes on, the turn does too (no second raise). A
    refused gate (a fence that failed: the body never started) is the scheduler's own
    failure and is raised (C7.9-20).
    """
    if task.cancelled():
        return error_result("TOOL_FAILED", "the tool's task was cancelled", "CancelledError")
    exc = task.exception()
    if isinstance(exc, SessionPersistenceError):
        raise exc
    if exc is not None:
        return error_result("TOOL_FAILED", str(exc) or type(exc).__name__, type(exc).__name__)
    return task.result()


def _as_tool_context(message: UserMessage, call_id: str) -> UserMessage:
    if message.source.kind != "user":
        return message
    return dataclasses.replace(message, source=MessageSource(kind="tool", call_id=call_id))
