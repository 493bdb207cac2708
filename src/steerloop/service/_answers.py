"""The JSON answers of the service, one pydantic model each, as the endpoints write them
today (API.md "Service"): the OpenAPI document (``_openapi``) describes them with these, and
a test fuzzes the server against it. The endpoints build their answers as dicts; these
models document them and never reshape them, so a field an answer gains must be added here
(extra fields are allowed by the schemas, missing or mistyped ones are not)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

__all__ = [
    "Accepted",
    "Created",
    "Error",
    "Health",
    "LogPage",
    "ProfileList",
    "PromptList",
    "ReplayDone",
    "SessionInfo",
    "SessionList",
]


class ErrorBody(BaseModel):
    code: str
    """A stable code (``session_not_found``, ``IDEMPOTENCY_KEY_REUSED``, ...)."""
    message: str


class Error(BaseModel):
    """Every 4xx and 5xx answer (``_errors.error_response``)."""

    error: ErrorBody


class Health(BaseModel):
    """``GET /healthz``."""

    ok: bool
    """Whether the service's lifespan has opened its host (false while starting)."""
    role: Literal["all", "api", "worker"]
    worker_id: str


class Created(BaseModel):
    """``POST /v1/sessions`` (201)."""

    session_id: str
    events_url: str
    queued: bool = False
    """PostgreSQL: no live worker serves the session's profile yet (see ``note``)."""
    note: str | None = None


class SessionRow(BaseModel):
    session_id: str
    status: str
    last_seq: int
    updated_at: int | None
    """Milliseconds since the epoch of the last event (``None``: never stored)."""


class SessionList(BaseModel):
    """``GET /v1/sessions``."""

    sessions: list[SessionRow]


class Owner(BaseModel):
    worker_id: str
    host: str
    pid: int


class PendingApproval(BaseModel):
    call_id: str
    name: str
    arguments: Any
    reason: str | None


class PendingInput(BaseModel):
    id: str
    server: str | None
    message: str
    schema_: dict[str, Any] | None = Field(alias="schema")
    url: str | None
    kind: str
    call_id: str | None


class ClientCall(BaseModel):
    call_id: str
    name: str
    arguments: Any


class SessionInfo(BaseModel):
    """``GET /v1/sessions/{id}``."""

    session_id: str
    profile: str
    status: Literal["idle", "running", "unloaded", "queued"]
    queued_reason: str | None = None
    """Only with ``status`` ``queued``: why no worker holds it yet."""
    last_seq: int
    owner: Owner | None
    pending_approvals: list[PendingApproval]
    pending_inputs: list[PendingInput]
    state: dict[str, Any]
    """The shared state document (AG-UI), folded from ``state/changed`` events."""
    pending_client_calls: list[ClientCall]


class Accepted(BaseModel):
    """202 for a command accepted as durable: a message, a cancel, a decision, an answer."""

    cmd_seq: int
    """The command's place in the session's order (gap-free per session)."""
    message_id: str | None = None
    """A message's id (``UserMessage.id`` in the log); messages only."""


class StoredEvent(BaseModel):
    """One event in its stored JSON form."""

    seq: int
    type: str
    time: int
    data: dict[str, Any]


class LogPage(BaseModel):
    """``GET /v1/sessions/{id}/log``."""

    events: list[StoredEvent]
    last_seq: int


class PromptArgument(BaseModel):
    name: str
    description: str
    required: bool


class PromptRow(BaseModel):
    server: str
    name: str
    command: str
    description: str
    arguments: list[PromptArgument]


class PromptList(BaseModel):
    """``GET /v1/sessions/{id}/prompts``."""

    prompts: list[PromptRow]
    unavailable: list[str]
    """MCP servers that failed to list their prompts."""


class ProfileRow(BaseModel):
    name: str
    provider: str | None
    model: str | None


class ProfileList(BaseModel):
    """``GET /v1/profiles``: the served profiles with a model."""

    profiles: list[ProfileRow]


class ReplayDone(BaseModel):
    """``POST /v1/sessions/{id}/replays`` (201)."""

    session_id: str
    """The new session the replay wrote."""
    report: dict[str, Any]
    markdown: str
