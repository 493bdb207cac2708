"""``CallConfig.tool_choice`` and ``parallel_tool_calls`` in each provider's wire format.

The portable forms are ``"auto"``, ``"none"``, ``"required"`` and ``{"name": TOOL}``; any other
mapping is the provider's own form and goes out verbatim. Both are sent only on a request that
offers tools (OpenAI refuses a ``tool_choice`` without ``tools``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ._types import CallConfig, GenerateRequest

__all__ = ["anthropic_tool_choice", "openai_tool_fields"]


def _forced(choice: object) -> str | None:
    """The tool name of a portable ``{"name": TOOL}``, else ``None``."""
    if isinstance(choice, Mapping) and set(choice) == {"name"} and isinstance(choice["name"], str):
        return choice["name"]
    return None


def _config(request: GenerateRequest) -> CallConfig | None:
    return request.config if request.tools else None


def openai_tool_fields(request: GenerateRequest, *, responses: bool) -> dict[str, Any]:
    """``tool_choice`` / ``parallel_tool_calls`` of a chat-completions or Responses body."""
    config = _config(request)
    if config is None:
        return {}
    out: dict[str, Any] = {}
    choice = config.tool_choice
    if choice is not None:
        name = _forced(choice)
        if name is None:
            out["tool_choice"] = dict(choice) if isinstance(choice, Mapping) else choice
        elif responses:
            out["tool_choice"] = {"type": "function", "name": name}
        else:
            out["tool_choice"] = {"type": "function", "function": {"name": name}}
    if config.parallel_tool_calls is not None:
        out["parallel_tool_calls"] = config.parallel_tool_calls
    return out


_ANTHROPIC = {"auto": "auto", "none": "none", "required": "any"}


def anthropic_tool_choice(request: GenerateRequest) -> dict[str, Any] | None:
    """The Messages API ``tool_choice``: ``parallel_tool_calls=False`` is its
    ``disable_parallel_tool_use``, on the given choice or on ``auto``."""
    config = _config(request)
    if config is None or (config.tool_choice is None and config.parallel_tool_calls is None):
        return None
    choice = config.tool_choice
    name = _forced(choice)
    if name is not None:
        out: dict[str, Any] = {"type": "tool", "name": name}
    elif isinstance(choice, Mapping):
        out = dict(choice)
    else:
        out = {"type": _ANTHROPIC.get(choice or "auto", "auto")}
    if config.parallel_tool_calls is not None and out.get("type") != "none":
        out["disable_parallel_tool_use"] = not config.parallel_tool_calls
    return out
