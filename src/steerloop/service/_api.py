"""The service's vocabulary, shared by both hosts and the HTTP app: ``ApiError`` (every
error answer), the ``Host`` protocol the in-process host (``_local.LocalHost``) and the
PostgreSQL host (``_pg._host.PgHost``) implement, and the checks and bodies they share.

Nothing here holds state: the hosts own their sessions, ``_endpoints`` and the other
endpoint modules answer the routes.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal, Protocol

from ..llm.chunks import chunk_to_json
from ..messages import Block
from ..session import InputAction, fold_state, pending_deferred
from ..session.events import ApprovalRequested, SessionEvent

if TYPE_CHECKING:
    from .. import Runtime
    from ..hooks import StreamFrame
    from ._profile import Profile

__all__ = [
    "APPROVAL_BY",
    "MAX_SESSION_ID",
    "ApiError",
    "Host",
    "MessageMode",
    "approval_json",
    "check_session_id",
    "choose_profile",
    "frame_json",
    "not_waiting",
    "require_found",
    "shared_fields",
]

MAX_SESSION_ID = 128
"""The longest session id a service creates (characters)."""
APPROVAL_BY = "http"
"""``tool/approval-decided.by`` of a decision that came over HTTP."""

MessageMode = Literal["followup", "steer", "inject"]
"""How a message reaches the agent (``POST /v1/sessions/{id}/messages`` ``mode``)."""


class ApiError(Exception):
    """An HTTP error answer: ``{"error": {"code", "message"}}`` with ``status``."""

    def __init__(
        self, status: int, code: str, message: str, headers: dict[str, str] | None = None
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.headers = headers or {}


class Host(Protocol):
    """What the HTTP app asks of a host: sessions, their commands and their logs.

    Both hosts answer a command only once it is durable (``LocalHost``: in the log;
    ``PgHost``: as a command row); both raise ``ApiError`` for every refusal.
    """

    @property
    def rt(self) -> Runtime: ...
    @property
    def profiles(self) -> Mapping[str, Profile]: ...
    @property
    def closed(self) -> bool: ...
    async def start(self) -> None: ...
    async def close(self) -> None: ...
    def profile(self, name: str | None) -> Profile: ...
    async def exists(self, session_id: str) -> bool: ...
    async def require(self, session_id: str) -> None: ...
    async def create(
        self,
        session_id: str,
        profile: Profile,
        meta: dict[str, Any] | None,
        first: str | tuple[Block, ...] | None,
    ) -> dict[str, Any]: ...
    async def describe(self, session_id: str) -> dict[str, Any]: ...
    async def listing(self) -> list[dict[str, Any]]: ...
    async def status_of(self, session_id: str) -> str: ...
    async def send(
        self,
        session_id: str,
        kind: Literal["followup", "steer", "inject", "cancel"],
        content: str | tuple[Block, ...],
        message_id: str | None,
        key: str | None,
        *,
        keep_inbox: bool = False,
        trace: Mapping[str, str] | None = None,
        source: Mapping[str, Any] | None = None,
    ) -> dict[str, Any]: ...
    async def submit_approval(
        self, session_id: str, call_id: str, decision: Literal["allow", "deny"], reason: str | None
    ) -> dict[str, Any]: ...
    async def submit_input(
        self,
        session_id: str,
        input_id: str,
        action: InputAction,
        content: Mapping[str, Any] | None,
    ) -> dict[str, Any]: ...
    async def command(
        self,
        session_id: str,
        kind: Literal["client_tools", "client_result", "state"],
        body: Mapping[str, Any],
    ) -> dict[str, Any]: ...
    async def log_events(self, session_id: str) -> tuple[SessionEvent, ...]: ...
    async def events_after(
        self, session_id: str, after: int, limit: int
    ) -> list[dict[str, Any]]: ...
    async def last_seq(self, session_id: str) -> int: ...


def check_session_id(session_id: str) -> None:
    """Refuse, before anything is written, a session id the routes could not address:
    ``/`` (a path segment ends there), ``.`` and ``..`` (clients collapse dot segments),
    control or surrogate characters, and more than ``MAX_SESSION_ID`` characters.

    Raises:
        ApiError: 422 ``invalid_session_id`` naming what is wrong.
    """
    problem = None
    if not session_id or len(session_id) > MAX_SESSION_ID:
        problem = f"must be 1 to {MAX_SESSION_ID} characters (got {len(session_id)})"
    elif "/" in session_id:
        problem = "must not contain '/'"
    elif session_id in (".", ".."):
        problem = "must not be '.' or '..'"
    elif any(unicodedata.category(c) in ("Cc", "Cs") for c in session_id):
        problem = "must not contain control characters"
    if problem is not None:
        shown = session_id if len(session_id) <= 40 else session_id[:40] + "…"
        raise ApiError(422, "invalid_session_id", f"session id {shown!r} {problem}")


def choose_profile(profiles: Mapping[str, Profile], name: str | None) -> Profile:
    """The profile ``name`` (``"default"`` when ``None``); 422 naming the served ones."""
    name = "default" if name is None else name
    profile = profiles.get(name)
    if profile is None:
        known = ", ".join(sorted(profiles)) or "none"
        raise ApiError(422, "unknown_profile", f"no profile {name!r} (served: {known})")
    return profile


def require_found(session_id: str, found: bool) -> None:
    """404 for a session neither host nor store knows."""
    if not found:
        raise ApiError(404, "session_not_found", f"no session {session_id!r}")


def not_waiting(session_id: str, call_id: str, state: str) -> ApiError:
    """The answer to a decision for a call that waits for none: 409 when it was decided,
    else 404."""
    if state == "decided":
        return ApiError(409, "ALREADY_DECIDED", f"call {call_id!r} was already decided")
    return ApiError(
        404, "approval_not_found", f"session {session_id!r} has no pending call {call_id!r}"
    )


def approval_json(request: ApprovalRequested) -> dict[str, Any]:
    """A pending approval as ``GET /v1/sessions/{id}`` lists it."""
    return {
        "call_id": request.call_id,
        "name": request.name,
        "arguments": request.arguments,
        "reason": request.reason,
    }


def shared_fields(events: Sequence[SessionEvent]) -> dict[str, Any]:
    """``state`` (the shared state document) and ``pending_client_calls`` (calls waiting
    for a client's result) of ``GET /v1/sessions/{id}``, folded from the log."""
    return {
        "state": fold_state(events),
        "pending_client_calls": [
            {"call_id": d.call_id, "name": d.name, "arguments": d.arguments}
            for d in pending_deferred(events)
        ],
    }


def frame_json(frame: StreamFrame) -> dict[str, Any]:
    """The JSON body of one live frame (``event: stream`` on the SSE feed)."""
    body: dict[str, Any] = {
        "kind": frame.kind,
        "attempt_id": frame.attempt_id,
        "revision": frame.revision,
        "turn": frame.turn,
        "step": frame.step,
    }
    if frame.chunk is not None:
        body["chunk"] = chunk_to_json(frame.chunk)
    return body
