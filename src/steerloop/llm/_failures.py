"""The one failure table of the provider adapters: an HTTP status, a provider error type or
code and the error text → ``(code, retryable)``.

Both adapters classify through ``classify`` so a server means the same thing whichever SDK
read it. Context overflow is recognised by error type or code (OpenAI
``context_length_exceeded``, llama.cpp ``exceed_context_size_error``) and by the wording of
OpenAI, Anthropic, DeepSeek, llama.cpp, vLLM and Ollama, since local servers send it as a
plain 400.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

__all__ = ["classify", "is_context_overflow"]

# Error ``type`` or ``code`` values that settle the class whatever the status says.
_BY_KIND: Mapping[str, tuple[str, bool]] = {
    "context_length_exceeded": ("CONTEXT_OVERFLOW", False),  # OpenAI, DeepSeek
    "exceed_context_size_error": ("CONTEXT_OVERFLOW", False),  # llama.cpp server
    "insufficient_quota": ("QUOTA", False),  # OpenAI: a 429 that waiting will not fix
    "billing_error": ("QUOTA", False),
    "rate_limit_error": ("RATE_LIMITED", True),
    "rate_limit_exceeded": ("RATE_LIMITED", True),
    "overloaded_error": ("OVERLOADED", True),
    "api_error": ("SERVER", True),
    "server_error": ("SERVER", True),
    "timeout_error": ("TIMEOUT", True),
    "conflict_error": ("CONFLICT", True),
    "authentication_error": ("AUTH", False),
    "permission_error": ("AUTH", False),
    "not_found_error": ("NOT_FOUND", False),
    "request_too_large": ("INVALID_REQUEST", False),  # bytes, not tokens
    "invalid_request_error": ("INVALID_REQUEST", False),
}

_BY_STATUS: Mapping[int, tuple[str, bool]] = {
    400: ("INVALID_REQUEST", False),
    401: ("AUTH", False),
    402: ("QUOTA", False),
    403: ("AUTH", False),
    404: ("NOT_FOUND", False),
    408: ("TIMEOUT", True),
    409: ("CONFLICT", True),
    413: ("INVALID_REQUEST", False),
    422: ("INVALID_REQUEST", False),
    429: ("RATE_LIMITED", True),
    529: ("OVERLOADED", True),
}

# One alternative per server family; each was seen in that server's error text.
_OVERFLOW = re.compile(
    r"context[_ ]length"  # OpenAI "maximum context length", vLLM, Ollama "context length"
    r"|context (?:window|limit)"  # Anthropic "exceed context limit", generic
    r"|(?:available )?context size"  # llama.cpp "exceeds the available context size"
    r"|maximum model length|max_model_len"  # vLLM "longer than the maximum model length"
    r"|too many tokens"
    r"|prompt (?:is )?too long"  # Anthropic "prompt is too long", Ollama "prompt too long"
    r"|reduce the length",  # OpenAI "Please reduce the length of the messages"
    re.IGNORECASE,
)


def is_context_overflow(text: str) -> bool:
    """Whether ``text`` reads like a context-window overflow of any known server."""
    return _OVERFLOW.search(text) is not None


def classify(
    *,
    status: int | None,
    error_type: str | None = None,
    error_code: str | None = None,
    text: str = "",
) -> tuple[str, bool]:
    """``(code, retryable)`` of a provider error.

    ``status`` is ``None`` for an error sent inside a stream that had already answered 200:
    unless its type says otherwise the server gave up mid-answer (``SERVER``, retryable).
    """
    mapped = (
        (_BY_KIND.get(error_code) if error_code else None)
        or (_BY_KIND.get(error_type) if error_type else None)
        or (_BY_STATUS.get(status) if status is not None else None)
    )
    if mapped is None:
        client_error = status is not None and status < 500
        mapped = ("INVALID_REQUEST", False) if client_error else ("SERVER", True)
    code, retryable = mapped
    # A local server reports overflow as a plain 400 (or an in-stream error) with only words.
    below_500 = status is None or status < 500
    if code in ("INVALID_REQUEST", "SERVER") and below_500 and is_context_overflow(text):
        return "CONTEXT_OVERFLOW", False
    return code, retryable
