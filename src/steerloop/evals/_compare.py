"""A recorded turn against its replay: call matches, input deliveries, divergences."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence

from ..agent import sum_usage
from ._recording import Call, Matcher, Turn
from ._records import (
    Answer,
    CallMatch,
    CallRecord,
    CancelReplay,
    Delivery,
    Divergence,
    ReplayTotals,
    TurnReport,
    TurnRun,
)

__all__ = ["compare_turn", "run_of", "totals_of"]

_KIND_ORDER = {"not-run": 0, "tool-calls": 1, "steps": 2, "text": 3, "outcome": 4}


def run_of(turn: Turn) -> TurnRun:
    """One side of a report from a turn read back."""
    return TurnRun(
        turn=turn.number,
        end=turn.end.kind if turn.end is not None else "open",
        text=turn.text,
        steps=turn.steps,
        calls=tuple(
            CallRecord(
                step=c.step,
                call_id=c.call_id,
                name=c.name,
                arguments=c.arguments,
                error=c.error_code,
            )
            for c in turn.calls
        ),
        usage=turn.usage,
        wall_ms=turn.wall_ms,
        model=turn.model,
    )


def compare_turn(
    recorded: Turn,
    new: Turn | None,
    *,
    matcher: Matcher,
    answered: Mapping[tuple[int, int, str], Answer],
    cancel: CancelReplay | None,
) -> TurnReport:
    """``recorded`` against ``new`` (``None``: the turn did not run)."""
    return TurnReport(
        turn=recorded.number,
        replay_turn=new.number if new is not None else None,
        recorded=run_of(recorded),
        new=run_of(new) if new is not None else None,
        calls=_calls(recorded, new, matcher, answered),
        inputs=_deliveries(recorded, new),
        cancel=cancel,
        divergences=_divergences(recorded, new),
    )


def _calls(
    recorded: Turn,
    new: Turn | None,
    matcher: Matcher,
    answered: Mapping[tuple[int, int, str], Answer],
) -> tuple[CallMatch, ...]:
    out: list[CallMatch] = []
    for call in new.calls if new is not None else ():
        at = (call.turn, call.step, call.call_id)
        # Calls the runtime answered before any stand-in saw them are matched here.
        found = matcher.match(recorded, at, call.key)
        out.append(
            CallMatch(
                status="matched" if found is not None else "new",
                name=call.name,
                arguments=call.arguments,
                recorded_step=found.step if found is not None else None,
                new_step=call.step,
                answered=answered.get(at, "refused"),
            )
        )
    out += [
        CallMatch(
            status="missing",
            name=c.name,
            arguments=c.arguments,
            recorded_step=c.step,
            new_step=None,
        )
        for c in recorded.calls
        if not matcher.used(c)
    ]
    return tuple(out)


def _deliveries(recorded: Turn, new: Turn | None) -> tuple[Delivery, ...]:
    delivered = {i.message.id: i.step for i in new.inputs} if new is not None else {}
    return tuple(
        Delivery(
            message_id=i.message.id,
            target=i.target,
            text=_text(i.message.content),
            recorded_step=i.step,
            delivered_step=delivered.get(i.message.id),
        )
        for i in recorded.inputs
    )


def _text(content: Sequence[object]) -> str:
    return "".join(getattr(block, "text", "") for block in content)


def _divergences(recorded: Turn, new: Turn | None) -> tuple[Divergence, ...]:
    number = recorded.number
    if new is None:
        return (Divergence(turn=number, step=1, kind="not-run", detail="the turn did not run"),)
    found: list[Divergence] = []
    for step in range(1, max(recorded.steps, new.steps) + 1):
        detail = _calls_differ(recorded.calls_at(step), new.calls_at(step))
        if detail is not None:
            found.append(Divergence(turn=number, step=step, kind="tool-calls", detail=detail))
            break
    if recorded.steps != new.steps:
        found.append(
            Divergence(
                turn=number,
                step=min(recorded.steps, new.steps) + 1,
                kind="steps",
                detail=f"{_steps(new.steps)}; the recording had {recorded.steps}",
            )
        )
    if recorded.text != new.text:
        found.append(
            Divergence(
                turn=number,
                step=new.text_step or max(new.steps, 1),
                kind="text",
                detail=f"another final answer: {_quote(new.text)}; the recording's: "
                f"{_quote(recorded.text)}",
            )
        )
    old_end = recorded.end.kind if recorded.end is not None else "open"
    new_end = new.end.kind if new.end is not None else "open"
    if old_end != new_end:
        found.append(
            Divergence(
                turn=number,
                step=max(new.steps, 1),
                kind="outcome",
                detail=f"the turn ended {new_end}; the recording's ended {old_end}",
            )
        )
    found.sort(key=lambda d: (d.step, _KIND_ORDER[d.kind]))
    return tuple(found)


def _quote(text: str, limit: int = 80) -> str:
    line = " ".join(text.split())
    return f"“{line if len(line) <= limit else line[: limit - 1] + '…'}”" if line else "none"


def _steps(count: int) -> str:
    return f"{count} step" if count == 1 else f"{count} steps"


def _calls_differ(recorded: Sequence[Call], new: Sequence[Call]) -> str | None:
    """What the new step called that the recorded one did not, and the reverse."""
    extra = Counter(c.key for c in new) - Counter(c.key for c in recorded)
    missing = Counter(c.key for c in recorded) - Counter(c.key for c in new)
    if not extra and not missing:
        return None
    parts = []
    if extra:
        codes = {c.key: c.error_code for c in new}
        parts.append(
            "called "
            + ", ".join(_shown(key, codes.get(key)) for key in extra.elements())
            + ", not in the recording"
        )
    if missing:
        parts.append(
            "the recording called " + ", ".join(_shown(key, None) for key in missing.elements())
        )
    return "; ".join(parts)


def _shown(key: tuple[str, str], code: str | None) -> str:
    name, arguments = key
    if len(arguments) > 160:
        arguments = arguments[:159] + "…"
    answered = f" (answered {code})" if code else ""
    return f"`{name}({arguments})`{answered}"


def totals_of(
    turns: Sequence[TurnReport],
    *,
    tool_executions: int,
    not_recorded: int,
    approvals_replayed: int,
    approvals_denied: int,
) -> ReplayTotals:
    scores = [t.score for t in turns if t.score is not None]
    ran = [t.new for t in turns if t.new is not None]
    return ReplayTotals(
        turns=len(turns),
        diverged_turns=sum(1 for t in turns if t.divergences),
        recorded_usage=sum_usage([t.recorded.usage for t in turns]),
        new_usage=sum_usage([r.usage for r in ran]),
        recorded_wall_ms=sum(t.recorded.wall_ms for t in turns),
        new_wall_ms=sum(r.wall_ms for r in ran),
        matched=sum(t.count("matched") for t in turns),
        new=sum(t.count("new") for t in turns),
        missing=sum(t.count("missing") for t in turns),
        tool_executions=tool_executions,
        not_recorded=not_recorded,
        approvals_replayed=approvals_replayed,
        approvals_denied=approvals_denied,
        score=sum(scores) / len(scores) if scores else None,
    )
