"""Agent options and their validation."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..llm._types import CallConfig

__all__ = ["AgentOptions", "split_call", "validate_call", "validate_max_tokens"]

_MAX_SAFE = 2**53 - 1

#: ``call`` keys with a ``CallConfig`` field of their own; every other key is a provider
#: extra, carried verbatim (``CallConfig.extra``).
_CALL_FIELDS = ("temperature", "top_p", "tool_choice", "parallel_tool_calls")
#: Keys that are options of their own: ``call`` does not take them.
_OWN_OPTIONS = ("provider", "model", "max_tokens", "reasoning_effort", "output_schema")
_TOOL_CHOICES = ("auto", "none", "required")


def validate_max_tokens(value: object) -> None:
    """A positive integer that fits in 53 bits, or ``None``."""
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or not 0 < value <= _MAX_SAFE:
        raise ValueError(f"max_tokens must be a positive integer below 2**53, not {value!r}")


def _number(key: str, value: object, low: float, high: float) -> None:
    # ``key`` is already placed (``call.temperature``, ``request.temperature``)
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or not low <= value <= high
    ):
        raise ValueError(f"{key} must be a number from {low} to {high}, not {value!r}")


def validate_call(call: object, where: str = "call") -> None:
    """Request options: a mapping of string keys to JSON values, the known ones well typed;
    ``where`` names the mapping in a message.

    Raises:
        ValueError: naming the key and what it must be.
    """
    if call is None:
        return
    if not isinstance(call, Mapping):
        raise ValueError(f"{where} must be a mapping of request options, not {call!r}")
    for key, value in call.items():
        if not isinstance(key, str) or not key:
            raise ValueError(f"{where} keys must be non-empty strings, not {key!r}")
        if key in _OWN_OPTIONS:
            raise ValueError(f"{where}.{key}: set {key} as an option of its own")
        try:
            json.dumps(value, allow_nan=False)  # it is logged with each request header
        except (TypeError, ValueError):
            raise ValueError(f"{where}.{key} must be a JSON value, not {value!r}") from None
    if "temperature" in call:
        _number(f"{where}.temperature", call["temperature"], 0, 2)
    if "top_p" in call:
        _number(f"{where}.top_p", call["top_p"], 0, 1)
    choice = call.get("tool_choice")
    if choice is not None and not (
        choice in _TOOL_CHOICES or (isinstance(choice, Mapping) and choice)
    ):
        raise ValueError(
            f"{where}.tool_choice must be 'auto', 'none', 'required' or a mapping "
            f'({{"name": TOOL}} or the provider\'s own form), not {choice!r}'
        )
    parallel = call.get("parallel_tool_calls")
    if parallel is not None and not isinstance(parallel, bool):
        raise ValueError(f"{where}.parallel_tool_calls must be true or false, not {parallel!r}")


def split_call(call: Mapping[str, Any] | None) -> dict[str, Any]:
    """``call`` as ``CallConfig`` keywords: its own fields, the rest under ``extra``."""
    if not call:
        return {}
    out: dict[str, Any] = {k: call[k] for k in _CALL_FIELDS if call.get(k) is not None}
    extra = {k: v for k, v in call.items() if k not in _CALL_FIELDS}
    if extra:
        out["extra"] = extra
    return out


@dataclass(frozen=True, slots=True, kw_only=True)
class AgentOptions:
    """The model route an agent starts from; ``call`` holds request options sent on every
    request (``temperature``, ``top_p``, ``tool_choice``, ``parallel_tool_calls``, provider
    extras)."""

    provider: str | None = None
    model: str | None = None
    max_tokens: int | None = None
    reasoning_effort: str | None = None
    call: Mapping[str, Any] | None = None

    def validate(self) -> None:
        """Raises ``ValueError`` for an invalid option."""
        validate_max_tokens(self.max_tokens)
        for name in ("provider", "model", "reasoning_effort"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, str) or not value):
                raise ValueError(f"{name} must be a non-empty string or None")
        validate_call(self.call)

    def call_config(self) -> CallConfig:
        return CallConfig(
            provider=self.provider,
            model=self.model,
            max_tokens=self.max_tokens,
            reasoning_effort=self.reasoning_effort,
            **split_call(self.call),
        )
