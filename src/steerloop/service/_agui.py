"""The AG-UI 1.0 projection (SERVICE.md §2.5) of a session's stored events and live frames,
built with the ``ag-ui-protocol`` package's own event models.

``AguiRun`` maps one run: the turn(s) a ``POST /v1/agui`` follows. It keeps the stream
well formed for the official client's verifier: every ``STEP_FINISHED`` has its
``STEP_STARTED`` (a run that attaches to a turn mid-step opens that step first), text and
reasoning messages are closed before a step or the run ends, and the run ends once, with
``RUN_FINISHED`` (``outcome`` success, interrupt or cancelled, ``usage``) or ``RUN_ERROR``.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from ag_ui.core import (
    BaseEvent,
    CustomEvent,
    Interrupt,
    Message,
    MessagesSnapshotEvent,
    ReasoningEndEvent,
    ReasoningMessageContentEvent,
    ReasoningMessageEndEvent,
    ReasoningMessageStartEvent,
    ReasoningStartEvent,
    RunErrorEvent,
    RunFinishedCancelledOutcome,
    RunFinishedEvent,
    RunFinishedInterruptOutcome,
    RunFinishedSuccessOutcome,
    RunStartedEvent,
    StateDeltaEvent,
    StateSnapshotEvent,
    StepFinishedEvent,
    StepStartedEvent,
    TextMessageContentEvent,
    TextMessageEndEvent,
    TextMessageStartEvent,
    TokenUsage,
    ToolCallArgsEvent,
    ToolCallEndEvent,
    ToolCallResultEvent,
    ToolCallStartEvent,
)

from ._agui_messages import json_object, text_of

__all__ = ["AguiRun", "encode"]


def encode(event: BaseEvent) -> str:
    """One AG-UI event as the JSON of an SSE ``data:`` line (camelCase, absent = left out)."""
    return event.model_dump_json(by_alias=True, exclude_none=True)


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def _usage_of(data: dict[str, Any]) -> tuple[tuple[str, str], dict[str, int]] | None:
    """The (provider, model) and AG-UI counts of one ``assistant/message``'s usage.

    steerloop's counts are disjoint (cached input and reasoning output split out); AG-UI's
    ``inputTokens``/``outputTokens`` are totals with those as named parts of them."""
    usage = json_object(data.get("usage"))
    if not usage:
        return None
    source = json_object(json_object(data.get("message")).get("source"))
    read = int(usage.get("cache_read_tokens") or 0)
    write = int(usage.get("cache_write_tokens") or 0)
    reasoning = int(usage.get("reasoning_tokens") or 0)
    counts = {
        "input_tokens": int(usage.get("input_tokens") or 0) + read + write,
        "output_tokens": int(usage.get("output_tokens") or 0) + reasoning,
        "cached_input_tokens": read,
        "cache_write_input_tokens": write,
        "reasoning_tokens": reasoning,
    }
    return (str(source.get("provider") or ""), str(source.get("model") or "")), counts


class AguiRun:
    """Maps one run to AG-UI events (see the module docstring)."""

    def __init__(self, thread_id: str, run_id: str, parent_run_id: str | None = None) -> None:
        self.thread_id = thread_id
        self.run_id = run_id
        self.parent_run_id = parent_run_id
        self._step: str | None = None  # the open AG-UI step's name
        self._text: str | None = None  # the open text message's id
        self._reasoning: str | None = None  # the open reasoning message's id
        self._live = False  # the open step's model output was sent from live frames
        self._alias: dict[str, str] = {}  # stored assistant message id -> id the client has
        self._last_attempt: str | None = None
        self._usage: dict[tuple[str, str], dict[str, int]] = {}
        self.ended = False

    # --- the run's frame -------------------------------------------------------------

    def started(self) -> BaseEvent:
        return RunStartedEvent(
            thread_id=self.thread_id,
            run_id=self.run_id,
            parent_run_id=self.parent_run_id,
            timestamp=_now_ms(),
        )

    def snapshot(self, messages: list[Message], state: Mapping[str, Any]) -> list[BaseEvent]:
        """``MESSAGES_SNAPSHOT`` (only when ``messages`` is not empty) then
        ``STATE_SNAPSHOT``."""
        now = _now_ms()
        out: list[BaseEvent] = []
        if messages:
            out.append(MessagesSnapshotEvent(messages=messages, timestamp=now))
        out.append(StateSnapshotEvent(snapshot=dict(state), timestamp=now))
        return out

    def open_step(self, turn: int, step: int, at: int | None = None) -> list[BaseEvent]:
        """Open step ``turn.step`` (a run attaching to a turn mid-step starts here)."""
        out = self._close_step(at)
        self._step = f"step {turn}.{step}"
        self._live = False
        out.append(StepStartedEvent(step_name=self._step, timestamp=at or _now_ms()))
        return out

    def _close_text(self, at: int | None) -> list[BaseEvent]:
        out: list[BaseEvent] = []
        if self._text is not None:
            out.append(TextMessageEndEvent(message_id=self._text, timestamp=at or _now_ms()))
            self._text = None
        if self._reasoning is not None:
            stamp = at or _now_ms()
            out += [
                ReasoningMessageEndEvent(message_id=self._reasoning, timestamp=stamp),
                ReasoningEndEvent(message_id=self._reasoning, timestamp=stamp),
            ]
            self._reasoning = None
        return out

    def _close_step(self, at: int | None) -> list[BaseEvent]:
        out = self._close_text(at)
        if self._step is not None:
            out.append(StepFinishedEvent(step_name=self._step, timestamp=at or _now_ms()))
            self._step = None
        return out

    def _usage_list(self) -> list[TokenUsage] | None:
        if not self._usage:
            return None
        out = []
        for (provider, model), counts in self._usage.items():
            total = counts["input_tokens"] + counts["output_tokens"]
            parts = {k: v for k, v in counts.items() if v or k in ("input_tokens", "output_tokens")}
            out.append(
                TokenUsage(
                    provider=provider or None, model=model or None, total_tokens=total, **parts
                )
            )
        return out

    def finish(
        self, outcome: str = "success", interrupts: list[Interrupt] | None = None
    ) -> list[BaseEvent]:
        """Close what is open and end the run (``success``, ``interrupt``, ``cancelled``)."""
        out = self._close_step(None)
        result: Any
        if outcome == "interrupt":
            result = RunFinishedInterruptOutcome(interrupts=interrupts or [])
        elif outcome == "cancelled":
            result = RunFinishedCancelledOutcome()
        else:
            result = RunFinishedSuccessOutcome()
        out.append(
            RunFinishedEvent(
                thread_id=self.thread_id,
                run_id=self.run_id,
                outcome=result,
                usage=self._usage_list(),
                timestamp=_now_ms(),
            )
        )
        self.ended = True
        return out

    def fail(self, message: str, code: str | None) -> list[BaseEvent]:
        """Close what is open and end the run with ``RUN_ERROR``."""
        out = self._close_step(None)
        out.append(
            RunErrorEvent(message=message, code=code, usage=self._usage_list(), timestamp=_now_ms())
        )
        self.ended = True
        return out

    # --- live frames -----------------------------------------------------------------

    def frame(self, frame: dict[str, Any]) -> list[BaseEvent]:
        """Events for one live frame (``kind`` start/chunk/end, ``chunk`` in JSON form)."""
        if self._step is None:
            return []  # a frame of a step this run does not show
        attempt = str(frame.get("attempt_id"))
        chunk = json_object(frame.get("chunk"))
        stamp = chunk.get("time") if isinstance(chunk.get("time"), int) else None
        at = stamp or _now_ms()
        out: list[BaseEvent] = []
        kind = frame.get("kind")
        if kind == "chunk":
            delta = chunk.get("text")
            if not isinstance(delta, str) or not delta:
                return out
            if chunk.get("kind") == "text-delta":
                if self._text != attempt:
                    out += self._close_text(at)
                    self._text = attempt
                    self._live = True
                    self._last_attempt = attempt
                    out.append(
                        TextMessageStartEvent(message_id=attempt, role="assistant", timestamp=at)
                    )
                out.append(TextMessageContentEvent(message_id=attempt, delta=delta, timestamp=at))
            elif chunk.get("kind") == "reasoning-delta":
                reasoning_id = f"{attempt}-reasoning"
                if self._reasoning != reasoning_id:
                    out += self._close_text(at)
                    self._reasoning = reasoning_id
                    self._live = True
                    out += [
                        ReasoningStartEvent(message_id=reasoning_id, timestamp=at),
                        ReasoningMessageStartEvent(message_id=reasoning_id, timestamp=at),
                    ]
                out.append(
                    ReasoningMessageContentEvent(message_id=reasoning_id, delta=delta, timestamp=at)
                )
        elif kind == "end":
            out += self._close_text(at)
        return out

    # --- stored events ---------------------------------------------------------------

    def event(self, event: dict[str, Any]) -> list[BaseEvent]:
        """AG-UI events for one stored event of a turn this run shows."""
        kind = event.get("type")
        data = json_object(event.get("data"))
        stamp = event.get("time")
        at = stamp if isinstance(stamp, int) else _now_ms()
        out: list[BaseEvent] = []
        if kind == "step/start":
            out += self.open_step(int(data.get("turn") or 0), int(data.get("step") or 0), at)
        elif kind == "step/end":
            out += self._close_step(at)
        elif kind == "assistant/message":
            out += self._assistant(data, at)
        elif kind == "tool/call":
            call_id, args = str(data.get("call_id")), data.get("arguments")
            parent = self._alias.get(self._message_id, self._message_id)
            out.append(
                ToolCallStartEvent(
                    tool_call_id=call_id,
                    tool_call_name=str(data.get("name")),
                    parent_message_id=parent or None,
                    timestamp=at,
                )
            )
            if isinstance(args, str) and args:
                out.append(ToolCallArgsEvent(tool_call_id=call_id, delta=args, timestamp=at))
            out.append(ToolCallEndEvent(tool_call_id=call_id, timestamp=at))
        elif kind == "tool/result":
            message = json_object(data.get("message"))
            out.append(
                ToolCallResultEvent(
                    message_id=str(message.get("id")),
                    tool_call_id=str(message.get("call_id")),
                    content=text_of(message.get("content")),
                    role="tool",
                    timestamp=at,
                )
            )
        elif kind == "state/changed":
            out.append(StateDeltaEvent(delta=list(data.get("patch") or ()), timestamp=at))
        elif kind == "agent/inbox/spliced":
            out.append(CustomEvent(name="steerloop.inbox", value=data, timestamp=at))
        return out

    _message_id = ""  # the stored id of the step's latest assistant message

    def _assistant(self, data: dict[str, Any], at: int) -> list[BaseEvent]:
        out = self._close_text(at)
        message = json_object(data.get("message"))
        message_id = str(message.get("id"))
        self._message_id = message_id
        counted = _usage_of(data)
        if counted is not None:
            key, counts = counted
            totals = self._usage.setdefault(key, dict.fromkeys(counts, 0))
            for name, value in counts.items():
                totals[name] += value
        if self._live:
            # Its text went out live under the attempt's id: the tool calls that follow
            # belong to that message on the client.
            if self._last_attempt is not None:
                self._alias[message_id] = self._last_attempt
            return out
        reasoning = text_of(message.get("content"), "reasoning")
        if reasoning:
            rid = f"{message_id}-reasoning"
            out += [
                ReasoningStartEvent(message_id=rid, timestamp=at),
                ReasoningMessageStartEvent(message_id=rid, timestamp=at),
                ReasoningMessageContentEvent(message_id=rid, delta=reasoning, timestamp=at),
                ReasoningMessageEndEvent(message_id=rid, timestamp=at),
                ReasoningEndEvent(message_id=rid, timestamp=at),
            ]
        text = text_of(message.get("content"))
        if text:
            out += [
                TextMessageStartEvent(message_id=message_id, role="assistant", timestamp=at),
                TextMessageContentEvent(message_id=message_id, delta=text, timestamp=at),
                TextMessageEndEvent(message_id=message_id, timestamp=at),
            ]
        return out

    def end_event(self, event: dict[str, Any]) -> list[BaseEvent]:
        """How a turn's ``turn/end`` ends this run: success, cancelled or ``RUN_ERROR``."""
        reason = json_object(json_object(event.get("data")).get("reason"))
        kind = reason.get("kind")
        if kind == "aborted":
            return self.finish("cancelled")
        if kind == "error":
            error = json_object(reason.get("error"))
            return self.fail(
                str(error.get("message") or "the turn failed"),
                str(error.get("code")) if error.get("code") else None,
            )
        if kind == "interrupted":
            return self.fail(
                "the turn was interrupted (its process stopped); the session continues in a "
                "new turn",
                "INTERRUPTED",
            )
        return self.finish("success")
