"""One admitted step (§7.6–7.7): attempts until one settles, then the tool group.

``run_step`` reads top-down: ``step/start``; ``while (outcome := await attempt()) is Retry``
(``_attempt``); an ``Aborted`` outcome raises; a settled message's tool calls run as one
group (``_scheduler``); on any exit the step is recovered (every requested call answered,
``_recovery``) and closed with ``step/end``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from .._cancel import escapes
from .._signal import AbortSignal
from ..errors import AbortedError
from ..messages import UserMessage
from ..session._events import StepEnd, StepStart
from ._attempt import StepContext, attempt
from ._recovery import ToolCallTracker
from ._scheduler import ToolScheduler
from ._settle import Aborted, Retry

if TYPE_CHECKING:
    from ._loop_agent import LoopAgent as Agent

__all__ = ["StepOutcome", "TurnState", "run_step"]

StepOutcome = Literal["completed", "max-tokens"] | None  # None: the turn owes a request


@dataclass(slots=True)
class TurnState:
    """What the driver and its steps share about the open turn."""

    turn: int
    signal: AbortSignal
    claimed: list[UserMessage] = field(default_factory=list)
    claim_error: Exception | None = None
    step: int = 0
    max_tokens: bool = False
    failed_in_step: bool = False


async def run_step(
    agent: Agent,
    state: TurnState,
    messages: Sequence[UserMessage],
    prompt: str,
    starts_series: bool,
) -> StepOutcome:
    """Run step ``state.step`` of the turn; ``None`` when tool results await a request."""
    ctx = StepContext(
        agent=agent,
        rt=agent.services,
        session=agent.session,
        turn=state.turn,
        step=state.step,
        signal=state.signal,
        messages=messages,
        prompt=prompt,
        starts_series=starts_series,
    )
    ctx.session.append(StepStart(turn=ctx.turn, step=ctx.step))
    tracker = ToolCallTracker(ctx.session)
    failure: BaseException | None = None
    try:
        ctx.signal.throw_if_aborted()
        first = True
        while isinstance(outcome := await attempt(ctx, first), Retry):
            first = False
        if isinstance(outcome, Aborted):
            raise AbortedError(ctx.signal.reason)
        if not outcome.calls:
            return outcome.kind
        scheduler = ToolScheduler(agent, ctx.turn, ctx.step, ctx.signal)
        scheduler.input_modalities = outcome.input_modalities
        concluded = await scheduler.run(outcome.calls)
        return "completed" if concluded else None
    except BaseException as exc:
        # Every exit closes the step: a host exception (Ctrl-C, exit, cancellation of
        # the driver task) answers the open calls too before it goes on.
        failure = exc
        late: BaseException | None = None
        if not ctx.signal.aborted:
            state.failed_in_step = True
            if not escapes(exc):  # unknown outcomes a tool can reconcile (C7.10-1)
                late = await tracker.reconcile(agent)
        try:
            tracker.recover(ctx.turn, ctx.step)
        except Exception as repair_exc:
            failure = BaseExceptionGroup("step failed and recovery failed", [exc, repair_exc])
            raise failure from None
        if late is not None:  # the host's own exception, met while reconciling
            failure = late
            raise late from exc
        raise
    finally:
        tracker.close()
        try:
            ctx.session.append(StepEnd(turn=ctx.turn, step=ctx.step))
        except Exception as end_exc:
            if failure is None:
                raise
            failure.add_note(f"step/end could not be written: {end_exc!r}")
