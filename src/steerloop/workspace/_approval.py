"""The approval policy: a ``tools/pre-execute`` listener that gates tools which may write."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Literal, get_args

from ..agent import Agent
from ..errors import AbortedError, ApprovalError
from ..hooks import TOOLS_APPROVAL_REQUESTED, TOOLS_PRE_EXECUTE, Disposer
from ..tools import ApprovalHookPayload, ToolDecision, ToolExec, ToolHookPayload

if TYPE_CHECKING:
    from .. import Runtime

__all__ = ["WRITER_TOOLS", "ApprovalMode", "install_approval"]

ApprovalMode = Literal["ask", "auto", "read-only"]
Ask = Callable[[ToolExec], Awaitable[bool]]

_log = logging.getLogger("steerloop")

#: The workspace tools that change the workspace; any tool that is not concurrency-safe for
#: its arguments counts as a writer too.
WRITER_TOOLS = frozenset({"write_file", "edit", "shell"})

DENIED_BY_USER = "denied by the user"


def install_approval(
    rt: Runtime, mode: ApprovalMode, ask: Ask | None = None, *, by: str = "user"
) -> Disposer:
    """Register the approval policy for ``mode`` on ``rt``'s ``tools/pre-execute`` hook.

    * ``auto`` — every call runs.
    * ``read-only`` — writers are denied with a reason naming the mode.
    * ``ask`` — each writer gets ``ToolDecision.ask(reason)``: the loop writes
      ``tool/approval-requested`` and the call waits for ``agent.decide_approval`` (a
      served session answers over HTTP). Reads are not asked about. With ``ask``, an
      answerer is registered too: ``await ask(exec)`` for each request, then
      ``decide_approval(allow | deny, by=by)`` — the same durable events; ``False`` denies
      ("denied by the user"). If the turn is cancelled while the answer is pending, the
      call ends ``ABORTED_BEFORE_DISPATCH`` and the late answer is dropped.

    For reads (and in ``auto``) the policy returns ``None``, so the policies registered
    after it still run; a writer's ``ask``/deny is the chain's answer.

    Args:
        rt: the runtime whose hook bus and tool registry are used.
        mode: ``"ask"``, ``"auto"`` or ``"read-only"``.
        ask: an in-process answerer for ``"ask"`` (ignored otherwise).
        by: what ``tool/approval-decided.by`` records for ``ask``'s answers.

    Raises:
        ValueError: an unknown mode.
    """
    if mode not in get_args(ApprovalMode):
        raise ValueError(f"approval mode must be one of {get_args(ApprovalMode)}, not {mode!r}")

    def is_writer(exec: ToolExec) -> bool:
        if exec.name in WRITER_TOOLS:
            return True
        agent_id = None if exec.agent is None else str(exec.agent.id)
        tool = rt.tools.get(exec.name, agent_id)
        return tool is None or not tool.is_concurrency_safe(exec.arguments)

    def policy(payload: ToolHookPayload) -> ToolDecision | None:
        exec = payload.exec
        if mode == "auto" or not is_writer(exec):
            return None
        if mode == "read-only":
            return ToolDecision.deny(
                f"{exec.name!r} may change the workspace and the session is in read-only mode"
            )
        return ToolDecision.ask(f"{exec.name!r} may change the workspace")

    disposers = [rt.hooks.on(TOOLS_PRE_EXECUTE, policy)]
    if mode == "ask" and ask is not None:
        disposers.append(_install_answerer(rt, ask, by))

    def dispose() -> None:
        for undo in disposers:
            undo()

    return Disposer(dispose)


def _install_answerer(rt: Runtime, ask: Ask, by: str) -> Disposer:
    """Answer each approval request with ``ask(exec)`` through ``decide_approval``."""
    answering: set[asyncio.Task[None]] = set()

    async def answer(exec: ToolExec) -> None:
        agent = exec.agent
        if not isinstance(agent, Agent):  # pragma: no cover - the scheduler passes the agent
            return
        pending = asyncio.ensure_future(ask(exec))
        # The prompt may outlive a cancelled call; its late failure must not go unretrieved.
        pending.add_done_callback(_retrieve)
        try:
            approved = await exec.signal.race(pending)
        except AbortedError:
            return  # the scheduler answers the call (ABORTED_BEFORE_DISPATCH)
        try:
            if approved:
                agent.decide_approval(exec.call_id, "allow", by=by)
            else:
                agent.decide_approval(exec.call_id, "deny", reason=DENIED_BY_USER, by=by)
        except ApprovalError as exc:
            # Decided meanwhile by someone else, or its turn ended: the first answer stands.
            _log.debug("approval answer dropped: %s", exc)

    def on_request(payload: ApprovalHookPayload) -> None:
        task = asyncio.get_running_loop().create_task(answer(payload.exec))
        answering.add(task)
        task.add_done_callback(answering.discard)
        task.add_done_callback(_report)

    return rt.hooks.on(TOOLS_APPROVAL_REQUESTED, on_request)


def _retrieve(fut: asyncio.Future[bool]) -> None:
    if not fut.cancelled():
        fut.exception()


def _report(task: asyncio.Task[None]) -> None:
    if not task.cancelled() and task.exception() is not None:
        _log.error("approval answerer failed", exc_info=task.exception())
