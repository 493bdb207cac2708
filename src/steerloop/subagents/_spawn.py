"""Spawning a child agent for one task: ``spawn()`` and the ``spawn_agent`` tool.

A child is an ordinary agent created with ``parent=``: the registry records the edge
(``rt.agents.children(parent)``) and the factory's teardown disposes children before their
parent's scope and session close (C7.2-20). Its log is its own session, linked to the
parent's through the session header (``parent_session``, ``delegation_depth``, ``origin``),
which setup writes before publication so the store keeps it with the first event.

Cancellation flows down: when the caller's signal (the ``spawn_agent`` call's
``exec.signal``) aborts, the child is cancelled with ``CancelCause.parent()`` and the call
waits until the child is idle again, so no child turn outlives the parent's turn.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, Field

from .. import AbortSignal, CancelCause, Runtime
from ..agent import Agent, AgentOptions
from ..errors import AbortedError, SteerloopError
from ..hooks import Disposer
from ..ids import new_id
from ..messages import TextBlock, user_message
from ..session.events import AssistantMessageEvent, TurnEnd, TurnEndReason
from ..tools import Tool, ToolError, ToolExec, ToolResult, define_tool

if TYPE_CHECKING:
    from ..agent import AgentScope

__all__ = [
    "DEFAULT_MAX_DEPTH",
    "DELEGATION_DEPTH_EXCEEDED",
    "SUBAGENT_BLOCKED",
    "SUBAGENT_FAILED",
    "DelegationDepthError",
    "SpawnArgs",
    "SpawnResult",
    "delegation_depth",
    "install_subagents",
    "spawn",
    "spawn_agent_tool",
]

DEFAULT_MAX_DEPTH = 2
DELEGATION_DEPTH_EXCEEDED = "DELEGATION_DEPTH_EXCEEDED"
SUBAGENT_FAILED = "SUBAGENT_FAILED"
SUBAGENT_BLOCKED = "SUBAGENT_BLOCKED"

Setup = Callable[["AgentScope"], Any]


class DelegationDepthError(SteerloopError):
    """Spawning would go deeper than the configured delegation depth limit."""


@dataclass(frozen=True, slots=True, kw_only=True)
class SpawnResult:
    """What a child produced for its task."""

    session_id: str
    answer: str
    end: TurnEndReason


def delegation_depth(agent: Agent) -> int:
    """How many delegations separate ``agent`` from a top-level agent (``0`` for one).

    The session header's ``delegation_depth`` when set there, else the live parent chain.
    """
    depth = agent.session.header.get("delegation_depth")
    if isinstance(depth, int) and not isinstance(depth, bool) and depth >= 0:
        return depth
    return 0 if agent.parent is None else delegation_depth(agent.parent) + 1


async def spawn(
    rt: Runtime,
    parent: Agent,
    task: str,
    *,
    session_id: str | None = None,
    agent_options: AgentOptions | None = None,
    setup: Setup | None = None,
    max_depth: int = DEFAULT_MAX_DEPTH,
    signal: AbortSignal | None = None,
    keep: bool = False,
    origin: dict[str, Any] | None = None,
) -> SpawnResult:
    """Create a child of ``parent``, run ``task`` as its prompt, return its final answer.

    Args:
        session_id: the child's session id; default ``"<parent id>/<fresh id>"``.
        agent_options: the child's options; default the parent's.
        setup: composes the child (tools, hooks, prompt) like ``rt.agents.create``'s.
        max_depth: the deepest delegation allowed (a top-level agent is at depth 0).
        signal: when it aborts, the child is cancelled with ``CancelCause.parent()``.
        keep: leave the child live (it is then disposed with its parent) instead of
            disposing it once it answered.
        origin: stored in the child's session header as ``origin``.

    Raises:
        DelegationDepthError: the child would be deeper than ``max_depth``.
        AbortedError: the signal aborted (the child's turn then ended ``aborted``).
    """
    if not isinstance(task, str) or not task.strip():
        raise ValueError("task must be a non-empty string")
    depth = delegation_depth(parent) + 1
    if depth > max_depth:
        raise DelegationDepthError(
            f"delegation depth limit reached: agent {parent.id!r} is at depth {depth - 1} "
            f"and the limit is {max_depth}, so it cannot spawn another agent"
        )
    if signal is not None:
        signal.throw_if_aborted()
    child_id = session_id or f"{parent.id}/{new_id('sub')}"

    def child_setup(scope: AgentScope) -> Any:
        header = scope.agent.session.header
        header["parent_session"] = parent.id
        header["delegation_depth"] = depth
        if origin is not None:
            header["origin"] = dict(origin)
        return setup(scope) if setup is not None else None

    handle = await rt.agents.create(
        session_id=child_id,
        agent_options=agent_options or parent.options,
        setup=child_setup,
        parent=parent,
    )
    try:
        return await _run_task(handle.agent, parent, task, signal)
    finally:
        if not keep:
            await handle.dispose()


async def _run_task(
    child: Agent, parent: Agent, task: str, signal: AbortSignal | None
) -> SpawnResult:
    stop = None
    if signal is not None:
        stop = signal.add_listener(lambda reason: child.cancel(CancelCause.parent()))
    try:
        if signal is not None:
            signal.throw_if_aborted()
        child.followup(user_message(task, source={"kind": "user", "delegated_by": parent.id}))
        turn = child.session.last_turn  # an idle followup opened the task's turn already
        # Cooperative: after a cancel this still waits for the child's turn to close.
        await child.when_idle()
    finally:
        if stop is not None:
            stop()
    end, answer = _outcome(child, turn)
    if end.kind == "aborted":
        raise AbortedError(end.reason)
    return SpawnResult(session_id=child.id, answer=answer, end=end)


def _outcome(child: Agent, turn: int) -> tuple[TurnEndReason, str]:
    """The task turn's end reason and its last assistant text."""
    answer = ""
    end: TurnEndReason | None = None
    inside = False
    for event in child.session.events:
        data = event.data
        if event.type == "turn/start":
            inside = data.turn == turn
        elif inside and isinstance(data, AssistantMessageEvent) and not data.interrupted:
            text = "\n".join(b.text for b in data.message.content if isinstance(b, TextBlock))
            if text:
                answer = text
        elif inside and isinstance(data, TurnEnd):
            end = data.reason
            break
    if end is None:
        raise RuntimeError(f"sub-agent {child.id!r} did not close turn {turn}")
    return end, answer


class SpawnArgs(BaseModel):
    """Arguments of ``spawn_agent``."""

    task: str = Field(
        min_length=1,
        description="The complete, self-contained task for the sub-agent; it sees nothing "
        "else of this conversation.",
    )


def _call_seq(exec: ToolExec) -> int:
    events = exec.agent.session.events
    for index in range(len(events) - 1, -1, -1):
        event = events[index]
        if event.type == "tool/call" and event.data.call_id == exec.call_id:
            return int(event.seq)
    return int(exec.agent.session.next_seq)


def spawn_agent_tool(
    *,
    agent_options: AgentOptions | None = None,
    setup: Setup | None = None,
    max_depth: int = DEFAULT_MAX_DEPTH,
    name: str = "spawn_agent",
) -> Tool:
    """A tool that delegates a task to a fresh in-process child agent.

    The child's session id is ``"<parent id>/sub-<seq>"`` where ``seq`` is the parent's
    ``tool/call`` event of that call, so each call gets its own, reproducible session. The
    result is the child's final answer; ``meta`` names the child's session. Refusals are
    error results: ``DELEGATION_DEPTH_EXCEEDED``, ``SUBAGENT_FAILED`` (the child's turn
    ended ``error``), ``SUBAGENT_BLOCKED`` (it ended ``blocked``). Several calls of one step
    run concurrently.
    """

    async def execute(args: SpawnArgs, exec: ToolExec) -> ToolResult:
        parent = exec.agent
        rt = parent.runtime if isinstance(parent, Agent) else None
        if not isinstance(parent, Agent) or not isinstance(rt, Runtime):
            # A tool call always runs for an Agent of a Runtime; anything else is a misuse.
            raise TypeError("spawn_agent runs only inside an agent of a steerloop Runtime")
        try:
            result = await spawn(
                rt,
                parent,
                args.task,
                session_id=f"{parent.id}/sub-{_call_seq(exec)}",
                agent_options=agent_options,
                setup=setup,
                max_depth=max_depth,
                signal=exec.signal,
                origin={"kind": "tool", "tool": name, "call_id": exec.call_id},
            )
        except DelegationDepthError as exc:
            return _error(DELEGATION_DEPTH_EXCEEDED, str(exc))
        meta = {"session_id": result.session_id, "end": result.end.kind}
        if result.end.kind == "error":
            failure = result.end.error.message if result.end.error is not None else "unknown"
            return _error(SUBAGENT_FAILED, f"the sub-agent failed: {failure}", meta)
        if result.end.kind == "blocked":
            return _error(SUBAGENT_BLOCKED, "the sub-agent's turn was blocked by policy", meta)
        return ToolResult(content=result.answer or "(the sub-agent gave no answer)", meta=meta)

    return define_tool(
        name=name,
        description="Delegate a self-contained task to a sub-agent and get its final answer.",
        parameters=SpawnArgs,
        execute=execute,
        concurrency_safe=True,
    )


def _error(code: str, message: str, meta: Any = None) -> ToolResult:
    return ToolResult(content=message, is_error=True, error=ToolError(code), meta=meta)


def install_subagents(
    rt: Runtime,
    *,
    agent_options: AgentOptions | None = None,
    setup: Setup | None = None,
    max_depth: int = DEFAULT_MAX_DEPTH,
) -> Disposer:
    """Register ``spawn_agent`` on ``rt.tools`` (visible to every agent); returns its disposer."""
    if isinstance(max_depth, bool) or not isinstance(max_depth, int) or max_depth < 0:
        raise ValueError(f"max_depth must be a non-negative integer, not {max_depth!r}")
    return rt.tools.register(
        spawn_agent_tool(agent_options=agent_options, setup=setup, max_depth=max_depth)
    )
