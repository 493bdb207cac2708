"""A session log read back as turns: what the people said and when, what the model called,
what each call answered. The replay reads the recorded log this way, and the new log too.

A message *delivered* at a step is one that reached the model there (its ``user/message``
follows that step's ``step/start``). Delivered messages that came through the inbox are the
recorded input (a follow-up, a steer, an inject; a goal's or a plugin's prompt too); the ones a
pre-step listener added (the runtime-context snapshot) are the step's *extras*; the ones a tool
deferred (source ``tool``) belong to their call.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from ..agent import sum_usage
from ..llm import TokenUsage
from ..messages import TextBlock, UserMessage
from ..session import SessionEvent
from ..session.events import (
    ApprovalDecided,
    ApprovalRequested,
    AssistantMessageEvent,
    InboxSpliced,
    RequestContext,
    RequestHeader,
    StepStart,
    SystemMessageEvent,
    ToolCallEvent,
    ToolResultEvent,
    TurnEnd,
    TurnEndReason,
    TurnStart,
)

__all__ = [
    "Approval",
    "Call",
    "Input",
    "Log",
    "Turn",
    "call_key",
    "read_log",
]

InboxTarget = Literal["next-turn", "next-step"]


def call_key(name: str, arguments: str) -> tuple[str, str]:
    """``(name, canonical arguments)``: JSON re-encoded with sorted keys, so key order and
    spacing do not matter; text that is not JSON is compared as it is (stripped)."""
    if arguments.strip() == "":
        return name, "{}"
    try:
        value = json.loads(arguments)
    except (ValueError, RecursionError):
        return name, arguments.strip()
    return name, json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


@dataclass(frozen=True, slots=True, kw_only=True)
class Approval:
    """A recorded approval request and its decision (``None`` if it was never decided)."""

    reason: str | None
    decision: Literal["allow", "deny"] | None = None
    decision_reason: str | None = None


@dataclass(slots=True, kw_only=True)
class Call:
    """One tool call of a turn, with what answered it."""

    turn: int
    step: int
    call_id: str
    name: str
    arguments: str
    key: tuple[str, str]
    result: ToolResultEvent | None = None
    approval: Approval | None = None
    deferred: list[UserMessage] = field(default_factory=list)

    @property
    def error_code(self) -> str | None:
        error = self.result.error if self.result is not None else None
        return error.code if error is not None else None


@dataclass(frozen=True, slots=True, kw_only=True)
class Input:
    """A message that came through the inbox, and the step of its turn it reached the model."""

    message: UserMessage
    target: InboxTarget
    step: int


@dataclass(slots=True, kw_only=True)
class Turn:
    """One turn of a log, read back."""

    number: int
    start_seq: int
    start_time: int
    end_seq: int = 0
    end_time: int = 0
    end: TurnEndReason | None = None
    steps: int = 0
    inputs: list[Input] = field(default_factory=list)
    extras: dict[int, list[UserMessage]] = field(default_factory=dict)
    calls: list[Call] = field(default_factory=list)
    text: str = ""
    text_step: int = 0
    usages: list[TokenUsage] = field(default_factory=list)
    cancel_step: int | None = None  # the step a person's cancel ended the turn at (0: before any)
    model: str | None = None  # provider/model of its requests

    @property
    def usage(self) -> TokenUsage:
        return sum_usage(self.usages)

    @property
    def wall_ms(self) -> int:
        return max(self.end_time - self.start_time, 0) if self.end_seq else 0

    def calls_at(self, step: int) -> list[Call]:
        return [c for c in self.calls if c.step == step]


@dataclass(slots=True, kw_only=True)
class Log:
    """A log read as turns; ``tool_schemas`` are the tools its requests offered (by name,
    first offer first, the latest definition of each)."""

    turns: list[Turn] = field(default_factory=list)
    tool_schemas: dict[str, dict[str, Any]] = field(default_factory=dict)
    system_prompts: dict[int, str] = field(default_factory=dict)  # turn -> prompt in force
    concurrent: set[str] = field(default_factory=set)  # tools that ran beside another call

    def turn(self, number: int) -> Turn | None:
        return next((t for t in self.turns if t.number == number), None)


class _Reader:
    """Folds a log, event by event, into a ``Log``."""

    def __init__(self) -> None:
        self.log = Log()
        self.turn: Turn | None = None
        self.step = 0
        self.targets: dict[str, InboxTarget] = {}  # message id -> target of its insertion
        self.calls: dict[str, Call] = {}  # call id -> call of the open turn
        self.running: dict[str, str] = {}  # call id -> name, started and not answered yet
        self.prompt = ""  # the system prompt in force
        self.model: str | None = None

    def read(self, event: SessionEvent) -> None:
        data = event.data
        turn = self.turn
        if isinstance(data, TurnStart):
            self.turn = Turn(number=data.turn, start_seq=event.seq, start_time=event.time)
            self.step, self.calls = 0, {}
            self.log.system_prompts[data.turn] = self.prompt
        elif isinstance(data, InboxSpliced):
            self._spliced(data)
        elif isinstance(data, SystemMessageEvent):
            text = "".join(b.text for b in data.message.content if isinstance(b, TextBlock))
            # An empty one after a prompt blanks a stale surface node (the head keeps the prompt).
            if text or not self.prompt:
                self.prompt = text
            if turn is not None and self.step <= 1:
                self.log.system_prompts[turn.number] = self.prompt
        elif isinstance(data, RequestHeader):
            for tool in data.header.get("tools", ()) or ():
                if isinstance(tool, dict) and isinstance(tool.get("name"), str):
                    self.log.tool_schemas[tool["name"]] = tool
        elif isinstance(data, RequestContext):
            self.model = f"{data.provider}/{data.model}"
        elif turn is not None:
            self._in_turn(turn, event, data)

    def _spliced(self, data: InboxSpliced) -> None:
        for message in data.inserted:
            self.targets[message.id] = data.target
            source = message.source
            call = self.calls.get(source.call_id or "") if source.kind == "tool" else None
            if call is not None:
                call.deferred.append(message)

    def _in_turn(self, turn: Turn, event: SessionEvent, data: Any) -> None:
        if isinstance(data, StepStart):
            self.step = turn.steps = data.step
            self.running = {}
        elif isinstance(data, UserMessage):
            target = self.targets.get(data.id)
            if data.source.kind == "tool":
                return  # deferred by its call: the call's answer brings it again
            if target is not None:
                turn.inputs.append(Input(message=data, target=target, step=self.step))
            else:
                turn.extras.setdefault(self.step, []).append(data)
        elif isinstance(data, AssistantMessageEvent):
            turn.model = turn.model or self.model
            if data.usage is not None:
                turn.usages.append(data.usage)
            text = "".join(b.text for b in data.message.content if isinstance(b, TextBlock))
            if text:
                turn.text, turn.text_step = text, data.step
        elif isinstance(data, ToolCallEvent):
            call = Call(
                turn=data.turn,
                step=data.step,
                call_id=data.call_id,
                name=data.name,
                arguments=data.arguments,
                key=call_key(data.name, data.arguments),
            )
            self.calls[data.call_id] = call
            turn.calls.append(call)
            if self.running:  # started while another call ran: the scheduler let them overlap
                self.log.concurrent.update(self.running.values(), (data.name,))
            self.running[data.call_id] = data.name
        elif isinstance(data, ToolResultEvent):
            self.running.pop(data.message.call_id, None)
            answered = self.calls.get(data.message.call_id)
            if answered is not None:
                answered.result = data
        elif isinstance(data, ApprovalRequested):
            asked = self.calls.get(data.call_id)
            if asked is not None:
                asked.approval = Approval(reason=data.reason)
        elif isinstance(data, ApprovalDecided):
            decided = self.calls.get(data.call_id)
            if decided is not None and decided.approval is not None:
                decided.approval = Approval(
                    reason=decided.approval.reason,
                    decision=data.decision,
                    decision_reason=data.reason,
                )
        elif isinstance(data, TurnEnd):
            turn.end, turn.end_seq, turn.end_time = data.reason, event.seq, event.time
            reason = data.reason.reason
            if data.reason.kind == "aborted" and reason is not None and reason.kind == "user":
                turn.cancel_step = self.step
            self.log.turns.append(turn)
            self.turn = None


def read_log(events: Sequence[SessionEvent], *, after: int = 0) -> Log:
    """``events`` read as turns; turns that start at or before seq ``after`` are left out
    (a fork's inherited prefix), and so is a turn still open at the end."""
    reader = _Reader()
    for event in events:
        reader.read(event)
    if after:
        reader.log.turns = [t for t in reader.log.turns if t.start_seq > after]
    return reader.log


CallKey = tuple[int, int, str]  # (turn, step, call id) of a call of the new run


class Matcher:
    """Pairs the new run's calls with recorded calls of the same turn, each recorded call at
    most once, first come first served (calls reach it in model order). The answer for a call
    is fixed the first time it is asked, so the tool answer and the report agree."""

    def __init__(self) -> None:
        self._used: set[int] = set()
        self._assigned: dict[CallKey, Call | None] = {}

    def match(self, recorded: Turn | None, at: CallKey, key: tuple[str, str]) -> Call | None:
        if at in self._assigned:
            return self._assigned[at]
        found = None
        for call in recorded.calls if recorded is not None else ():
            if id(call) not in self._used and call.key == key:
                self._used.add(id(call))
                found = call
                break
        self._assigned[at] = found
        return found

    def used(self, call: Call) -> bool:
        return id(call) in self._used
