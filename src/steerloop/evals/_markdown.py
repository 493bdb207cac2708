"""A replay report for people: a summary table, then each turn side by side."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..llm import TokenUsage
from ._records import CallMatch, Divergence, ReplayTotals, TurnReport, TurnRun, usage_json

__all__ = ["report_lines"]

#: Longest final text quoted per side (the JSON form keeps all of it).
TEXT_LIMIT = 1500
_ANSWERED = {
    "recording": "answered from the recording",
    "live": "run live",
    "not-recorded": "answered NOT_RECORDED",
    "refused": "refused by the runtime",
}


def report_lines(
    header: Mapping[str, Any],
    first: Divergence | None,
    turns: Sequence[TurnReport],
    totals: ReplayTotals,
    notes: Sequence[str],
) -> list[str]:
    prompt = header["system_prompt"]
    lines = [
        f"# Replay of session `{header['session_id']}`",
        "",
        "| | recorded | replay |",
        "|---|---|---|",
        f"| model | {header['recorded_model'] or '?'} | {header['model']} |",
        f"| session | `{header['session_id']}` | `{header['replay_session_id']}` |",
        "| system prompt | recorded | "
        + ("the recorded one" if prompt is None else f"replaced ({len(prompt)} characters)")
        + " |",
        f"| tools | ran | {_tools_mode(header['tools'])} |",
        "",
    ]
    if first is None:
        lines.append(
            "**No divergence:** the new run made the same tool calls and steps, gave the same "
            "final answers and ended each turn the same way."
        )
    else:
        lines.append(f"**First divergence:** turn {first.turn}, step {first.step} — {first.detail}")
    lines += ["", *_summary(turns, totals), ""]
    for turn in turns:
        lines += _turn_section(turn)
    lines += _totals_section(totals)
    if notes:
        lines += ["", "## Notes", "", *(f"- {note}" for note in notes)]
    return lines


def _tools_mode(mode: str) -> str:
    if mode == "live":
        return "from the recording; others live when they only read"
    return "from the recording only"


def _summary(turns: Sequence[TurnReport], totals: ReplayTotals) -> list[str]:
    lines = [
        "| turn | steps | tool calls (matched / new / missing) | tokens in · cached · out · "
        "reasoning | wall time | end | score |",
        "|---:|---|---|---|---|---|---|",
    ]
    for turn in turns:
        new = turn.new
        lines.append(
            f"| {turn.turn} | {turn.recorded.steps} → {new.steps if new else '-'} "
            f"| {turn.count('matched')} / {turn.count('new')} / {turn.count('missing')} "
            f"| {_tokens(turn.recorded.usage)} → {_tokens(new.usage) if new else '-'} "
            f"| {_seconds(turn.recorded.wall_ms)} → {_seconds(new.wall_ms) if new else '-'} "
            f"| {turn.recorded.end} → {new.end if new else 'not run'} "
            f"| {_score(turn.score)} |"
        )
    lines.append(
        f"| **all** | | {totals.matched} / {totals.new} / {totals.missing} "
        f"| {_tokens(totals.recorded_usage)} → {_tokens(totals.new_usage)} "
        f"| {_seconds(totals.recorded_wall_ms)} → {_seconds(totals.new_wall_ms)} | "
        f"| {_score(totals.score)} |"
    )
    return lines


def _turn_section(turn: TurnReport) -> list[str]:
    lines = [f"## Turn {turn.turn}", ""]
    for delivery in turn.inputs:
        if delivery.recorded_step == 1:
            lines += [f"> **{_who(delivery.target)}:** {_clip(delivery.text, 400)}", ""]
    lines += _side("Recorded", turn.recorded)
    lines += _side("Replay", turn.new) if turn.new is not None else ["**Replay:** not run", ""]
    if turn.calls:
        lines += ["Tool calls:", "", *(f"- {_call(c)}" for c in turn.calls), ""]
    later = [d for d in turn.inputs if d.recorded_step > 1]
    for delivery in later:
        where = (
            "never reached the model (the turn ended first)"
            if delivery.delivered_step is None
            else f"delivered at step {delivery.delivered_step}"
            + (" (the new run had fewer steps)" if delivery.moved else "")
        )
        lines.append(
            f"- {_who(delivery.target)} “{_clip(delivery.text, 80)}”: recorded at step "
            f"{delivery.recorded_step}, {where}"
        )
    if turn.cancel is not None:
        cancel = turn.cancel
        replayed = (
            "not replayed (the new turn had ended)"
            if cancel.replayed_step is None
            else f"replayed after step {cancel.replayed_step}"
        )
        lines.append(
            f"- cancel by the user: recorded after step {cancel.recorded_step}, {replayed}"
        )
    for divergence in turn.divergences:
        lines.append(f"- divergence at step {divergence.step}: {divergence.detail}")
    if later or turn.cancel is not None or turn.divergences:
        lines.append("")
    return lines


def _side(title: str, run: TurnRun) -> list[str]:
    steps = f"{run.steps} step{'s' if run.steps != 1 else ''}"
    model = f", {run.model}" if run.model else ""
    body = _clip(run.text, TEXT_LIMIT) if run.text else "_(no text)_"
    quoted = "\n".join(f"> {line}" if line else ">" for line in body.splitlines())
    return [f"**{title}** ({run.end}, {steps}{model}):", "", quoted, ""]


def _call(match: CallMatch) -> str:
    text = f"`{match.name}({_clip(match.arguments, 120)})`"
    if match.status == "missing":
        return f"missing {text} — step {match.recorded_step} of the recording only"
    answered = _ANSWERED.get(match.answered or "", "")
    if match.status == "new":
        return f"new {text} — step {match.new_step}, {answered}"
    return f"matched {text} — step {match.recorded_step} → step {match.new_step}, {answered}"


def _totals_section(totals: ReplayTotals) -> list[str]:
    recorded, new = usage_json(totals.recorded_usage), usage_json(totals.new_usage)
    lines = ["## Totals", ""]
    lines.append(f"- turns: {totals.turns}, diverged: {totals.diverged_turns}")
    for name in ("input", "cached", "output", "reasoning"):
        lines.append(f"- {name} tokens: {recorded[name]} → {new[name]}")
    lines.append(
        f"- wall time: {_seconds(totals.recorded_wall_ms)} → {_seconds(totals.new_wall_ms)}"
    )
    lines.append(
        f"- tool calls: {totals.matched} matched, {totals.new} new, {totals.missing} missing; "
        f"{totals.tool_executions} run live, {totals.not_recorded} answered NOT_RECORDED"
    )
    lines.append(
        f"- approvals: {totals.approvals_replayed} replayed as decided, "
        f"{totals.approvals_denied} new ones denied"
    )
    if totals.score is not None:
        lines.append(f"- mean score: {_score(totals.score)}")
    return lines


def _who(target: str) -> str:
    return "user" if target == "next-turn" else "steer"


def _tokens(usage: TokenUsage) -> str:
    counts = usage_json(usage)
    return "·".join(str(counts[k]) for k in ("input", "cached", "output", "reasoning"))


def _seconds(ms: int) -> str:
    return f"{ms} ms" if ms < 1000 else f"{ms / 1000:.1f} s"


def _score(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def _clip(text: str, limit: int) -> str:
    text = text.strip()
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"
