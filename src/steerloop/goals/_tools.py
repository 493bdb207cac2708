"""The model's goal tools: ``read_goal``, ``complete_goal``, ``block_goal``.

Each acts on the goal of the agent that called it (``exec.agent``). The changing tools take
the revision the model read (from ``read_goal`` or the goal-round prompt) and refuse a stale
one, so the model never completes or blocks a goal that was edited, replaced or cleared
since it looked. Refusals are error results with the tool's own codes: ``NO_GOAL``,
``GOAL_STALE_REVISION``, ``GOAL_STATE``.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, Field

from ..agent import Agent
from ..tools import Tool, ToolError, ToolExec, ToolResult, define_tool
from ._model import GoalRevisionError, GoalStateError, goal_to_json

if TYPE_CHECKING:
    from collections.abc import Callable

    from ._domain import SessionGoal

__all__ = ["BLOCKED_BY_MODEL", "goal_tools"]

BLOCKED_BY_MODEL = "BLOCKED_BY_MODEL"


class _NoArgs(BaseModel):
    pass


class _CompleteArgs(BaseModel):
    revision: int = Field(description="The goal revision you are acting on (from read_goal).")
    evidence: str = Field(min_length=1, description="What shows the objective is achieved.")


class _BlockArgs(BaseModel):
    revision: int = Field(description="The goal revision you are acting on (from read_goal).")
    reason: str = Field(min_length=1, description="Why the goal cannot progress.")


def _error(code: str, message: str) -> ToolResult:
    return ToolResult(content=message, is_error=True, error=ToolError(code))


def goal_tools(goal_of: Callable[[Agent], SessionGoal]) -> list[Tool]:
    """The three goal tools, acting on the goal ``goal_of`` gives for the calling agent."""

    def goal_for(exec: ToolExec) -> SessionGoal:
        agent = exec.agent
        if not isinstance(agent, Agent):  # a tool call runs for an Agent; anything else is misuse
            raise TypeError("the goal tools run only inside a steerloop Agent")
        return goal_of(agent)

    async def read_goal(args: _NoArgs, exec: ToolExec) -> Any:
        goal = goal_for(exec)
        current = goal.current
        return {
            "goal": goal_to_json(current) if current is not None else None,
            "armed": goal.armed,
        }

    def changing(verb: str, args: Any, exec: ToolExec) -> ToolResult:
        goal = goal_for(exec)
        if goal.current is None:
            return _error("NO_GOAL", "there is no goal in this session")
        try:
            if verb == "complete":
                new = goal.complete(args.revision, args.evidence)
            else:
                new = goal.block(args.revision, BLOCKED_BY_MODEL, args.reason)
        except GoalRevisionError as exc:
            return _error("GOAL_STALE_REVISION", f"{exc}; read the goal again before acting on it")
        except GoalStateError as exc:
            return _error("GOAL_STATE", str(exc))
        return ToolResult(content=json.dumps({"goal": goal_to_json(new)}, ensure_ascii=False))

    async def complete_goal(args: _CompleteArgs, exec: ToolExec) -> ToolResult:
        return changing("complete", args, exec)

    async def block_goal(args: _BlockArgs, exec: ToolExec) -> ToolResult:
        return changing("block", args, exec)

    return [
        define_tool(
            name="read_goal",
            description="Read the session's current goal: objective, phase, revision, rounds.",
            parameters=_NoArgs,
            execute=read_goal,
            concurrency_safe=True,
        ),
        define_tool(
            name="complete_goal",
            description="Mark the current goal achieved, with the evidence. Pass the "
            "revision you read; a stale revision is refused.",
            parameters=_CompleteArgs,
            execute=complete_goal,
            # Atomic (no await between the check and the append) and workspace-neutral.
            concurrency_safe=True,
        ),
        define_tool(
            name="block_goal",
            description="Stop the current goal because it cannot progress, with the reason. "
            "Pass the revision you read; a stale revision is refused.",
            parameters=_BlockArgs,
            execute=block_goal,
            concurrency_safe=True,
        ),
    ]
