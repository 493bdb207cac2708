"""The endpoints of API.md "Service" (sessions, messages and control, the log, the event
feed, AG-UI, health), one module-level function each, and their ``Operation`` records.

Each API endpoint is ``(request, host) -> Response`` and runs behind ``_operation.guarded``;
a refusal is an ``ApiError`` (or a pydantic ``ValidationError`` of its body model)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from ._api import ApiError, Host
from ._bodies import CancelBody, CreateBody, DecisionBody, MessageBody
from ._content import attachment_chars, to_blocks, with_blob_urls
from ._no_model import require_model, require_session_model
from ._read_body import ascii_int, read_body, read_json_sized
from ._sse import PAGE, feed, pages, sse
from ._state import source_of, state_of

__all__ = [
    "agui",
    "cancel",
    "create_session",
    "decide",
    "events",
    "get_log",
    "get_session",
    "healthz",
    "list_sessions",
    "post_message",
    "trace_context",
]

MAX_LOG_PAGE = 5000


async def create_session(request: Request, host: Host) -> Response:
    """``POST /v1/sessions`` → 201 ``{"session_id", "events_url"}``."""
    settings = state_of(request).settings
    body = CreateBody.model_validate(await message_body(request))
    profile = host.profile(body.profile)
    require_model(profile)
    session_id = body.session_id or _new_session_id()
    first = None if body.input is None else to_blocks(body.input, settings.attachments)
    try:
        extra = await host.create(session_id, profile, body.meta, first)
    except ValueError as exc:
        raise ApiError(422, "invalid_body", str(exc)) from None
    events_url = f"/v1/sessions/{quote(session_id, safe='')}/events"
    return JSONResponse(
        {"session_id": session_id, "events_url": events_url} | extra, status_code=201
    )


async def list_sessions(request: Request, host: Host) -> Response:
    """``GET /v1/sessions``."""
    return JSONResponse({"sessions": await host.listing()})


async def get_session(request: Request, host: Host) -> Response:
    """``GET /v1/sessions/{id}``."""
    return JSONResponse(await host.describe(request.path_params["session_id"]))


async def post_message(request: Request, host: Host) -> Response:
    """``POST /v1/sessions/{id}/messages`` → 202 ``{"cmd_seq", "message_id"}``."""
    session_id = request.path_params["session_id"]
    body = MessageBody.model_validate(await message_body(request))
    await host.require(session_id)
    await require_session_model(host, session_id)
    answer = await host.send(
        session_id,
        body.mode,
        to_blocks(body.content, state_of(request).settings.attachments),
        body.message_id,
        body.idempotency_key,
        trace=trace_context(request.headers),
    )
    return JSONResponse(answer, status_code=202)


async def cancel(request: Request, host: Host) -> Response:
    """``POST /v1/sessions/{id}/cancel`` → 202 ``{"cmd_seq"}`` (the body may be empty)."""
    session_id = request.path_params["session_id"]
    body = await read_body(request, CancelBody, allow_empty=True)
    await host.require(session_id)
    answer = await host.send(session_id, "cancel", "", None, None, keep_inbox=body.keep_inbox)
    return JSONResponse(answer, status_code=202)


async def decide(request: Request, host: Host) -> Response:
    """``POST /v1/sessions/{id}/approvals/{call_id}`` → 202."""
    session_id = request.path_params["session_id"]
    call_id = request.path_params["call_id"]
    body = await read_body(request, DecisionBody)
    await host.require(session_id)
    answer = await host.submit_approval(session_id, call_id, body.decision, body.reason)
    return JSONResponse(answer, status_code=202)


async def get_log(request: Request, host: Host) -> Response:
    """``GET /v1/sessions/{id}/log?after=SEQ&limit=N`` → ``{"events", "last_seq"}``."""
    session_id = request.path_params["session_id"]
    after = int_param(request, "after", 0)
    limit = min(int_param(request, "limit", PAGE), MAX_LOG_PAGE)
    if limit < 1:
        raise ApiError(422, "invalid_query", "limit must be >= 1")
    await host.require(session_id)
    page = await host.events_after(session_id, after, limit)
    events = [with_blob_urls(session_id, e) for e in page]
    return JSONResponse({"events": events, "last_seq": await host.last_seq(session_id)})


async def events(request: Request, host: Host) -> Response:
    """``GET /v1/sessions/{id}/events``: the SSE feed from the cursor on (``_sse.feed``)."""
    session_id = request.path_params["session_id"]
    seq, n = cursor(request)
    await host.require(session_id)
    return sse(feed(source_of(request), session_id, seq, n), state_of(request).settings)


async def agui(request: Request, host: Host) -> Response:
    """``POST /v1/agui``: one AG-UI run (``_agui_run``) as SSE."""
    from ._agui_run import start_run

    settings = state_of(request).settings
    body = await message_body(request)
    items = await start_run(host, source_of(request), pages, body, settings.attachments)
    return sse(items, settings)


async def healthz(request: Request) -> Response:
    """``GET /healthz`` → ``{"ok", "role", "worker_id"}`` (open: no token, no host)."""
    state = state_of(request)
    settings = state.settings
    return JSONResponse(
        {"ok": state.host is not None, "role": settings.role, "worker_id": settings.ident}
    )


async def message_body(request: Request) -> dict[str, Any]:
    """A body that may carry attachments: read up to the message limit; what is not
    base64 data stays within the body limit, as any body."""
    settings = state_of(request).settings
    body, size = await read_json_sized(request, settings.message_limit)
    if size - attachment_chars(body) > settings.body_limit:
        raise ApiError(413, "body_too_large", f"the body is over {settings.body_limit} bytes")
    return body


def int_param(request: Request, name: str, default: int) -> int:
    """The query parameter ``name`` as a non-negative integer (422 ``invalid_query``)."""
    raw = request.query_params.get(name)
    if raw is None:
        return default
    value = ascii_int(raw)
    if value is None:
        raise ApiError(422, "invalid_query", f"{name} must be a non-negative integer")
    return value


def cursor(request: Request) -> tuple[int, int]:
    """``(seq, n)`` to resume after: ``Last-Event-ID`` (``seq`` or ``seq:n``) over ``after``."""
    last = request.headers.get("last-event-id")
    if last is None:
        return int_param(request, "after", 0), 0
    seq_text, sep, n_text = last.strip().partition(":")
    seq, n = ascii_int(seq_text), ascii_int(n_text) if sep else 0
    if seq is None or n is None:
        raise ApiError(422, "invalid_last_event_id", f"Last-Event-ID {last!r} is not seq[:n]")
    return seq, n


_TRACEPARENT = re.compile(r"[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}")


def trace_context(headers: Mapping[str, str]) -> dict[str, str] | None:
    """The caller's W3C trace context, kept only when well formed (the spec says to ignore
    a malformed ``traceparent``; ``tracestate`` goes with it)."""
    parent = headers.get("traceparent")
    if parent is None or _TRACEPARENT.fullmatch(parent) is None:
        return None
    state = headers.get("tracestate")
    if state is None or len(state) > 512 or not (state.isascii() and state.isprintable()):
        return {"traceparent": parent}
    return {"traceparent": parent, "tracestate": state}


def _new_session_id() -> str:
    from ..ids import new_id

    return new_id("s")
