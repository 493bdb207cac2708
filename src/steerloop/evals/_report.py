"""``ReplayReport``: what a recorded session's turns came to when run again, as JSON or as
Markdown."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from ._markdown import report_lines
from ._records import Divergence, ReplayTotals, TurnReport

__all__ = ["ReplayReport"]


@dataclass(frozen=True, slots=True, kw_only=True)
class ReplayReport:
    """What a recorded session's turns came to when run again with another model or prompt.

    ``diverged_at`` is the first divergence of all turns (``None``: the new run did what the
    recording did); ``turns`` has one ``TurnReport`` per replayed turn; ``totals`` the sums.
    """

    session_id: str
    replay_session_id: str
    recorded_model: str | None
    model: str
    from_turn: int
    tools: Literal["recorded", "live"]
    system_prompt: str | None
    turns: tuple[TurnReport, ...]
    totals: ReplayTotals
    notes: tuple[str, ...] = ()

    @property
    def divergences(self) -> tuple[Divergence, ...]:
        """Every turn's divergences, in turn order."""
        return tuple(d for t in self.turns for d in t.divergences)

    @property
    def diverged_at(self) -> Divergence | None:
        return next(iter(self.divergences), None)

    def to_json(self) -> dict[str, Any]:
        """The report as a JSON object (``json.dumps`` takes it as it is)."""
        first = self.diverged_at
        return {
            "session_id": self.session_id,
            "replay_session_id": self.replay_session_id,
            "recorded_model": self.recorded_model,
            "model": self.model,
            "from_turn": self.from_turn,
            "tools": self.tools,
            "system_prompt": self.system_prompt,
            "diverged_at": first.to_json() if first is not None else None,
            "turns": [t.to_json() for t in self.turns],
            "totals": self.totals.to_json(),
            "notes": list(self.notes),
        }

    def to_markdown(self) -> str:
        """The report for people: a summary table, then each turn side by side."""
        first = self.diverged_at
        header = {
            "session_id": self.session_id,
            "replay_session_id": self.replay_session_id,
            "recorded_model": self.recorded_model,
            "model": self.model,
            "tools": self.tools,
            "system_prompt": self.system_prompt,
        }
        return "\n".join(report_lines(header, first, self.turns, self.totals, self.notes)) + "\n"
