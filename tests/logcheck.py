"""A reusable well-formedness check of a session log.

``log_problems(session)`` returns a list of human-readable problems (empty when the log is
well formed); ``assert_well_formed(session)`` fails the test with all of them. Checked:

* seqs are contiguous from 1;
* turns: exactly one ``turn/end`` per ``turn/start``, in order, never nested;
* steps: every ``step/start`` gets one matching ``step/end`` before its turn's end, and
  steps live inside a turn;
* tools: exactly one ``tool/result`` per ``tool/call`` (same call id, after the call, citing
  it through ``source_event_seqs``); a result without a call is only allowed as the
  ``TOOL_NOT_STARTED`` recovery answer; every tool call of a non-interrupted
  ``assistant/message`` is answered exactly once before its step ends; an interrupted
  message carries no tool calls;
* approvals: each ``tool/approval-requested`` follows its call's ``tool/call`` and precedes its
  ``tool/result``, once per call; at most one ``tool/approval-decided`` per request, between
  the two; ``deny`` gives ``DENIED``; a request closed without a decision is answered
  ``ABORTED_BEFORE_DISPATCH`` (cancel) or ``TOOL_NOT_STARTED`` (crash repair);
* inbox: folding ``agent/inbox/spliced`` events, every splice is in bounds, each inserted
  message id is removed at most once (no message claimed twice), and a ``user/message`` of
  an inbox message follows its claim, is never a dropped one, and appears only once;
* ``derive_messages()`` is provider-valid: each assistant message with tool calls is
  immediately followed by one result per call, in the message's order, and no tool result
  appears anywhere else.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

__all__ = ["assert_well_formed", "derived_problems", "log_problems"]

_TOOL_NOT_STARTED = "TOOL_NOT_STARTED"


def log_problems(session: Any) -> list[str]:
    """Every well-formedness problem of ``session``'s log and derived messages."""
    events: Sequence[Any] = list(session.events)
    problems: list[str] = []
    _check_seqs(events, problems)
    _check_turns_and_steps(events, problems)
    _check_tools(events, problems)
    _check_approvals(events, problems)
    _check_inbox(events, problems)
    problems += derived_problems(session.derive_messages())
    return [f"{session.id}: {p}" for p in problems]


def assert_well_formed(session: Any) -> None:
    problems = log_problems(session)
    assert not problems, "malformed log:\n" + "\n".join(problems[:50])


def _check_seqs(events: Sequence[Any], problems: list[str]) -> None:
    for index, event in enumerate(events, start=1):
        if event.seq != index:
            problems.append(f"seq {event.seq} at position {index} (expected contiguous from 1)")
            return


def _check_turns_and_steps(events: Sequence[Any], problems: list[str]) -> None:
    open_turn: int | None = None
    open_step: tuple[int, int] | None = None
    last_turn = 0
    for event in events:
        t, d = event.type, event.data
        if t == "turn/start":
            if open_turn is not None:
                problems.append(f"seq {event.seq}: turn {d.turn} starts inside turn {open_turn}")
            if d.turn <= last_turn:
                problems.append(f"seq {event.seq}: turn {d.turn} not after turn {last_turn}")
            open_turn, last_turn = d.turn, max(last_turn, d.turn)
        elif t == "turn/end":
            if open_turn != d.turn:
                problems.append(f"seq {event.seq}: turn/end {d.turn} but open turn {open_turn}")
            if open_step is not None:
                problems.append(f"seq {event.seq}: turn {d.turn} ends with step {open_step} open")
                open_step = None
            open_turn = None
        elif t == "step/start":
            if open_turn != d.turn:
                problems.append(f"seq {event.seq}: step {d.turn}.{d.step} outside its turn")
            if open_step is not None:
                problems.append(f"seq {event.seq}: step {d.turn}.{d.step} inside {open_step}")
            open_step = (d.turn, d.step)
        elif t == "step/end":
            if open_step != (d.turn, d.step):
                problems.append(
                    f"seq {event.seq}: step/end {d.turn}.{d.step} but open step {open_step}"
                )
            open_step = None
    if open_turn is not None:
        problems.append(f"turn {open_turn} never ended")
    if open_step is not None:
        problems.append(f"step {open_step} never ended")


def _check_tools(events: Sequence[Any], problems: list[str]) -> None:
    call_seq: dict[str, int] = {}
    results: Counter[str] = Counter()
    requested: dict[str, int] = {}  # call id -> seq of the assistant/message asking for it
    pending: list[str] = []  # calls of the current step's message not yet answered
    for event in events:
        t, d = event.type, event.data
        if t == "assistant/message":
            calls = [b.id for b in d.message.tool_calls]
            if d.interrupted and calls:
                problems.append(f"seq {event.seq}: interrupted message carries tool calls {calls}")
            if not d.interrupted:
                if pending:
                    problems.append(f"seq {event.seq}: new message while {pending} unanswered")
                for cid in calls:
                    if cid in requested:
                        problems.append(f"seq {event.seq}: call id {cid} requested twice")
                    requested[cid] = event.seq
                pending = list(calls)
        elif t == "tool/call":
            if d.call_id in call_seq:
                problems.append(f"seq {event.seq}: second tool/call for {d.call_id}")
            call_seq[d.call_id] = event.seq
            if d.call_id not in requested:
                problems.append(f"seq {event.seq}: tool/call {d.call_id} nobody requested")
        elif t == "tool/result":
            cid = d.message.call_id
            results[cid] += 1
            if results[cid] > 1:
                problems.append(f"seq {event.seq}: result #{results[cid]} for call {cid}")
            if cid in pending:
                pending.remove(cid)
            elif results[cid] == 1:
                problems.append(f"seq {event.seq}: result for {cid} outside its step")
            seq = call_seq.get(cid)
            if seq is None:
                code = d.error.code if d.error is not None else None
                if code != _TOOL_NOT_STARTED:
                    problems.append(f"seq {event.seq}: result for {cid} without a tool/call")
            elif event.source_event_seqs != (seq,):
                problems.append(
                    f"seq {event.seq}: result for {cid} cites {event.source_event_seqs}, "
                    f"its tool/call is seq {seq}"
                )
        elif t in ("step/end", "turn/end") and pending:
            problems.append(f"seq {event.seq}: {t} with unanswered calls {pending}")
            pending = []
    for cid in call_seq:
        if results[cid] == 0:
            problems.append(f"tool/call {cid} has no tool/result")


