"""Bounded SSE streams: a stream holds a connection (and a descriptor) for as long as its
reader wants, so the server counts them, in all and per session, and answers one too many
at once instead of letting idle readers starve everyone else."""

from __future__ import annotations

from collections import Counter

from starlette.types import ASGIApp, Receive, Scope, Send

from ._errors import ApiError, error_response
from ._limits import Limits

__all__ = ["StreamLimitMiddleware", "stream_of"]

_SESSIONS = "/v1/sessions/"
RETRY_AFTER = "1"


def stream_of(scope: Scope) -> tuple[str, str | None] | None:
    """``("events", session_id)`` for ``GET /v1/sessions/{id}/events``, ``("agui", None)``
    for ``POST /v1/agui`` (its session is in the body), ``None`` for any other request."""
    path: str = scope["path"]
    root: str = scope.get("root_path", "")
    if root and path.startswith(root):
        path = path[len(root) :]
    method = scope["method"]
    if method == "POST" and path == "/v1/agui":
        return "agui", None
    if method == "GET" and path.startswith(_SESSIONS) and path.endswith("/events"):
        session_id = path[len(_SESSIONS) : -len("/events")]
        if session_id and "/" not in session_id:
            return "events", session_id
    return None


class StreamLimitMiddleware:
    """At most ``limits.max_streams`` SSE streams open (503 ``too_many_streams`` past it) and
    ``limits.max_streams_per_session`` on one session (429); both with ``Retry-After`` and
    the connection closed (a refused reader holds no descriptor). A stream's slot is held
    until its response ends."""

    def __init__(self, app: ASGIApp, limits: Limits) -> None:
        self.app = app
        self.limits = limits
        self.open = 0
        self.per_session: Counter[str] = Counter()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        stream = stream_of(scope) if scope["type"] == "http" else None
        if stream is None:
            await self.app(scope, receive, send)
            return
        session_id = stream[1]
        refused = None
        if self.open >= self.limits.max_streams:
            refused = ApiError(
                503,
                "too_many_streams",
                f"the server has {self.open} streams open (max_streams)",
                {"Retry-After": RETRY_AFTER, "Connection": "close"},
            )
        elif (
            session_id is not None
            and self.per_session[session_id] >= self.limits.max_streams_per_session
        ):
            refused = ApiError(
                429,
                "too_many_streams",
                f"this session has {self.per_session[session_id]} streams open "
                "(max_streams_per_session)",
                {"Retry-After": RETRY_AFTER, "Connection": "close"},
            )
        if refused is not None:
            await error_response(refused)(scope, receive, send)
            return
        self.open += 1
        if session_id is not None:
            self.per_session[session_id] += 1
        try:
            await self.app(scope, receive, send)
        finally:
            self.open -= 1
            if session_id is not None:
                self.per_session[session_id] -= 1
                if self.per_session[session_id] <= 0:
                    del self.per_session[session_id]
