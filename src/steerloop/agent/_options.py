"""Agent options and their validation."""

from __future__ import annotations

from dataclasses import dataclass

from ..llm._types import CallConfig

__all__ = ["AgentOptions", "validate_max_tokens"]

_MAX_SAFE = 2**53 - 1


def validate_max_tokens(value: object) -> None:
    """A positive integer that fits in 53 bits, or ``None``."""
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or not 0 < value <= _MAX_SAFE:
        raise ValueError(f"max_tokens must be a positive integer below 2**53, not {value!r}")


@dataclass(frozen=True, slots=True, kw_only=True)
class AgentOptions:
    """The model route an agent starts from."""

    provider: str | None = None
    model: str | None = None
    max_tokens: int | None = None
    reasoning_effort: str | None = None

    def validate(self) -> None:
        """Raises ``ValueError`` for an invalid option."""
        validate_max_tokens(self.max_tokens)
        for name in ("provider", "model", "reasoning_effort"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, str) or not value):
                raise ValueError(f"{name} must be a non-empty string or None")

    def call_config(self) -> CallConfig:
        return CallConfig(
            provider=self.provider,
            model=self.model,
            max_tokens=self.max_tokens,
            reasoning_effort=self.reasoning_effort,
        )