_UNDECIDED_CODES = ("ABORTED_BEFORE_DISPATCH", _TOOL_NOT_STARTED)


def _check_approvals(events: Sequence[Any], problems: list[str]) -> None:
    called: set[str] = set()
    answered: set[str] = set()
    asked: dict[str, str | None] = {}  # call id -> decision (None while undecided)
    for event in events:
        t, d = event.type, event.data
        if t == "tool/call":
            called.add(d.call_id)
        elif t == "tool/approval-requested":
            if d.call_id not in called or d.call_id in answered:
                problems.append(f"seq {event.seq}: approval request outside {d.call_id}'s call")
            if d.call_id in asked:
                problems.append(f"seq {event.seq}: second approval request for {d.call_id}")
            asked[d.call_id] = None
        elif t == "tool/approval-decided":
            if d.call_id not in asked or d.call_id in answered:
                problems.append(f"seq {event.seq}: decision for {d.call_id} with no open request")
            elif asked[d.call_id] is not None:
                problems.append(f"seq {event.seq}: second decision for {d.call_id}")
            asked[d.call_id] = d.decision
        elif t == "tool/result":
            cid = d.message.call_id
            answered.add(cid)
            if cid not in asked:
                continue
            code = d.error.code if d.error is not None else None
            decision = asked[cid]
            if decision == "deny" and code != "DENIED":
                problems.append(f"seq {event.seq}: denied call {cid} answered {code}")
            if decision is None and code not in _UNDECIDED_CODES:
                problems.append(f"seq {event.seq}: undecided call {cid} answered {code}")


def _check_inbox(events: Sequence[Any], problems: list[str]) -> None:
    queues: dict[str, list[str]] = {"next-turn": [], "next-step": []}
    inserted: Counter[str] = Counter()
    removed: Counter[str] = Counter()
    claimed: set[str] = set()
    dropped: set[str] = set()
    delivered: set[str] = set()
    for event in events:
        if event.type == "user/message":
            mid = event.data.id
            if mid in delivered:
                problems.append(f"seq {event.seq}: user message {mid} delivered twice")
            delivered.add(mid)
            if inserted[mid] and mid not in claimed:
                problems.append(f"seq {event.seq}: user message {mid} delivered without a claim")
            if mid in dropped and mid not in claimed:
                problems.append(f"seq {event.seq}: dropped message {mid} delivered")
            continue
        if event.type != "agent/inbox/spliced":
            continue
        d = event.data
        queue = queues.get(d.target)
        if queue is None:
            problems.append(f"seq {event.seq}: splice of unknown target {d.target!r}")
            continue
        if not (0 <= d.start <= len(queue)) or not (0 <= d.removed_count <= len(queue) - d.start):
            problems.append(
                f"seq {event.seq}: splice start={d.start} removed={d.removed_count} "
                f"out of bounds for {d.target} of length {len(queue)}"
            )
            continue
        if d.removed_count == 0 and not d.inserted:
            problems.append(f"seq {event.seq}: no-op splice was written")
        for mid in queue[d.start : d.start + d.removed_count]:
            removed[mid] += 1
            if removed[mid] > inserted[mid]:
                problems.append(f"seq {event.seq}: message {mid} removed twice")
            if d.outcome is None:
                if mid in claimed:
                    problems.append(f"seq {event.seq}: message {mid} claimed twice")
                claimed.add(mid)
            else:
                dropped.add(mid)
        ids = [m.id for m in d.inserted]
        for mid in ids:
            inserted[mid] += 1
        queue[d.start : d.start + d.removed_count] = ids
        pending = queues["next-turn"] + queues["next-step"]
        dupes = [mid for mid, n in Counter(pending).items() if n > 1]
        if dupes:
            problems.append(f"seq {event.seq}: message ids pending twice {dupes}")


def derived_problems(messages: Sequence[Any]) -> list[str]:
    """Provider validity of a derived message list."""
    problems: list[str] = []
    i = 0
    while i < len(messages):
        message = messages[i]
        if message.role == "tool":
            problems.append(f"derived[{i}]: tool result {message.call_id} without its call")
            i += 1
            continue
        if message.role == "assistant" and message.tool_calls:
            expected = [c.id for c in message.tool_calls]
            got: list[str] = []
            j = i + 1
            while j < len(messages) and messages[j].role == "tool" and len(got) < len(expected):
                got.append(messages[j].call_id)
                j += 1
            if got != expected:
                problems.append(f"derived[{i}]: calls {expected} answered by {got}")
            i = j
            continue
        i += 1
    return problems
