"""The operation table of the app (API.md "Service"): every route it serves but the web
chat's static assets (``_page``), from which ``create_app`` builds its Starlette routes and
``_openapi`` its document."""

from __future__ import annotations

from ._blobs import BLOB_OPERATION
from ._bodies import CancelBody, CreateBody, DecisionBody, MessageBody
from ._endpoints import (
    agui,
    cancel,
    create_session,
    decide,
    events,
    get_log,
    get_session,
    healthz,
    list_sessions,
    post_message,
)
from ._inputs_api import INPUT_OPERATION
from ._operation import Operation, Param
from ._prompts_api import PROMPT_OPERATIONS
from ._replay_api import REPLAY_OPERATIONS
from ._state import Role

__all__ = ["HEALTH", "operations"]

_SESSION = "/v1/sessions/{session_id:str}"

HEALTH = Operation(
    method="GET",
    path="/healthz",
    summary="Whether the service runs, its role and worker id (open: no token)",
    public=healthz,
)

_SESSIONS = (
    Operation(
        method="POST",
        path="/v1/sessions",
        summary="Create a session (optionally with its first message)",
        handler=create_session,
        body=CreateBody,
        errors=frozenset({409, 422, 429}),
    ),
    Operation(
        method="GET", path="/v1/sessions", summary="List the sessions", handler=list_sessions
    ),
    Operation(
        method="GET",
        path=_SESSION,
        summary="A session: its status, owner and what waits for an answer",
        handler=get_session,
        errors=frozenset({404}),
    ),
)

_CONTROL = (
    Operation(
        method="POST",
        path=_SESSION + "/messages",
        summary="Send a message (followup, steer or inject)",
        handler=post_message,
        body=MessageBody,
        errors=frozenset({404, 409, 422, 429}),
    ),
    Operation(
        method="POST",
        path=_SESSION + "/cancel",
        summary="Cancel the running turn",
        handler=cancel,
        body=CancelBody,
        body_optional=True,
        errors=frozenset({404, 429}),
    ),
    Operation(
        method="POST",
        path=_SESSION + "/approvals/{call_id:str}",
        summary="Decide a pending tool approval",
        handler=decide,
        body=DecisionBody,
        errors=frozenset({404, 409, 429}),
    ),
)

_AFTER = Param(name="after", where="query", description="Events after this seq (default 0).")
_FEEDS = (
    Operation(
        method="GET",
        path=_SESSION + "/log",
        summary="A page of the session's durable events",
        handler=get_log,
        errors=frozenset({404}),
        params=(
            _AFTER,
            Param(name="limit", where="query", description="At most this many (1 to 5000)."),
        ),
    ),
    Operation(
        method="GET",
        path=_SESSION + "/events",
        summary="The session's events as SSE: durable events from the cursor on, then live",
        handler=events,
        errors=frozenset({404, 429}),
        params=(
            _AFTER,
            Param(
                name="Last-Event-ID",
                where="header",
                description="Resume after this SSE id (`seq` or `seq:n`); overrides `after`.",
                pattern=r"^\s*[0-9]{1,18}(:[0-9]{1,18})?\s*$",
            ),
        ),
        streams=True,
    ),
    BLOB_OPERATION,
    Operation(
        method="POST",
        path="/v1/agui",
        summary="One AG-UI run over a session (the thread), as SSE of AG-UI events",
        handler=agui,
        errors=frozenset({409, 429}),
        streams=True,
    ),
)

_API = (
    *_SESSIONS,
    *_CONTROL,
    INPUT_OPERATION,
    *PROMPT_OPERATIONS,
    *REPLAY_OPERATIONS,
    *_FEEDS,
)


def operations(role: Role) -> tuple[Operation, ...]:
    """The table of a process of ``role``: a worker serves only its health."""
    if role == "worker":
        return (HEALTH,)
    return (HEALTH, *_API)
