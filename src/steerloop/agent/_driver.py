"""The driver: turns one after another while input is pending (§7.5).

A turn writes ``turn/start`` before it claims input or assembles the prompt, then runs
pre-step → step until a stop boundary finds nothing more to do. Every opened turn is
closed by exactly one ``turn/end``; failures are contained here and reported through
``agent/error``, so ``when_idle`` never raises a turn's failure.

A resumed agent whose log ends in a turn a crash left waiting durably (``_waits``) takes
that turn up first (``reenter_turn``): its open step is re-entered, then the turn goes on
and is closed here like any other — it was opened once, by the process that died.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from .._cancel import CancelCause, escapes
from .._signal import AbortController, AbortSignal
from ..errors import AbortedError, LlmError
from ..llm._types import LlmFailure
from ..messages import MessageSource, TextBlock, UserMessage, user_message
from ..prompt import RUNTIME_CONTEXT_PLUGIN
from ..session._events import TurnEnd, TurnEndReason, TurnStart
from ..session._waits import WaitingStep
from ._decisions import PreStepDecision, PreStepPayload, TurnStoppingPayload
from ._handles import PRE_STEP, TURN_STOPPING
from ._registry import initiator_context
from ._step import TurnState, resume_step, run_step
from ._waits import arm

if TYPE_CHECKING:
    from ._loop_agent import LoopAgent as Agent

__all__ = ["TurnState", "failure_of", "open_turn", "reenter_turn", "run_driver"]

_CONTEXT_SOURCE = MessageSource(kind="plugin", plugin=RUNTIME_CONTEXT_PLUGIN)


def reenter_turn(agent: Agent, controller: AbortController, step: WaitingStep) -> TurnState:
    """Take up the turn a crashed process left waiting in ``step`` (``_waits``): no
    ``turn/start`` and no claim (the log has them); its waits are armed again now,
    synchronously, so an answer that comes before the driver runs is not missed."""
    with initiator_context(agent):
        state = TurnState(step.turn, controller.signal, step=step.step, max_tokens=step.max_tokens)
        state.reentry = arm(agent, step, controller.signal)
        return state


def open_turn(agent: Agent, controller: AbortController) -> TurnState:
    """Write ``turn/start`` and claim the first batch, synchronously."""
    with initiator_context(agent):
        turn = agent.session.last_turn + 1
        agent.session.append(TurnStart(turn=turn))
        state = TurnState(turn, controller.signal)
        try:
            state.claimed = agent.inbox.claim("next-turn", turn)
        except Exception as exc:
            state.claim_error = exc
        return state


async def run_driver(agent: Agent, state: TurnState) -> None:
    """Run turns until the inbox is empty, a turn is blocked, or the agent is disposed."""
    with initiator_context(agent):
        try:
            while True:
                kind = await run_turn(agent, state)
                if not _continues(agent, kind):
                    break
                controller = agent.phase.next_turn()
                try:
                    state = open_turn(agent, controller)
                except Exception as exc:
                    agent.report_error(0, 0, exc)
                    break
        finally:
            agent.phase.converge()


def _continues(agent: Agent, kind: str) -> bool:
    """Whether the driver opens another turn after one that ended with ``kind``.

    A blocked, aborted or failed (``error``) turn stops the driver: what is still queued,
    prompts included, stays pending until the next waking send or a wake latched during an
    abort or maintenance, whose turn claims it first (C7.5-10, C7.5-18a, C7.5-20, C7.8-4).
    Otherwise any pending item opens the next turn (C7.5-18).
    """
    if agent.phase.disposing or kind in ("blocked", "aborted", "error"):
        return False
    return agent.inbox.has_pending


async def run_turn(agent: Agent, state: TurnState) -> str:
    """Run one opened turn to its single ``turn/end``; returns the end reason's kind."""
    host_exc: BaseException | None = None
    try:
        if state.claim_error is not None:
            raise state.claim_error
        reason = await _turn_body(agent, state)
    except BaseException as exc:
        # Every exit path writes the one turn/end; what belongs to the host (Ctrl-C, exit,
        # cancellation of the driver task) is re-raised after it, anything else is contained.
        if escapes(exc):
            host_exc = exc
        if state.signal.aborted:
            reason = TurnEndReason(kind="aborted", reason=_cause(state.signal))
        else:
            reason = TurnEndReason(kind="error", error=failure_of(exc))
            agent.report_error(state.turn, state.step if state.failed_in_step else 0, exc)
    try:
        agent.session.append(TurnEnd(turn=state.turn, reason=reason))
    except Exception as exc:
        agent.report_error(state.turn, 0, exc)
    if host_exc is not None:
        raise host_exc
    return reason.kind


