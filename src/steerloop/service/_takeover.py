"""The message that continues a session after a takeover (design/SERVICE.md §3.4).

When a worker dies mid-turn, the worker that takes the session over resumes it; resume repair
(C7.2-9) closes the open turn with conservative tool results (``TOOL_OUTCOME_UNKNOWN`` for a
call whose body had started, ``TOOL_NOT_STARTED`` for one that never ran, including a call
held for an approval nobody decided) and ``turn/end{interrupted}``. With
``on_takeover="continue"`` the new owner then sends the model a plugin-sourced followup built
here, so the model knows which calls' effects are uncertain and carries on. Store-agnostic: it
reads only the events. A turn that was only waiting durably (a frontend tool's call, an input
request its transport can finish) is not repaired but taken up by the new owner, so there is
nothing to tell the model and no message is sent.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..messages import MessageSource, UserMessage, user_message
from ..session.events import AssistantMessageEvent, SessionEvent, ToolResultEvent, TurnEnd

__all__ = ["TAKEOVER_PLUGIN", "takeover_message"]

TAKEOVER_PLUGIN = "steerloop/takeover"
"""``source.plugin`` of the continue-after-takeover message."""

_UNKNOWN = "TOOL_OUTCOME_UNKNOWN"
_NOT_STARTED = "TOOL_NOT_STARTED"
_MAX_NAME = 80


def takeover_message(events: Sequence[SessionEvent], from_seq: int) -> UserMessage | None:
    """The followup that continues a turn interrupted by a runtime failure, or ``None``.

    Args:
        events: the session's log after the resume's repair.
        from_seq: the seq of the first event the repair could have written (the stored
            length before the resume, plus one); an interrupted turn closed by an earlier
            lifecycle is not this takeover's concern.

    Returns:
        A ``UserMessage`` with ``source = {kind: "plugin", plugin: "steerloop/takeover",
        turn: <the interrupted turn>}`` naming each call whose outcome is unknown and each
        call that was not started, in the order the repair answered them; ``None`` when the
        repair closed no turn.
    """
    ended = next(
        (
            event
            for event in events
            if event.seq >= from_seq
            and isinstance(event.data, TurnEnd)
            and event.data.reason.kind == "interrupted"
        ),
        None,
    )
    if ended is None:
        return None
    turn = ended.data.turn
    names: dict[str, str] = {}
    awaiting: set[str] = set()  # calls held for an approval nobody decided
    answers: list[tuple[str, str]] = []  # (call id, code) of the repair's results
    for event in events:
        data = event.data
        if isinstance(data, AssistantMessageEvent) and data.turn == turn:
            names.update((call.id, call.name) for call in data.message.tool_calls)
        elif event.type == "tool/approval-requested" and getattr(data, "turn", None) == turn:
            awaiting.add(str(getattr(data, "call_id", "")))
        elif event.type == "tool/approval-decided":
            awaiting.discard(str(getattr(data, "call_id", "")))
        elif (
            isinstance(data, ToolResultEvent)
            and from_seq <= event.seq < ended.seq
            and data.error is not None
            and data.error.code in (_UNKNOWN, _NOT_STARTED)
        ):
            answers.append((data.message.call_id, data.error.code))
    lines = [
        "The previous turn was interrupted by a runtime failure: the worker running this "
        "session stopped and another worker has taken the session over."
    ]
    for call_id, code in answers:
        what = _describe(names.get(call_id), call_id)
        if code == _UNKNOWN:
            lines.append(
                f"- {what}: its outcome is unknown. It was started but its result was never "
                "recorded, so its effects may or may not have happened; check the current "
                "state before relying on it or running it again."
            )
        elif call_id in awaiting:
            lines.append(
                f"- {what}: not started. It was waiting for an approval that was never "
                "decided; it did not run and had no effect."
            )
        else:
            lines.append(f"- {what}: not started. It did not run and had no effect.")
    lines.append("Continue the task from where it stopped.")
    return user_message(
        "\n".join(lines),
        source=MessageSource(kind="plugin", plugin=TAKEOVER_PLUGIN, extra={"turn": turn}),
    )


def _describe(name: str | None, call_id: str) -> str:
    """``tool "name" (call c7)``; names come from the model, so they are quoted, without
    control characters, and shortened."""
    cid = _clean(call_id)
    if name is None:
        return f"tool call {cid}"
    return f'tool "{_clean(name)}" (call {cid})'


def _clean(text: str) -> str:
    flat = "".join(ch if ch.isprintable() else " " for ch in text).replace('"', "'")
    return flat if len(flat) <= _MAX_NAME else flat[: _MAX_NAME - 1] + "…"
