"""Where a connection applies ``MCPLimits``: every message, before the SDK validates it.

A ``Bounder`` belongs to one connection. It learns the method of each request we send
(``sent``) so it can bound the answer to it (``bound``): a tool result, a read, a prompt, a
list. A message read as text (stdio) is decoded by ``decode``: a short one at once, a long
one by the sliced decoder (``_slices.py``) in a worker thread, so the event loop never waits
for a large message; the JSON-RPC envelope is validated only after the cut.
"""

from __future__ import annotations

import json
from typing import Any

import anyio.to_thread
import mcp_types as types
from mcp.shared.message import SessionMessage

from ..session.store import bulk_decoding
from ._limits import MCPLimits, bound_error, bound_listing, bound_result, bound_tools
from ._slices import decode_sliced

__all__ = ["FAST_CHARS", "TASK_KEY", "Bounder", "MessageTooLarge"]

#: ``_meta`` key under which the answer to a task-augmented ``tools/call`` carries its task.
#: The SDK validates every ``tools/call`` answer as a tool result; the task handle a server
#: answers such a call with (``CreateTaskResult``) is carried inside an empty one instead.
TASK_KEY = "steerloop/task"
_TASK_CALL = "tools/call (task)"

#: A message up to this many characters is decoded on the event loop in one call (about a
#: millisecond); a longer one in a worker thread, a slice at a time.
FAST_CHARS = 65_536

_RESULT_ITEMS = {
    "tools/call": "content",
    "tasks/result": "content",
    "resources/read": "contents",
    "prompts/get": "messages",
}
_LISTINGS = {
    "resources/list": "resources",
    "resources/templates/list": "resourceTemplates",
    "prompts/list": "prompts",
}


class MessageTooLarge(ValueError):
    """A server sent a message longer than a connection reads at all."""


class Bounder:
    """The limits of one connection and the methods of its requests in flight."""

    def __init__(self, limits: MCPLimits) -> None:
        self.limits = limits
        self._methods: dict[str | int, str] = {}

    def sent(self, message: SessionMessage) -> None:
        """Note the method of a request we send (its answer is bounded by it)."""
        root = message.message
        if isinstance(root, types.JSONRPCRequest):
            params = root.params or {}
            tasked = root.method == "tools/call" and params.get("task") is not None
            self._methods[root.id] = _TASK_CALL if tasked else root.method

    def bound(self, raw: Any) -> Any:
        """``raw`` (one decoded JSON-RPC message) within the limits."""
        if not isinstance(raw, dict) or "method" in raw:
            return raw  # requests and notifications are bounded where they are handled
        request_id = raw.get("id")
        method = self._methods.pop(request_id, None) if isinstance(request_id, str | int) else None
        error = raw.get("error")
        if isinstance(error, dict):
            return {**raw, "error": bound_error(error)}
        result = raw.get("result")
        if not isinstance(result, dict) or method is None:
            return raw
        limits = self.limits
        if method == _TASK_CALL:
            task = result.get("task")
            if isinstance(task, dict) and "content" not in result:
                return {**raw, "result": {"content": [], "_meta": {TASK_KEY: task}}}
            method = "tools/call"
        if method in _RESULT_ITEMS:
            result = bound_result(result, _RESULT_ITEMS[method], limits)
        elif method == "tools/list":
            result = bound_tools(result, limits)
        elif method in _LISTINGS:
            result = bound_listing(result, _LISTINGS[method], limits)
        return {**raw, "result": result}

    def _parse(self, data: bytes | str) -> SessionMessage | Exception:
        try:
            line = data.decode() if isinstance(data, bytes) else data
            if len(line) <= FAST_CHARS:
                return self._message(json.loads(line))
            # Thousands of small containers come and go: a collection of the cyclic
            # collector they set off would hold the GIL (the loop's too) while it walks the
            # whole heap. Nothing decoded here forms a cycle.
            with bulk_decoding():
                limits = self.limits
                raw = decode_sliced(
                    line, max_items=limits.decoder_items, max_chars=limits.decoder_chars
                )
                return self._message(raw)
        except (ValueError, RecursionError) as exc:
            return exc

    def _message(self, raw: Any) -> SessionMessage:
        """The bounded, validated message of ``raw`` (the unbounded value is let go here)."""
        bounded = self.bound(raw)
        del raw
        return SessionMessage(types.jsonrpc_message_adapter.validate_python(bounded, by_name=False))

    async def decode(self, line: bytes | str) -> SessionMessage | Exception:
        """One message read as (UTF-8) text, bounded; a malformed one is returned, not raised."""
        if len(line) <= FAST_CHARS:
            return self._parse(line)
        return await anyio.to_thread.run_sync(self._parse, line)

    async def bound_message(
        self, message: SessionMessage | Exception
    ) -> SessionMessage | Exception:
        """A message another transport decoded, bounded when it answers a bounded method."""
        if isinstance(message, Exception):
            return message
        root = message.message
        if not isinstance(root, types.JSONRPCResponse | types.JSONRPCError):
            return message
        if isinstance(root, types.JSONRPCResponse) and self._methods.get(root.id) not in (
            *_RESULT_ITEMS,
            *_LISTINGS,
            "tools/list",
            _TASK_CALL,
        ):
            self._methods.pop(root.id, None)
            return message

        def rebuild() -> SessionMessage:
            raw = root.model_dump(by_alias=True, mode="json", exclude_none=True)
            bounded = types.jsonrpc_message_adapter.validate_python(self.bound(raw), by_name=False)
            return SessionMessage(bounded, metadata=message.metadata)

        return await anyio.to_thread.run_sync(rebuild)