def _cause(signal: AbortSignal) -> CancelCause:
    reason = signal.reason
    return reason if isinstance(reason, CancelCause) else CancelCause.user()


async def _turn_body(agent: Agent, state: TurnState) -> TurnEndReason:
    rt = agent.services
    signal = state.signal
    owes_request = False
    claimed: list[UserMessage] | None = state.claimed
    while True:
        if state.reentry is not None:
            # Before any abort check: a re-entered step is open in the log, so it runs
            # whatever happens (a cancel answers its waits) and ends with its step/end.
            reentry, state.reentry = state.reentry, None
            claimed = None  # the turn's own claim was made by the process that opened it
            outcome = await resume_step(agent, state, reentry)
        else:
            # Checked before a later claim too, so an abort never takes kept input (C7.8-4).
            signal.throw_if_aborted()
            if claimed is None:
                claimed = agent.inbox.claim("next-step", state.turn)
            admitted = await _pre_step(agent, state, tuple(claimed), owes_request)
            claimed = None
            if isinstance(admitted, TurnEndReason):
                return admitted
            decision, prompt = admitted
            state.step += 1
            outcome = await run_step(
                agent, state, decision.messages, prompt, decision.starts_request_series
            )
        if outcome == "max-tokens":
            state.max_tokens = True
        if outcome is None:
            owes_request = True
            continue
        owes_request = False
        signal.throw_if_aborted()
        if agent.inbox.next_step:
            continue
        if rt.hooks.has(TURN_STOPPING):
            await rt.hooks.serial(TURN_STOPPING, TurnStoppingPayload(agent, state.turn, signal))
        signal.throw_if_aborted()
        if agent.inbox.next_step:
            continue
        return _stop_reason(state)


async def _pre_step(
    agent: Agent, state: TurnState, batch: tuple[UserMessage, ...], owes_request: bool
) -> tuple[PreStepDecision, str] | TurnEndReason:
    """Assemble the prompt and ask ``agent/pre-step`` about ``batch``: the admitted step's
    decision and prompt, or how the turn ends (rejected, or nothing left to do)."""
    rt = agent.services
    signal = state.signal
    prompt = await rt.prompt.assemble(agent)
    signal.throw_if_aborted()
    context_text = ""
    if rt.prompt.has_context_sections():
        context_text = await rt.prompt.render_context(agent)
        signal.throw_if_aborted()
    include_context = bool(batch) or owes_request

    async def default() -> PreStepDecision:
        messages = list(batch)
        if include_context:
            snapshot = _context_snapshot(agent, context_text)
            if snapshot is not None:
                messages.append(snapshot)
        return PreStepDecision.enter(messages)

    if rt.hooks.has(PRE_STEP):
        decision = await rt.hooks.waterfall(
            PRE_STEP,
            PreStepPayload(agent, batch, state.turn, state.step + 1, signal),
            default,
        )
    else:
        decision = await default()
    signal.throw_if_aborted()
    if not isinstance(decision, PreStepDecision):
        raise TypeError(f"agent/pre-step must return a PreStepDecision, not {decision!r}")
    if decision.kind == "reject":
        return TurnEndReason(kind="blocked", detail=decision.reason)
    if not decision.messages and not owes_request:
        return _stop_reason(state)
    return decision, prompt


def _stop_reason(state: TurnState) -> TurnEndReason:
    return TurnEndReason(kind="max-tokens" if state.max_tokens else "completed")


def _context_snapshot(agent: Agent, text: str) -> UserMessage | None:
    """A runtime-context message, unless the last one on the surface says the same."""
    if not text:
        return None
    for message in reversed(agent.session.derived_tuple()):
        if message.role == "user" and message.source.plugin == RUNTIME_CONTEXT_PLUGIN:
            block = message.content[0] if message.content else None
            if isinstance(block, TextBlock) and block.text == text:
                return None
            break
    return user_message(text, source=_CONTEXT_SOURCE)


def failure_of(exc: BaseException) -> LlmFailure:
    """The ``turn/end.reason.error`` facts for ``exc`` (C7.5-21)."""
    if isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        # A group's first member is the original failure (C7.7-12, C7.10-6).
        return failure_of(exc.exceptions[0])
    if isinstance(exc, LlmError):
        return exc.failure
    if isinstance(exc, AbortedError | asyncio.CancelledError):
        return LlmFailure(message=_chain_text(exc), code="ABORTED")
    return LlmFailure(message=_chain_text(exc), code="UNKNOWN")


def _chain_text(exc: BaseException) -> str:
    parts: list[str] = []
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        text = str(current)
        parts.append(f"{type(current).__name__}: {text}" if text else type(current).__name__)
        current = current.__cause__ or (
            None if current.__suppress_context__ else current.__context__
        )
    return " <- ".join(parts)
