"""What the two OpenAI adapters (chat completions and Responses) share: the table of
well-known models and the map from the SDK's exceptions to ``LlmFailure``."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

import openai

from ._failures import classify
from ._http import NO_KEY, redact, retry_after_ms
from ._types import LlmFailure, ModelInfo

__all__ = [
    "KNOWN_MODELS",
    "REASONING_MODELS",
    "RESPONSES_FIRST",
    "UNKNOWN_INPUTS",
    "failure_from_exception",
    "open_client",
    "resolve_known",
    "responses_first",
    "wire_parameters",
]

# Context window, output ceiling, whether the model is Responses-first and whether it takes
# JSON-schema output, of well-known models; a dated variant ("gpt-4o-2024-08-06") matches its
# longest known prefix. Responses-first: OpenAI's reasoning models, whose reasoning items only
# the Responses API carries between requests (chat completions drops them between tool
# calls); o1-mini is left on chat completions (no tools, no reasoning summaries).
_TABLE: Mapping[str, tuple[int, int, bool, bool]] = {
    "deepseek-chat": (128_000, 8_192, False, False),
    "deepseek-reasoner": (128_000, 65_536, False, False),
    "gpt-4o": (128_000, 16_384, False, True),
    "gpt-4o-mini": (128_000, 16_384, False, True),
    "gpt-4-turbo": (128_000, 4_096, False, False),
    "gpt-4.1": (1_047_576, 32_768, False, True),
    "gpt-4.1-mini": (1_047_576, 32_768, False, True),
    "gpt-4.1-nano": (1_047_576, 32_768, False, True),
    "gpt-5": (400_000, 128_000, True, True),
    "o1": (200_000, 100_000, True, False),
    "o1-mini": (128_000, 65_536, False, False),
    "o3": (200_000, 100_000, True, True),
    "o3-mini": (200_000, 100_000, True, True),
    "o4-mini": (200_000, 100_000, True, True),
}
# What each takes in messages (OpenAI's model pages; DeepSeek's API takes text only). PDF
# input is for the vision models ("gpt-4o and later"); o1-mini and o3-mini see no images.
_ALL = frozenset({"text", "image", "file"})
_TEXT = frozenset({"text"})
_INPUTS: Mapping[str, frozenset[str]] = {
    "deepseek-chat": _TEXT,
    "deepseek-reasoner": _TEXT,
    "gpt-4-turbo": frozenset({"text", "image"}),
    "o1-mini": _TEXT,
    "o3-mini": _TEXT,
}
UNKNOWN_INPUTS: frozenset[str] = frozenset({"text", "image"})
"""What an OpenAI-compatible model the table does not know is taken to accept."""
KNOWN_MODELS: Mapping[str, ModelInfo] = {
    name: ModelInfo(
        context_window=window,
        max_output_tokens=ceiling,
        json_schema_output=schema,
        input_modalities=_INPUTS.get(name, _ALL),
    )
    for name, (window, ceiling, _, schema) in _TABLE.items()
}
RESPONSES_FIRST: frozenset[str] = frozenset(name for name, row in _TABLE.items() if row[2])
"""Known models ``steerloop chat -m openai/...`` sends through ``OpenAIResponsesAdapter``."""


def wire_parameters(parameters: Mapping[str, Any]) -> dict[str, Any]:
    """A tool's parameter schema as OpenAI-compatible endpoints take it: without the
    ``$schema`` dialect keyword, which some of them refuse. The tool keeps its dialect (it is
    validated, logged and offered elsewhere as defined); only the request leaves it out."""
    return {k: v for k, v in parameters.items() if k != "$schema"}


# Reasoning models of OpenAI take ``max_completion_tokens`` and refuse ``max_tokens``.
REASONING_MODELS = re.compile(r"^(o\d|gpt-5)")


def _known_name(model: str, names: Iterable[str]) -> str | None:
    """``model`` itself or its longest known prefix (``model`` = prefix + "-...")."""
    names = list(names)
    if model in names:
        return model
    matches = [name for name in names if model.startswith(name + "-")]
    return max(matches, key=len) if matches else None


def resolve_known(model: str, models: Mapping[str, ModelInfo] | None = None) -> ModelInfo:
    """Limits of ``model`` from ``models`` over ``KNOWN_MODELS``, or an empty ``ModelInfo``."""
    table = {**KNOWN_MODELS, **(models or {})}
    name = _known_name(model, table)
    return table[name] if name is not None else ModelInfo(input_modalities=UNKNOWN_INPUTS)


def responses_first(model: str) -> bool:
    """Whether the known-models table marks ``model`` (or its prefix) Responses-first."""
    name = _known_name(model, _TABLE)
    return name is not None and name in RESPONSES_FIRST


# --- failures ---------------------------------------------------------------------------


def _error_body(body: Any) -> tuple[str | None, str | None, str | None]:
    """``(message, code, type)`` from an error body (``{"error": {...}}`` or the inner dict)."""
    if isinstance(body, Mapping) and isinstance(body.get("error"), Mapping):
        body = body["error"]
    if not isinstance(body, Mapping):
        return (body if isinstance(body, str) else None), None, None
    message, code, kind = body.get("message"), body.get("code"), body.get("type")
    return (
        message if isinstance(message, str) else None,
        str(code) if code is not None else None,
        kind if isinstance(kind, str) else None,
    )


def failure_from_exception(exc: BaseException, *, secret: str | None = None) -> LlmFailure:
    """Map an SDK/HTTP exception to an ``LlmFailure``; ``secret`` is scrubbed from the text."""
    if isinstance(exc, openai.APIStatusError):
        message, code, err_type = _error_body(exc.body)
        text = message or exc.message or f"HTTP {exc.status_code}"
        kind, retryable = classify(
            status=exc.status_code, error_type=err_type, error_code=code, text=text
        )
        return LlmFailure(
            message=redact(f"HTTP {exc.status_code}: {text}", secret),
            code=kind,
            status=exc.status_code,
            retryable=retryable,
            provider_retry_after_ms=retry_after_ms(exc.response.headers),
            request_id=exc.request_id,
        )
    if isinstance(exc, openai.APITimeoutError):
        return LlmFailure(message="the request timed out", code="TIMEOUT", retryable=True)
    if isinstance(exc, openai.APIConnectionError):
        cause = exc.__cause__
        detail = f": {type(cause).__name__}" if cause is not None else ""
        return LlmFailure(
            message=redact(f"connection error{detail}", secret), code="CONNECTION", retryable=True
        )
    if isinstance(exc, openai.APIError):
        # An error object sent inside the event stream.
        message, code, err_type = _error_body(exc.body)
        stream_text = message or exc.message
        name, retryable = classify(
            status=None, error_type=err_type, error_code=code, text=stream_text
        )
        return LlmFailure(
            message=redact(f"stream error: {stream_text}", secret),
            code=name,
            retryable=retryable,
        )
    if isinstance(exc, ValueError):
        return LlmFailure(
            message=redact(f"malformed response from the server: {exc}", secret),
            code="BAD_RESPONSE",
            retryable=False,
        )
    return LlmFailure(
        message=redact(f"{type(exc).__name__}: {exc}", secret), code="UNKNOWN", retryable=False
    )


def open_client(
    base_url: str | None,
    api_key: str | None,
    default_headers: Mapping[str, str] | None,
    timeout: float | None,
) -> tuple[openai.AsyncOpenAI, str | None]:
    """The SDK client of an OpenAI adapter (its hidden retries off) and the key to redact.

    A server named by ``base_url`` without a key gets a placeholder: local servers need none,
    and a key from the environment must not travel to a host the caller named.
    """
    if api_key is None and base_url is not None:
        api_key = NO_KEY
    client = openai.AsyncOpenAI(
        base_url=base_url or "https://api.openai.com/v1",
        api_key=api_key,
        default_headers=dict(default_headers) if default_headers else None,
        timeout=timeout,
        max_retries=0,
    )
    return client, api_key or client.api_key
