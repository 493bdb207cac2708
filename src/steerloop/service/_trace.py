"""The caller's trace context of a message (``traceparent``/``tracestate`` of its HTTP
request), carried into the turn the message causes, on either host."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..hooks import AgentRef

__all__ = ["TRACE_HEADERS", "continue_caller_trace", "trace_headers"]

TRACE_HEADERS = ("traceparent", "tracestate")


def trace_headers(value: Any) -> dict[str, str]:
    """The trace headers in ``value`` (a request's headers or a stored command body's
    ``trace``; anything else, or a non-string entry, gives nothing)."""
    if not isinstance(value, Mapping):
        return {}
    return {k: v for k in TRACE_HEADERS if isinstance(v := value.get(k), str)}


def continue_caller_trace(agent: AgentRef, trace: Any, message_id: str) -> None:
    """Before the message ``message_id`` is sent to ``agent``: the turn it causes becomes a
    child of the caller's span (``steerloop.telemetry.continue_trace``); a no-op without
    the ``otel`` extra or a valid ``traceparent``."""
    headers = trace_headers(trace)
    if "traceparent" not in headers:
        return
    try:
        from ..telemetry import continue_trace
    except ImportError:  # the otel extra is not installed: nothing records spans
        return
    continue_trace(agent, headers, message_id)
