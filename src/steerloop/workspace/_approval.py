"""The approval policy: a ``tools/pre-execute`` listener that gates tools which may write."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Literal, get_args

from .._hooks import Disposer
from ..errors import AbortedError
from ..tools import ToolDecision, ToolExec, ToolHookPayload

if TYPE_CHECKING:
    from .._runtime import Runtime

__all__ = ["WRITER_TOOLS", "ApprovalMode", "install_approval"]

ApprovalMode = Literal["ask", "auto", "read-only"]
Ask = Callable[[ToolExec], Awaitable[bool]]

#: The workspace tools that change the workspace; any tool that is not concurrency-safe for
#: its arguments counts as a writer too.
WRITER_TOOLS = frozenset({"write_file", "edit", "shell"})

DENIED_BY_USER = "denied by the user"


def install_approval(rt: Runtime, mode: ApprovalMode, ask: Ask | None = None) -> Disposer:
    """Register the approval policy for ``mode`` on ``rt``'s ``tools/pre-execute`` hook.

    * ``auto`` — every call runs.
    * ``read-only`` — writers are denied with a reason naming the mode.
    * ``ask`` — for each writer, ``await ask(exec)``; ``False`` denies it ("denied by the
      user"). Reads are not asked about. If the call is cancelled while the answer is
      pending, the policy stops waiting (the call ends ``ABORTED_BEFORE_DISPATCH``).

    The policy never returns ``allow()``: when it has no objection it returns ``None`` so
    the policies registered after it still run.

    Args:
        rt: the runtime whose hook bus and tool registry are used.
        mode: ``"ask"``, ``"auto"`` or ``"read-only"``.
        ask: the prompt for ``"ask"`` (required there, ignored otherwise).

    Raises:
        ValueError: an unknown mode, or ``"ask"`` without ``ask``.
    """
    if mode not in get_args(ApprovalMode):
        raise ValueError(f"approval mode must be one of {get_args(ApprovalMode)}, not {mode!r}")
    if mode == "ask" and ask is None:
        raise ValueError("approval mode 'ask' needs an ask(exec) callback")

    def is_writer(exec: ToolExec) -> bool:
        if exec.name in WRITER_TOOLS:
            return True
        agent_id = None if exec.agent is None else str(exec.agent.id)
        tool = rt.tools.get(exec.name, agent_id)
        return tool is None or not tool.is_concurrency_safe(exec.arguments)

    async def policy(payload: ToolHookPayload) -> ToolDecision | None:
        exec = payload.exec
        if mode == "auto" or not is_writer(exec):
            return None
        if mode == "read-only":
            return ToolDecision.deny(
                f"{exec.name!r} may change the workspace and the session is in read-only mode"
            )
        if ask is None:  # refused above; kept for the type checker
            return ToolDecision.deny(DENIED_BY_USER)
        if exec.signal.aborted:  # an earlier policy outlasted the call: do not prompt
            return ToolDecision.deny("cancelled before approval was asked")
        pending = asyncio.ensure_future(ask(exec))
        # The prompt outlives a cancelled call; its late failure must not go unretrieved.
        pending.add_done_callback(_retrieve)
        try:
            approved = await exec.signal.race(pending)
        except AbortedError:
            # The pipeline reports the abort itself once the policy returns.
            return ToolDecision.deny("cancelled while waiting for approval")
        return None if approved else ToolDecision.deny(DENIED_BY_USER)

    return rt.hooks.on("tools/pre-execute", policy)


def _retrieve(fut: asyncio.Future[bool]) -> None:
    if not fut.cancelled():
        fut.exception()
