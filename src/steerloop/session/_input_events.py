"""The payload records of the input and MCP events (log-only): ``input/requested``,
``input/answered``, ``mcp/task-created``, ``mcp/resource-updated``, ``mcp/sampled``.

Their folds are in ``_inputs.py``; ``_events.py`` lists them among the event records.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

from .._model import TokenUsage

__all__ = [
    "InputAction",
    "InputAnswered",
    "InputRequest",
    "MCPResourceUpdated",
    "MCPSampled",
    "MCPTaskCreated",
]

InputAction = Literal["accept", "decline", "cancel"]


@dataclass(frozen=True, slots=True, kw_only=True)
class InputRequest:
    """Payload of ``input/requested``: what a person is asked, and in answer to what.

    ``schema`` is the JSON schema an ``accept`` answer's content must satisfy (``None`` for a
    request to visit ``url``). ``kind`` is ``elicitation`` (the server asks the user) or
    ``sampling`` (a sampling request held for approval: ``accept`` lets it run). ``resume``
    is opaque state a transport records to finish the call after a restart.
    """

    TYPE: ClassVar[Literal["input/requested"]] = "input/requested"

    id: str
    server: str
    message: str
    schema: Mapping[str, Any] | None = None
    url: str | None = None
    kind: Literal["elicitation", "sampling"] = "elicitation"
    call_id: str | None = None
    turn: int | None = None
    resume: Any = None


@dataclass(frozen=True, slots=True, kw_only=True)
class InputAnswered:
    """Payload of ``input/answered``: the one answer to an input request (``by``: who)."""

    TYPE: ClassVar[Literal["input/answered"]] = "input/answered"

    id: str
    action: InputAction
    content: Mapping[str, Any] | None = None
    by: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class MCPTaskCreated:
    """Payload of ``mcp/task-created``: the server runs call ``call_id`` as task ``task_id``
    (written before the call waits, so a recovery can ask the server for its result)."""

    TYPE: ClassVar[Literal["mcp/task-created"]] = "mcp/task-created"

    call_id: str
    server: str
    task_id: str
    ttl_ms: int | None = None
    poll_ms: int | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class MCPResourceUpdated:
    """Payload of ``mcp/resource-updated``: ``server`` said resource ``uri`` changed."""

    TYPE: ClassVar[Literal["mcp/resource-updated"]] = "mcp/resource-updated"

    server: str
    uri: str


@dataclass(frozen=True, slots=True, kw_only=True)
class MCPSampled:
    """Payload of ``mcp/sampled``: a server's ``sampling/createMessage`` and its answer.

    ``outcome`` is ``answered`` (the agent's model answered: ``provider``, ``model``,
    ``usage``, ``stop_reason``, ``text``), ``denied`` (the policy or a person refused) or
    ``failed`` (the model request failed: ``detail``).
    """

    TYPE: ClassVar[Literal["mcp/sampled"]] = "mcp/sampled"

    server: str
    outcome: Literal["answered", "denied", "failed"]
    call_id: str | None = None
    provider: str | None = None
    model: str | None = None
    usage: TokenUsage | None = None
    stop_reason: str | None = None
    text: str | None = None
    detail: str | None = None
