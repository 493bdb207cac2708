"""Public test helpers: a scripted model and a loop-settling wait, so users can test
their own agents deterministically."""

from ._scripted import (
    HANG,
    ScriptedAdapter,
    aborted_response,
    error_response,
    hang_after,
    max_tokens_response,
    raise_after,
    reasoning_response,
    text_response,
    tool_call_response,
    tool_calls_response,
)
from ._settle import wait_all_tasks_blocked

__all__ = [
    "HANG",
    "ScriptedAdapter",
    "aborted_response",
    "error_response",
    "hang_after",
    "max_tokens_response",
    "raise_after",
    "reasoning_response",
    "text_response",
    "tool_call_response",
    "tool_calls_response",
    "wait_all_tasks_blocked",
]
