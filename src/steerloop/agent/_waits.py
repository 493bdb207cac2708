"""Re-entering a step a crashed process left waiting (durable waits, ``session/_waits``).

Restore repair keeps a turn open when every unanswered call of its open step waits
durably. The resumed agent's driver re-enters that step instead of opening a turn (C7.5's
``turn/start`` was written by the process that opened it):

1. ``arm`` — synchronously, when the driver starts, before anything can answer: each wait is
   registered again without appending anything — a client call in ``agent.client_calls``
   (from its ``tool/deferred``), an input wait in ``agent.inputs`` (unless its answer is in
   the log already) with its server's ``InputResumer`` to finish the call with the answer
   (behind a fence: the answer is durable and the lease ours before the server is told).
   A wait this process cannot finish (no resumer for its server, a stored request it cannot
   wait for) is *lost*: its call is answered as recovery answers a started call
   (``reconcile``, else ``TOOL_OUTCOME_UNKNOWN``).
2. ``resume_step`` (``_step``) — the scheduler takes the step up where it was
   (``ToolScheduler.resume``): results commit in model order, the calls never started start
   as they would have, a cancel answers every wait (``ABORTED``, an input also ``cancel``),
   and ``step/end`` comes after all of the step's results.
3. The turn owes a request, so it goes on as after any tool step and ends once, here.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..messages import ToolCallBlock
from ..session._events import ToolResultEvent
from ..session._repair import conservative_result
from ..session._waits import ClientWait, DurableWait, WaitingStep
from ..tools._define import ToolExec, ToolResult
from ._reconcile import reconcile_call

if TYPE_CHECKING:
    from .._signal import AbortSignal
    from ._loop_agent import LoopAgent as Agent

__all__ = ["Body", "Reentry", "arm", "lost_answers"]

_log = logging.getLogger("steerloop")

Body = Callable[[ToolExec], Awaitable[ToolResult]]
"""What runs in a re-armed call's place: it waits for the answer and returns the result."""


@dataclass(frozen=True, slots=True)
class Reentry:
    """A waiting step armed again: one body per wait (``None``: lost, see the module)."""

    step: WaitingStep
    bodies: tuple[Body | None, ...]


def arm(agent: Agent, step: WaitingStep, signal: AbortSignal) -> Reentry:
    """Register every wait of ``step`` again, racing ``signal`` (the re-entered turn's)."""
    bodies: list[Body | None] = []
    for wait in step.waits:
        try:
            bodies.append(_arm(agent, wait, signal))
        except Exception as exc:  # a stored request this process cannot wait for
            _log.warning("call %r cannot wait again: %r", wait.call.call_id, exc)
            bodies.append(None)
    return Reentry(step, tuple(bodies))


def _arm(agent: Agent, wait: DurableWait, signal: AbortSignal) -> Body | None:
    if isinstance(wait, ClientWait):
        return agent.client_calls.rearm(wait.deferred, signal)
    request, answer = wait.request, wait.answer
    resumer = agent.services.resumers.get(request.server)
    if resumer is None:
        _log.warning(
            "call %r waits on input %r of server %r, which no transport here can finish",
            wait.call.call_id,
            request.id,
            request.server,
        )
        return None
    inputs = agent.inputs
    answered = None if answer is not None else inputs.rearm(request, signal)

    async def finish(exec: ToolExec) -> ToolResult:
        given = answer
        if answered is not None:
            given = await inputs.outcome(request.id, answered, exec.signal)
        assert given is not None
        # The resumer tells the server: the answer is durable first, under a lease this
        # process still holds (as a side-effecting call starts behind its fence). A crash
        # after it finishes the call with the same answer; nobody is asked twice.
        await agent.session.fence()
        return await resumer(request, given, exec)

    return finish


async def lost_answers(
    agent: Agent, lost: Sequence[tuple[int, DurableWait]]
) -> dict[int, ToolResultEvent]:
    """The results of the waits this process cannot finish, by their index in the step: the
    tool's reconcile, else ``TOOL_OUTCOME_UNKNOWN``, as recovery answers a started call
    (written as such: no post-execute)."""
    answers = await asyncio.gather(*(reconcile_call(agent, wait.call) for _, wait in lost))
    out: dict[int, ToolResultEvent] = {}
    for (index, wait), answer in zip(lost, answers, strict=True):
        call = wait.call
        block = ToolCallBlock(id=call.call_id, name=call.name, arguments=call.arguments)
        out[index] = answer or conservative_result(call.turn, call.step, block, wait.call_seq)
    return out
