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
from collections.abc import Iterable, Mapping
from typing import Any

from ag_ui.core import (
    AssistantMessage,
    BaseEvent,
    CustomEvent,
    FunctionCall,
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
    ToolCall,
    ToolCallArgsEvent,
    ToolCallEndEvent,
    ToolCallResultEvent,
    ToolCallStartEvent,
    ToolMessage,
    UserMessage,
)

from ._agui_media import snapshot_content

__all__ = [
    "APPROVAL_REASON",
    "APPROVAL_SCHEMA",
    "CLIENT_TOOL_REASON",
    "AguiRun",
    "approval_interrupt",
    "client_interrupt",
    "encode",
    "messages_snapshot",
    "text_of",
]

APPROVAL_REASON = "tool_approval"
"""``Interrupt.reason`` of a call held for a person's decision."""
CLIENT_TOOL_REASON = "client_tool"
"""``Interrupt.reason`` of a call to a client tool: the client runs it."""
APPROVAL_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "decision": {"enum": ["allow", "deny"]},
        "reason": {"type": "string", "maxLength": 4096},
    },
    "required": ["decision"],
    "additionalProperties": False,
}
"""The ``resume`` payload an approval interrupt expects."""


def encode(event: BaseEvent) -> str:
    """One AG-UI event as the JSON of an SSE ``data:`` line (camelCase, absent = left out)."""
    return event.model_dump_json(by_alias=True, exclude_none=True)


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def _obj(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def text_of(blocks: Any, kind: str = "text") -> str:
    """The text of the ``kind`` blocks of a stored content list."""
    if isinstance(blocks, str):
        return blocks if kind == "text" else ""
    if not isinstance(blocks, list):
        return ""
    return "".join(
        b["text"]
        for b in blocks
        if isinstance(b, dict) and b.get("type") == kind and isinstance(b.get("text"), str)
    )


def _calls_of(blocks: Any) -> list[dict[str, Any]]:
    if not isinstance(blocks, list):
        return []
    return [b for b in blocks if isinstance(b, dict) and b.get("type") == "tool-call"]


def messages_snapshot(events: Iterable[Mapping[str, Any]], session_id: str = "") -> list[Message]:
    """The conversation of a stored log as AG-UI messages, ids as the log has them: user
    messages a person sent (images and files as parts by their blob URL), the model's
    messages (text and tool calls) and tool results. Injected context, system prompts and
    reasoning are left out."""
    out: list[Message] = []
    for event in events:
        kind, data = event.get("type"), _obj(event.get("data"))
        if kind == "user/message" and _obj(data.get("source")).get("kind", "user") == "user":
            content = data.get("content")
            parts = snapshot_content(session_id, content)
            out.append(
                UserMessage(id=str(data.get("id")), content=parts if parts else text_of(content))
            )
        elif kind == "assistant/message":
            message = _obj(data.get("message"))
            text = text_of(message.get("content"))
            calls = [
                ToolCall(
                    id=str(c.get("id")),
                    function=FunctionCall(
                        name=str(c.get("name")), arguments=str(c.get("arguments"))
                    ),
                )
                for c in _calls_of(message.get("content"))
            ]
            if text or calls:
                out.append(
                    AssistantMessage(
                        id=str(message.get("id")), content=text or None, tool_calls=calls or None
                    )
                )
        elif kind == "tool/result":
            message = _obj(data.get("message"))
            error = _obj(data.get("error"))
            out.append(
                ToolMessage(
                    id=str(message.get("id")),
                    tool_call_id=str(message.get("call_id")),
                    content=text_of(message.get("content")),
                    error=str(error.get("code") or "TOOL_FAILED")
                    if message.get("is_error")
                    else None,
                )
            )
    return out


def _usage_of(data: dict[str, Any]) -> tuple[tuple[str, str], dict[str, int]] | None:
    """The (provider, model) and AG-UI counts of one ``assistant/message``'s usage.

    steerloop's counts are disjoint (cached input and reasoning output split out); AG-UI's
    ``inputTokens``/``outputTokens`` are totals with those as named parts of them."""
    usage = _obj(data.get("usage"))
    if not usage:
        return None
    source = _obj(_obj(data.get("message")).get("source"))
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
        chunk = _obj(frame.get("chunk"))
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
        data = _obj(event.get("data"))
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
            message = _obj(data.get("message"))
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
        message = _obj(data.get("message"))
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
        reason = _obj(_obj(event.get("data")).get("reason"))
        kind = reason.get("kind")
        if kind == "aborted":
            return self.finish("cancelled")
        if kind == "error":
            error = _obj(reason.get("error"))
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


def approval_interrupt(data: Mapping[str, Any]) -> Interrupt:
    """The interrupt of a ``tool/approval-requested``: the call, its arguments, the reason."""
    call_id = str(data.get("call_id"))
    reason = data.get("reason")
    return Interrupt(
        id=call_id,
        reason=APPROVAL_REASON,
        message=str(reason) if reason else f"allow the call to {data.get('name')}?",
        tool_call_id=call_id,
        response_schema=APPROVAL_SCHEMA,
        metadata={"tool": data.get("name"), "arguments": data.get("arguments")},
    )


def client_interrupt(data: Mapping[str, Any]) -> Interrupt:
    """The interrupt of a ``tool/deferred``: the client runs the call and resumes with its
    result (a tool message, or a ``resume`` payload)."""
    call_id = str(data.get("call_id"))
    return Interrupt(
        id=call_id,
        reason=CLIENT_TOOL_REASON,
        message=f"run the client tool {data.get('name')} and resume with its result",
        tool_call_id=call_id,
        metadata={"tool": data.get("name"), "arguments": data.get("arguments")},
    )
