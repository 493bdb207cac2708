"""Reconciling unknown outcomes: at recovery, ask a call's tool what actually happened.

A call with a durable ``tool/call`` and no ``tool/result`` is ``TOOL_OUTCOME_UNKNOWN``: its
body may or may not have had its effect. A tool that can tell (``reconcile(call, exec)``:
``write_file`` compares the file with the content it was to write) is asked before that
answer is written; a ``ToolResult`` it returns is recorded instead, marked
``reconciled: true``. ``None``, an error, a result that is not a ``ToolResult`` or that the
log cannot store, and no answer within the timeout all keep the call unknown: reconcile can
only make the log more exact, never less.

The calls of one recovery are asked concurrently, each under its own deadline; the deadline
aborts ``exec.signal`` (cooperative, like a body's timeout) and the answer is no longer
waited for. A synchronous ``reconcile`` runs in a worker thread.
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from .._cancel import escapes
from .._signal import AbortController
from ..errors import AbortedError
from ..messages import ToolCallBlock, check_json
from ..session._encode import encode
from ..session._events import SessionEvent, ToolCallEvent, ToolResultEvent
from ..session._repair import RepairEvent
from ..tools._define import Tool, ToolExec, ToolResult
from ..tools._runtime import parse_arguments, result_event

if TYPE_CHECKING:
    from ._loop_agent import LoopAgent as Agent

__all__ = ["close_seed_reconciled", "is_unknown", "reconcile_call", "reconcile_fixes"]

_log = logging.getLogger("steerloop")


def is_unknown(data: object) -> bool:
    """Whether ``data`` is a conservative ``TOOL_OUTCOME_UNKNOWN`` result."""
    return (
        isinstance(data, ToolResultEvent)
        and data.error is not None
        and data.error.code == "TOOL_OUTCOME_UNKNOWN"
        and not data.reconciled
    )


async def close_seed_reconciled(
    agent: Agent, seed: Sequence[SessionEvent], fixes: Sequence[RepairEvent]
) -> None:
    """Close a resumed seed with its restore repair ``fixes``, its unknown outcomes
    reconciled first (C7.2-9: the repair still comes before anything of the new lifecycle
    is stored)."""
    calls: list[ToolCallEvent | None] = []
    for fix in fixes:
        cited = fix.source_event_seqs[0] if fix.source_event_seqs else 0
        data = seed[cited - 1].data if 0 < cited <= len(seed) else None
        calls.append(data if isinstance(data, ToolCallEvent) else None)
    agent.session.close_seed(await reconcile_fixes(agent, fixes, calls))


async def reconcile_fixes(
    agent: Agent, fixes: Sequence[RepairEvent], calls: Sequence[ToolCallEvent | None]
) -> list[RepairEvent]:
    """``fixes`` with each unknown result a tool reconciled replaced by its answer.

    ``calls[i]`` is the ``tool/call`` an unknown ``fixes[i]`` cites (``None`` elsewhere).
    """
    asks: dict[int, asyncio.Future[ToolResultEvent | None]] = {}
    for index, fix in enumerate(fixes):
        call = calls[index]
        if call is not None and is_unknown(fix.data):
            asks[index] = asyncio.ensure_future(reconcile_call(agent, call))
    if not asks:
        return list(fixes)
    await asyncio.wait(asks.values())
    out = list(fixes)
    for index, asked in asks.items():
        answer = asked.result()  # reconcile_call raises only for the host's own exceptions
        if answer is not None:
            out[index] = dataclasses.replace(fixes[index], data=answer)
    return out


async def reconcile_call(agent: Agent, call: ToolCallEvent) -> ToolResultEvent | None:
    """The reconciled ``tool/result`` of ``call`` (whose outcome is unknown), or ``None``."""
    services = agent.services
    tool = services.tools.get(call.name, agent.id)
    if tool is None or tool.reconcile is None:
        return None
    args, parse_error = parse_arguments(call.arguments)
    if parse_error is not None:
        return None  # never dispatched: its body cannot have run (and recovery says so)
    try:
        validated = tool.validate(args)
    except Exception:
        return None  # the tool's schema changed since: its reconcile cannot read the call
    controller = AbortController()
    exec = ToolExec(
        call_id=call.call_id,
        name=call.name,
        arguments=validated,
        raw_arguments=call.arguments,
        signal=controller.signal,
        agent=agent,
        turn=call.turn,
        step=call.step,
    )
    block = ToolCallBlock(id=call.call_id, name=call.name, arguments=call.arguments)
    timeout = services.limits.reconcile_timeout
    timer = asyncio.get_running_loop().call_later(
        timeout,
        controller.abort,
        TimeoutError(f"reconcile of {call.name!r} took longer than {timeout}s"),
    )
    try:
        answer = await controller.signal.race(_ask(tool, block, exec))
    except AbortedError:
        _log.warning("reconcile of %s call %r: no answer in %ss", call.name, call.call_id, timeout)
        return None
    except BaseException as exc:
        if escapes(exc):
            raise
        _log.warning("reconcile of %s call %r failed: %r", call.name, call.call_id, exc)
        return None
    finally:
        timer.cancel()
    if answer is None:
        return None
    return _recorded(agent, call, answer)


async def _ask(tool: Tool, block: ToolCallBlock, exec: ToolExec) -> Any:
    reconcile = tool.reconcile
    assert reconcile is not None
    if inspect.iscoroutinefunction(reconcile):
        return await reconcile(block, exec)
    value = await asyncio.to_thread(reconcile, block, exec)
    if inspect.isawaitable(value):
        return await value
    return value


def _recorded(agent: Agent, call: ToolCallEvent, answer: Any) -> ToolResultEvent | None:
    """The ``tool/result`` of a reconciled ``answer``; ``None`` when the log cannot take it."""
    if not isinstance(answer, ToolResult):
        _log.warning(
            "reconcile of %s call %r returned %s, not a ToolResult or None",
            call.name,
            call.call_id,
            type(answer).__name__,
        )
        return None
    try:
        event = result_event(
            call.turn, call.step, call.call_id, answer, agent.services.ids("msg"), reconciled=True
        )
        check_json(encode(event), "a reconciled tool result")
    except Exception as exc:
        _log.warning("reconcile of %s call %r: unusable result: %r", call.name, call.call_id, exc)
        return None
    return event
