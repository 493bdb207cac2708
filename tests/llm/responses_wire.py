"""OpenAI Responses API server-sent events, written as the API documents them.

Each event is ``event: <type>`` plus a JSON ``data`` carrying the same ``type`` and a
``sequence_number``; builders below make the event sequences of one streamed response
(``response.created``, ``response.output_item.added`` / ``.done``, text, reasoning-summary,
refusal and function-call-argument deltas, ``response.completed`` / ``incomplete`` /
``failed``, ``error``), to be served by ``tests.llm.sse_server``.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence
from typing import Any

from .sse_server import Reply, sse, sse_reply

MODEL = "o4-mini"


class Wire:
    """Builds one response's events with running ``sequence_number``s."""

    def __init__(self, response_id: str = "resp_1", model: str = MODEL) -> None:
        self.id = response_id
        self.model = model
        self._seq = itertools.count()
        self.output: list[dict[str, Any]] = []

    def event(self, type_: str, **fields: Any) -> bytes:
        return sse({"type": type_, "sequence_number": next(self._seq), **fields}, event=type_)

    def response(self, status: str, **fields: Any) -> dict[str, Any]:
        return {
            "id": self.id,
            "object": "response",
            "created_at": 1_741_290_958,
            "status": status,
            "error": None,
            "incomplete_details": None,
            "instructions": None,
            "model": self.model,
            "output": list(self.output) if status != "in_progress" else [],
            "parallel_tool_calls": True,
            "tool_choice": "auto",
            "tools": [],
            "store": False,
            "usage": None,
            **fields,
        }

    def created(self) -> list[bytes]:
        return [
            self.event("response.created", response=self.response("in_progress")),
            self.event("response.in_progress", response=self.response("in_progress")),
        ]

    # --- output items -------------------------------------------------------------------

    def reasoning(
        self, index: int, summary: Sequence[Sequence[str]], *, id: str, encrypted: str
    ) -> list[bytes]:
        """A reasoning item whose summary parts stream as the given deltas."""
        out = [
            self.event(
                "response.output_item.added",
                output_index=index,
                item={"id": id, "type": "reasoning", "summary": []},
            )
        ]
        parts = []
        for s, deltas in enumerate(summary):
            text = "".join(deltas)
            part = {"type": "summary_text", "text": ""}
            common = {"item_id": id, "output_index": index, "summary_index": s}
            out.append(self.event("response.reasoning_summary_part.added", **common, part=part))
            out += [
                self.event("response.reasoning_summary_text.delta", **common, delta=d)
                for d in deltas
            ]
            out.append(self.event("response.reasoning_summary_text.done", **common, text=text))
            done_part = {"type": "summary_text", "text": text}
            out.append(self.event("response.reasoning_summary_part.done", **common, part=done_part))
            parts.append(done_part)
        item = {"id": id, "type": "reasoning", "summary": parts, "encrypted_content": encrypted}
        self.output.append(item)
        out.append(self.event("response.output_item.done", output_index=index, item=item))
        return out

    def message(
        self, index: int, deltas: Iterable[str], *, id: str = "msg_1", refusal: bool = False
    ) -> list[bytes]:
        """An assistant message with one ``output_text`` (or ``refusal``) part."""
        deltas = list(deltas)
        text = "".join(deltas)
        added = {"id": id, "type": "message", "role": "assistant", "status": "in_progress"}
        out = [
            self.event(
                "response.output_item.added", output_index=index, item={**added, "content": []}
            )
        ]
        common = {"item_id": id, "output_index": index, "content_index": 0}
        if refusal:
            out.append(
                self.event(
                    "response.content_part.added", **common, part={"type": "refusal", "refusal": ""}
                )
            )
            out += [self.event("response.refusal.delta", **common, delta=d) for d in deltas]
            out.append(self.event("response.refusal.done", **common, refusal=text))
            part: dict[str, Any] = {"type": "refusal", "refusal": text}
        else:
            empty = {"type": "output_text", "text": "", "annotations": []}
            out.append(self.event("response.content_part.added", **common, part=empty))
            out += [
                self.event("response.output_text.delta", **common, delta=d, logprobs=[])
                for d in deltas
            ]
            out.append(self.event("response.output_text.done", **common, text=text, logprobs=[]))
            part = {"type": "output_text", "text": text, "annotations": []}
        out.append(self.event("response.content_part.done", **common, part=part))
        item = {**added, "status": "completed", "content": [part]}
        self.output.append(item)
        out.append(self.event("response.output_item.done", output_index=index, item=item))
        return out

    def function_call(
        self, index: int, name: str, deltas: Iterable[str], *, id: str, call_id: str
    ) -> list[bytes]:
        deltas = list(deltas)
        arguments = "".join(deltas)
        base = {"id": id, "type": "function_call", "call_id": call_id, "name": name}
        out = [
            self.event(
                "response.output_item.added",
                output_index=index,
                item={**base, "arguments": "", "status": "in_progress"},
            )
        ]
        out += [
            self.event(
                "response.function_call_arguments.delta", item_id=id, output_index=index, delta=d
            )
            for d in deltas
        ]
        out.append(
            self.event(
                "response.function_call_arguments.done",
                item_id=id,
                output_index=index,
                arguments=arguments,
            )
        )
        item = {**base, "arguments": arguments, "status": "completed"}
        self.output.append(item)
        out.append(self.event("response.output_item.done", output_index=index, item=item))
        return out

    # --- the end ------------------------------------------------------------------------

    @staticmethod
    def usage(inp: int, out: int, *, cached: int = 0, reasoning: int = 0) -> dict[str, Any]:
        return {
            "input_tokens": inp,
            "input_tokens_details": {"cached_tokens": cached},
            "output_tokens": out,
            "output_tokens_details": {"reasoning_tokens": reasoning},
            "total_tokens": inp + out,
        }

    def completed(self, usage: dict[str, Any]) -> bytes:
        return self.event("response.completed", response=self.response("completed", usage=usage))

    def incomplete(self, reason: str, usage: dict[str, Any]) -> bytes:
        response = self.response("incomplete", incomplete_details={"reason": reason}, usage=usage)
        return self.event("response.incomplete", response=response)

    def failed(self, code: str, message: str) -> bytes:
        response = self.response("failed", error={"code": code, "message": message})
        return self.event("response.failed", response=response)

    def error(self, code: str, message: str) -> bytes:
        return self.event("error", code=code, message=message, param=None)


def reply(events: Sequence[bytes], **kwargs: Any) -> Reply:
    """An SSE reply with OpenAI's request-id header."""
    headers = {"x-request-id": "req_123", **kwargs.pop("headers", {})}
    return sse_reply(list(events), headers=headers, **kwargs)
