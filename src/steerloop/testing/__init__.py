"""Public test helpers: a scripted model so users can test their own agents."""

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
]
