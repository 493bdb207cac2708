"""The operation table of the app (API.md "Service"): every route it serves but the web
chat's static assets (``_page``), from which ``create_app`` builds its Starlette routes and
``_openapi`` its document."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._answers import Created, Health, LogPage, SessionInfo, SessionList
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
from ._openapi import OPENAPI
from ._operation import Answer, Operation, Param, command
from ._prompts_api import PROMPT_OPERATIONS
from ._replay_api import REPLAY_OPERATIONS
from ._state import Role

if TYPE_CHECKING:
    from ._agui_input import AguiRequest

__all__ = ["HEALTH", "operations"]

_SESSION = "/v1/sessions/{session_id:str}"
_FEED = (
    Answer(
        status=200,
        description="Server-sent events: each durable event as `event: <type>`, `id: <seq>`, "
        "`data: <stored JSON>`, then live frames as `event: stream`, `id: <seq>:<n>`; a "
        "comment ping every 15 s; open until the client leaves or the server stops.",
        media="text/event-stream",
    ),
)
_RUN = (
    Answer(
        status=200,
        description="Server-sent events of AG-UI 1.0 (`data`: one AG-UI event each), from "
        "`RUN_STARTED` to `RUN_FINISHED` or `RUN_ERROR`.",
        media="text/event-stream",
    ),
)

HEALTH = Operation(
    method="GET",
    path="/healthz",
    summary="Whether the service runs, its role and worker id (open: no token)",
    public=healthz,
    answers=(Answer(status=200, description="The process's health.", model=Health),),
)

_SESSIONS = (
    Operation(
        method="POST",
        path="/v1/sessions",
        summary="Create a session (optionally with its first message)",
        handler=create_session,
        body=CreateBody,
        answers=(Answer(status=201, description="Created.", model=Created),),
        errors=frozenset({409, 422, 429}),
    ),
    Operation(
        method="GET",
        path="/v1/sessions",
        summary="List the sessions",
        handler=list_sessions,
        answers=(Answer(status=200, description="The sessions.", model=SessionList),),
    ),
    Operation(
        method="GET",
        path=_SESSION,
        summary="A session: its status, owner and what waits for an answer",
        handler=get_session,
        answers=(Answer(status=200, description="The session.", model=SessionInfo),),
        errors=frozenset({404}),
    ),
)

_CONTROL = (
    command(
        _SESSION + "/messages",
        "Send a message (followup, steer or inject)",
        post_message,
        MessageBody,
        frozenset({404, 409, 422, 429}),
    ),
    command(
        _SESSION + "/cancel",
        "Cancel the running turn",
        cancel,
        CancelBody,
        frozenset({404, 429}),
        body_optional=True,
    ),
    command(
        _SESSION + "/approvals/{call_id:str}",
        "Decide a pending tool approval",
        decide,
        DecisionBody,
        frozenset({404, 409, 429}),
    ),
)


def _agui_body() -> type[AguiRequest]:
    """``POST /v1/agui``'s body model (AG-UI is imported with the first run)."""
    from ._agui_input import AguiRequest

    return AguiRequest


_AFTER = Param(name="after", where="query", description="Events after this seq (default 0).")
_FEEDS = (
    Operation(
        method="GET",
        path=_SESSION + "/log",
        summary="A page of the session's durable events",
        handler=get_log,
        answers=(Answer(status=200, description="A page of events.", model=LogPage),),
        errors=frozenset({404}),
        params=(
            _AFTER,
            Param(
                name="limit",
                where="query",
                description="At most this many (default 500; more than 5000 is 5000).",
                minimum=1,
            ),
        ),
    ),
    Operation(
        method="GET",
        path=_SESSION + "/events",
        summary="The session's events as SSE: durable events from the cursor on, then live",
        handler=events,
        answers=_FEED,
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
        body=_agui_body,
        answers=_RUN,
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
    return (HEALTH, OPENAPI, *_API)
