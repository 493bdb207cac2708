"""The AG-UI projection (SERVICE.md §2.5) of a session's stored events and live frames,
built with the ``ag-ui-protocol`` package's own event models."""

from __future__ import annotations

from typing import Any

from ag_ui.core import (
    BaseEvent,
    CustomEvent,
    RunErrorEvent,
    RunFinishedEvent,
    RunStartedEvent,
    StepFinishedEvent,
    StepStartedEvent,
    TextMessageContentEvent,
    TextMessageEndEvent,
    TextMessageStartEvent,
    ToolCallArgsEvent,
    ToolCallEndEvent,
    ToolCallResultEvent,
    ToolCallStartEvent,
)

__all__ = ["AguiRun", "encode"]


def encode(event: BaseEvent) -> str:
    """One AG-UI event as the JSON of an SSE ``data:`` line (camelCase, nulls left out)."""
    return event.model_dump_json(by_alias=True, exclude_none=True)


def _text_of(blocks: Any) -> str:
    if not isinstance(blocks, list):
        return ""
    return "".join(
        b["text"]
        for b in blocks
        if isinstance(b, dict) and b.get("type") == "text" and isinstance(b.get("text"), str)
    )


class AguiRun:
    """Maps one run (the turn that takes the request's message) to AG-UI events.

    Text streamed live (``agent/assistant-stream`` frames) is sent as it comes; the text of
    an ``assistant/message`` is sent whole when none of its step was streamed live."""

    def __init__(self, thread_id: str, run_id: str) -> None:
        self.thread_id = thread_id
        self.run_id = run_id
        self._open_text: str | None = None
        self._live_text = False  # text of the current step was sent from live frames

    def started(self) -> BaseEvent:
        return RunStartedEvent(thread_id=self.thread_id, run_id=self.run_id)

    def frame(self, frame: dict[str, Any]) -> list[BaseEvent]:
        """Events for one live frame (``kind`` start/chunk/end, ``chunk`` in JSON form)."""
        attempt = str(frame.get("attempt_id"))
        chunk = frame.get("chunk")
        out: list[BaseEvent] = []
        if frame.get("kind") == "chunk" and isinstance(chunk, dict):
            delta = chunk.get("text")
            if chunk.get("kind") == "text-delta" and isinstance(delta, str) and delta:
                if self._open_text != attempt:
                    out += self._close_text()
                    self._open_text = attempt
                    self._live_text = True
                    out.append(TextMessageStartEvent(message_id=attempt, role="assistant"))
                out.append(TextMessageContentEvent(message_id=attempt, delta=delta))
        elif frame.get("kind") == "end":
            out += self._close_text()
        return out

    def _close_text(self) -> list[BaseEvent]:
        if self._open_text is None:
            return []
        message_id, self._open_text = self._open_text, None
        return [TextMessageEndEvent(message_id=message_id)]

    def event(self, event: dict[str, Any]) -> tuple[list[BaseEvent], bool]:
        """AG-UI events for one stored event, and whether the run is over."""
        kind = event.get("type")
        data = event.get("data")
        data = data if isinstance(data, dict) else {}
        out: list[BaseEvent] = []
        if kind == "step/start":
            self._live_text = False
            out.append(StepStartedEvent(step_name=f"step {data.get('step')}"))
        elif kind == "step/end":
            out += self._close_text()
            out.append(StepFinishedEvent(step_name=f"step {data.get('step')}"))
        elif kind == "assistant/message":
            out += self._close_text()
            message = data.get("message") if isinstance(data.get("message"), dict) else {}
            assert isinstance(message, dict)
            text = _text_of(message.get("content"))
            if text and not self._live_text:
                message_id = str(message.get("id"))
                out += [
                    TextMessageStartEvent(message_id=message_id, role="assistant"),
                    TextMessageContentEvent(message_id=message_id, delta=text),
                    TextMessageEndEvent(message_id=message_id),
                ]
        elif kind == "tool/call":
            call_id, args = str(data.get("call_id")), data.get("arguments")
            out.append(
                ToolCallStartEvent(tool_call_id=call_id, tool_call_name=str(data.get("name")))
            )
            if isinstance(args, str) and args:
                out.append(ToolCallArgsEvent(tool_call_id=call_id, delta=args))
            out.append(ToolCallEndEvent(tool_call_id=call_id))
        elif kind == "tool/result":
            message = data.get("message") if isinstance(data.get("message"), dict) else {}
            assert isinstance(message, dict)
            out.append(
                ToolCallResultEvent(
                    message_id=str(message.get("id")),
                    tool_call_id=str(message.get("call_id")),
                    content=_text_of(message.get("content")),
                    role="tool",
                )
            )
        elif kind == "agent/inbox/spliced":
            out.append(CustomEvent(name="steerloop.inbox", value=data))
        elif kind == "tool/approval-requested":
            out.append(CustomEvent(name="steerloop.approval-requested", value=data))
        elif kind == "tool/approval-decided":
            out.append(CustomEvent(name="steerloop.approval-decided", value=data))
        elif kind == "turn/end":
            out += self._close_text()
            reason = data.get("reason") if isinstance(data.get("reason"), dict) else {}
            assert isinstance(reason, dict)
            if reason.get("kind") == "error":
                error = reason.get("error") if isinstance(reason.get("error"), dict) else {}
                assert isinstance(error, dict)
                out.append(
                    RunErrorEvent(
                        message=str(error.get("message") or "the turn failed"),
                        code=str(error.get("code")) if error.get("code") else None,
                    )
                )
            else:
                out.append(RunFinishedEvent(thread_id=self.thread_id, run_id=self.run_id))
            return out, True
        return out, False
