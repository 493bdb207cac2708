"""The records a replay report is made of (each with its JSON form)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from ..llm import TokenUsage

__all__ = [
    "CallMatch",
    "CallRecord",
    "CancelReplay",
    "Delivery",
    "Divergence",
    "ReplayTotals",
    "TurnReport",
    "TurnRun",
    "usage_json",
]

DivergenceKind = Literal["tool-calls", "steps", "text", "outcome", "not-run"]
Answer = Literal["recording", "live", "not-recorded", "refused"]


def usage_json(usage: TokenUsage) -> dict[str, int]:
    """The four counts a report shows: input, cached (cache reads), output, reasoning."""
    return {
        "input": usage.input_tokens,
        "cached": usage.cache_read_tokens or 0,
        "output": usage.output_tokens,
        "reasoning": usage.reasoning_tokens or 0,
    }


@dataclass(frozen=True, slots=True, kw_only=True)
class CallRecord:
    """A tool call of one side: where, what, and its result's error code (``None``: ok)."""

    step: int
    call_id: str
    name: str
    arguments: str
    error: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "step": self.step,
            "call_id": self.call_id,
            "name": self.name,
            "arguments": self.arguments,
            "error": self.error,
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class TurnRun:
    """One side of a turn (the recorded run or the new one), what ``score`` receives."""

    turn: int
    end: str
    text: str
    steps: int
    calls: tuple[CallRecord, ...]
    usage: TokenUsage
    wall_ms: int
    model: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "turn": self.turn,
            "end": self.end,
            "text": self.text,
            "steps": self.steps,
            "calls": [c.to_json() for c in self.calls],
            "usage": usage_json(self.usage),
            "wall_ms": self.wall_ms,
            "model": self.model,
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class CallMatch:
    """A call of the turn on either side: ``matched`` (same name and arguments on both),
    ``new`` (only the new run made it) or ``missing`` (only the recording has it), and what
    answered the new run's call."""

    status: Literal["matched", "new", "missing"]
    name: str
    arguments: str
    recorded_step: int | None
    new_step: int | None
    answered: Answer | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "name": self.name,
            "arguments": self.arguments,
            "recorded_step": self.recorded_step,
            "new_step": self.new_step,
            "answered": self.answered,
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class Delivery:
    """A recorded input fed again: the step it reached the model at in the recording and in
    the new run (``None``: never, e.g. the turn ended first)."""

    message_id: str
    target: str
    text: str
    recorded_step: int
    delivered_step: int | None

    @property
    def moved(self) -> bool:
        return self.delivered_step is not None and self.delivered_step != self.recorded_step

    def to_json(self) -> dict[str, Any]:
        return {
            "message_id": self.message_id,
            "target": self.target,
            "text": self.text,
            "recorded_step": self.recorded_step,
            "delivered_step": self.delivered_step,
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class CancelReplay:
    """A person's recorded cancel: after which step it came, and after which the replay
    cancelled (``None``: the new turn had already ended)."""

    recorded_step: int
    replayed_step: int | None

    def to_json(self) -> dict[str, Any]:
        return {"recorded_step": self.recorded_step, "replayed_step": self.replayed_step}


@dataclass(frozen=True, slots=True, kw_only=True)
class Divergence:
    """Where the new run first did something else in a turn: ``tool-calls`` (a step called
    other tools or other arguments), ``steps`` (another number of steps), ``text`` (another
    final answer), ``outcome`` (another end reason) or ``not-run`` (the turn could not run)."""

    turn: int
    step: int
    kind: DivergenceKind
    detail: str

    def __str__(self) -> str:
        return f"turn {self.turn}, step {self.step}: {self.detail}"

    def to_json(self) -> dict[str, Any]:
        return {"turn": self.turn, "step": self.step, "kind": self.kind, "detail": self.detail}


@dataclass(frozen=True, slots=True, kw_only=True)
class TurnReport:
    """One recorded turn against its replay."""

    turn: int
    replay_turn: int | None
    recorded: TurnRun
    new: TurnRun | None
    calls: tuple[CallMatch, ...]
    inputs: tuple[Delivery, ...]
    cancel: CancelReplay | None
    divergences: tuple[Divergence, ...]
    score: float | None = None

    def count(self, status: str) -> int:
        return sum(1 for c in self.calls if c.status == status)

    def to_json(self) -> dict[str, Any]:
        return {
            "turn": self.turn,
            "replay_turn": self.replay_turn,
            "recorded": self.recorded.to_json(),
            "new": self.new.to_json() if self.new is not None else None,
            "calls": [c.to_json() for c in self.calls],
            "inputs": [d.to_json() for d in self.inputs],
            "cancel": self.cancel.to_json() if self.cancel is not None else None,
            "divergences": [d.to_json() for d in self.divergences],
            "score": self.score,
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class ReplayTotals:
    """The report's sums over its turns (usage and wall time of each side, calls by status,
    tool bodies the replay ran, the mean score)."""

    turns: int
    diverged_turns: int
    recorded_usage: TokenUsage
    new_usage: TokenUsage
    recorded_wall_ms: int
    new_wall_ms: int
    matched: int
    new: int
    missing: int
    tool_executions: int
    not_recorded: int
    approvals_replayed: int
    approvals_denied: int
    score: float | None

    def to_json(self) -> dict[str, Any]:
        return {
            "turns": self.turns,
            "diverged_turns": self.diverged_turns,
            "recorded_usage": usage_json(self.recorded_usage),
            "new_usage": usage_json(self.new_usage),
            "recorded_wall_ms": self.recorded_wall_ms,
            "new_wall_ms": self.new_wall_ms,
            "calls": {"matched": self.matched, "new": self.new, "missing": self.missing},
            "tool_executions": self.tool_executions,
            "not_recorded": self.not_recorded,
            "approvals": {"replayed": self.approvals_replayed, "denied": self.approvals_denied},
            "score": self.score,
        }
