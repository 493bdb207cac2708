"""The ASGI app: the HTTP + SSE surface of API.md ("Service") over a ``ServiceHost``."""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import inspect
import logging
import os
import re
import socket
from collections.abc import (
    AsyncGenerator,
    AsyncIterator,
    Awaitable,
    Callable,
    Mapping,
    Sequence,
)
from typing import TYPE_CHECKING, Any, Literal, cast
from urllib.parse import quote

from sse_starlette import EventSourceResponse
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from .. import Runtime
from ..errors import SessionStorageError
from ..llm.retry import install_retry
from ..messages import DEFAULT_LIMITS, AttachmentLimits
from ..session._json import dumps
from ._blobs import get_blob
from ._bodies import CancelBody, CreateBody, DecisionBody, MessageBody
from ._content import attachment_chars, body_limit_for, to_blocks, with_blob_urls
from ._errors import ApiError, error_response, to_api_error
from ._fanout import SharedFeeds, event_json, event_sse
from ._host import ServiceHost
from ._hostcheck import HostCheckMiddleware, allowed_names
from ._inputs_api import input_route
from ._limits import Limits
from ._no_model import require_model, require_session_model
from ._origin import OriginCheckMiddleware, cors_middleware
from ._page import page_routes
from ._profile import Profile, check_profiles
from ._prompts_api import prompt_routes
from ._read_body import ascii_int as _ascii_int
from ._read_body import read_json as _json_body
from ._read_body import read_json_sized as _read_json
from ._replay_api import replay_routes
from ._source import FeedReader, FeedSource
from ._streams import StreamLimitMiddleware
from ._text import check_text

__all__ = ["create_app"]

Role = Literal["all", "api", "worker"]
ProfilesArg = (
    Sequence[Profile]
    | Callable[[Runtime], Sequence[Profile]]
    | Callable[[Runtime], Awaitable[Sequence[Profile]]]
)
Handler = Callable[[Request], Awaitable[Response]]
if TYPE_CHECKING:
    from ._pg._host import PgHost

    Host = ServiceHost | PgHost
    """The in-process host or the PostgreSQL one: the same async surface."""

log = logging.getLogger("steerloop.service")

PING_SECONDS = 15.0
RETRY_MS = 2000
"""The SSE ``retry:`` a client waits before reconnecting (with ``Last-Event-ID``)."""
_RETRY_SECONDS = 1.0
SERVER_LEASE_TTL = 15.0
_PAGE = 500
_MAX_LOG_PAGE = 5000


def create_app(
    store: str | None = "sqlite:///steerloop-sessions.db",
    profiles: ProfilesArg = (),
    role: Role = "all",
    *,
    token: str | None = None,
    idle_unload: float | None = 300.0,
    max_unconsumed: int = 100,
    body_limit: int = 1 << 20,
    retry: bool = True,
    worker_id: str | None = None,
    ping_seconds: float = PING_SECONDS,
    send_timeout: float = 30.0,
    capacity: int = 100,
    drain_timeout: float = 10.0,
    allowed_hosts: Sequence[str] = (),
    allowed_origins: Sequence[str] = (),
    limits: Limits | None = None,
    max_attachment_bytes: int = DEFAULT_LIMITS.block_bytes,
    max_message_attachment_bytes: int = DEFAULT_LIMITS.message_bytes,
) -> Starlette:
    """The service as a Starlette app (mountable in any ASGI host).

    The runtime opens with the app's lifespan. ``profiles`` is a sequence of ``Profile`` or a
    callable ``(rt) -> sequence`` called once with this process's runtime. ``token``, when
    set, is required as ``Authorization: Bearer`` on every request but ``GET /healthz``.
    An SSE client that takes no data for ``send_timeout`` seconds is dropped (it resumes by
    ``Last-Event-ID``). On a PostgreSQL store the SSE feed reads the shared log (any
    process's commits) through one LISTEN connection per process.

    Roles: ``all`` serves the API and drives agents; with a ``postgresql://`` store ``api``
    serves only the API (it drives nothing) and ``worker`` only drives agents (its HTTP
    surface is ``GET /healthz``); any number of each cooperate through the database, and
    ``all`` goes through it too. Another store serves one ``all`` process, in process.
    On PostgreSQL a driving process hosts at most ``capacity`` sessions, and its shutdown
    is a drain: it claims nothing more, gives running turns ``drain_timeout`` seconds, then
    hands what still runs to another worker (as a takeover: repaired and continued).

    The edge (README "Serve it"): a request whose ``Host`` is neither a loopback name nor
    in ``allowed_hosts`` is 403, as is one from a browser page of a foreign origin (not the
    server's own, not in ``allowed_origins``; CORS headers only for those). ``limits``
    (``Limits()`` by default; kept as ``app.state.limits``) bounds SSE streams here; its
    connection cap and head/body timeouts need the server's side: ``steerloop serve`` runs
    uvicorn with ``_protocol.edge_protocol(app.state.limits)``.

    ``max_attachment_bytes`` / ``max_message_attachment_bytes``: the runtime's caps on an
    image or file block and on all of one message's (``Runtime.open``); a message body may
    be larger than ``body_limit`` by as much base64 as the second needs.

    Raises:
        ValueError: a role the store cannot serve, or a bad argument.
    """
    if role not in ("all", "api", "worker"):
        raise ValueError(f"role must be all, api or worker, not {role!r}")
    postgres = isinstance(store, str) and store.startswith(("postgresql://", "postgres://"))
    if role != "all" and not postgres:
        shown = store.split("://", 1)[0] + "://" if isinstance(store, str) else "an in-memory"
        raise ValueError(
            f"role {role!r} needs a postgresql:// store shared by every process; {shown} "
            "store serves one process with role 'all'"
        )
    if max_unconsumed < 1 or body_limit < 1 or capacity < 1:
        raise ValueError("max_unconsumed, body_limit and capacity must be >= 1")
    if drain_timeout < 0:
        raise ValueError("drain_timeout must be >= 0")
    allowed_names(allowed_hosts)  # refused now (ValueError), not at the first request
    attachments = AttachmentLimits(max_attachment_bytes, max_message_attachment_bytes)
    bounds = limits or Limits()
    edge = [
        Middleware(HostCheckMiddleware, allowed_hosts=allowed_hosts),
        Middleware(OriginCheckMiddleware, allowed_origins=allowed_origins),
        *cors_middleware(allowed_origins),
        Middleware(StreamLimitMiddleware, limits=bounds),
    ]
    ident = worker_id or f"{socket.gethostname()}:{os.getpid()}"
    state: dict[str, Any] = {}
    message_limit = body_limit_for(attachments, body_limit)  # bodies that carry attachments

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        pg_store = _server_store(store) if isinstance(store, str) and postgres else None
        try:
            rt = await Runtime.open(
                store=pg_store if pg_store is not None else store,
                max_attachment_bytes=attachments.block_bytes,
                max_message_attachment_bytes=attachments.message_bytes,
            )
            try:
                found = profiles(rt) if callable(profiles) else profiles
                if inspect.isawaitable(found):  # a profiles callable may set up asynchronously
                    found = await found
                by_name = check_profiles(found)
                if retry:
                    install_retry(rt)
                host: Host
                if pg_store is not None:
                    from ._pg._host import PgHost

                    host = PgHost(
                        rt,
                        pg_store,
                        by_name,
                        role,
                        worker_id=ident,
                        idle_unload=idle_unload,
                        max_unconsumed=max_unconsumed,
                        capacity=capacity,
                        drain_timeout=drain_timeout,
                    )
                    await host.start()
                else:
                    host = ServiceHost(
                        rt,
                        by_name,
                        idle_unload=idle_unload,
                        max_unconsumed=max_unconsumed,
                        worker_id=ident,
                    )
                    host.start()
                # On PostgreSQL the SSE feed reads the shared log (any process's commits);
                # a process that runs agents publishes their live frames.
                pg_feed = None
                if pg_store is not None:
                    from ._pg._feed import open_pg_feed

                    pg_feed = await open_pg_feed(
                        pg_store, rt if role != "api" else None, name=ident
                    )
                state["host"] = host
                # One read per session per process, fanned out to its readers.
                source: FeedSource = (
                    pg_feed.source if pg_feed is not None else cast(ServiceHost, host)
                )
                state["source"] = SharedFeeds(source)
                try:
                    yield
                finally:
                    state.pop("host", None)
                    state.pop("source", None)
                    if pg_feed is not None:
                        await pg_feed.close()  # wakes every reader: their feeds end
                    await host.close()
            finally:
                await rt.close()
        finally:
            if pg_store is not None:
                await pg_store.close()

    def source_of() -> FeedSource:
        source = state.get("source")
        if source is None:
            raise ApiError(503, "not_ready", "the service is not running")
        return cast(FeedSource, source)

    def host_of() -> Host:
        host: Host | None = state.get("host")
        if host is None:
            raise ApiError(503, "not_ready", "the service is not running")
        return host

    def endpoint(handler: Callable[[Request, Host], Awaitable[Response]]) -> Handler:
        async def run(request: Request) -> Response:
            try:
                _authorize(request, token)
                _check_path(request)
                return await handler(request, host_of())
            except Exception as exc:
                error = to_api_error(exc)
                if error is None:
                    raise
                return error_response(error)

        return run

    async def create_session(request: Request, host: Host) -> Response:
        body = CreateBody.model_validate(await _message_body(request, body_limit, message_limit))
        profile = host.profile(body.profile)
        require_model(profile)
        session_id = body.session_id or _new_session_id()
        first = None if body.input is None else to_blocks(body.input, attachments)
        try:
            extra = await host.create(session_id, profile, body.meta, first)
        except ValueError as exc:
            raise ApiError(422, "invalid_body", str(exc)) from None
        events_url = f"/v1/sessions/{quote(session_id, safe='')}/events"
        return JSONResponse(
            {"session_id": session_id, "events_url": events_url} | extra, status_code=201
        )

    async def list_sessions(request: Request, host: Host) -> Response:
        return JSONResponse({"sessions": await host.listing()})

    async def get_session(request: Request, host: Host) -> Response:
        return JSONResponse(await host.describe(request.path_params["session_id"]))

    async def post_message(request: Request, host: Host) -> Response:
        session_id = request.path_params["session_id"]
        body = MessageBody.model_validate(await _message_body(request, body_limit, message_limit))
        await host.require(session_id)
        await require_session_model(host, session_id)
        answer = await host.send(
            session_id,
            body.mode,
            to_blocks(body.content, attachments),
            body.message_id,
            body.idempotency_key,
            trace=trace_context(request.headers),
        )
        return JSONResponse(answer, status_code=202)

    async def cancel(request: Request, host: Host) -> Response:
        session_id = request.path_params["session_id"]
        body = CancelBody.model_validate(await _json_body(request, body_limit, allow_empty=True))
        await host.require(session_id)
        answer = await host.send(session_id, "cancel", "", None, None, keep_inbox=body.keep_inbox)
        return JSONResponse(answer, status_code=202)

    async def decide(request: Request, host: Host) -> Response:
        session_id = request.path_params["session_id"]
        call_id = request.path_params["call_id"]
        body = DecisionBody.model_validate(await _json_body(request, body_limit))
        await host.require(session_id)
        answer = await host.submit_approval(session_id, call_id, body.decision, body.reason)
        return JSONResponse(answer, status_code=202)

    async def get_log(request: Request, host: Host) -> Response:
        session_id = request.path_params["session_id"]
        after = _int_param(request, "after", 0)
        limit = min(_int_param(request, "limit", _PAGE), _MAX_LOG_PAGE)
        if limit < 1:
            raise ApiError(422, "invalid_query", "limit must be >= 1")
        await host.require(session_id)
        page = await host.events_after(session_id, after, limit)
        events = [with_blob_urls(session_id, e) for e in page]
        return JSONResponse({"events": events, "last_seq": await host.last_seq(session_id)})

    async def events(request: Request, host: Host) -> Response:
        session_id = request.path_params["session_id"]
        seq, n = _cursor(request)
        await host.require(session_id)
        return sse(_feed(source_of(), session_id, seq, n))

    async def agui(request: Request, host: Host) -> Response:
        from ._agui_run import start_run

        body = await _message_body(request, body_limit, message_limit)
        return sse(await start_run(host, source_of(), _pages, body, attachments))

    def sse(items: AsyncGenerator[dict[str, Any] | bytes]) -> Response:
        return EventSourceResponse(
            _one_per_turn(items),
            ping=ping_seconds,
            sep="\n",  # LF: what AG-UI's and most clients' parsers split events on
            send_timeout=send_timeout,
            headers={"Cache-Control": "no-store"},
        )

    async def healthz(request: Request) -> Response:
        return JSONResponse({"ok": "host" in state, "role": role, "worker_id": ident})

    if role == "worker":  # drives agents; its HTTP surface is its health
        app = Starlette(
            routes=[Route("/healthz", healthz, methods=["GET"])],
            lifespan=lifespan,
            middleware=edge,
            exception_handlers={404: _not_found, 405: _not_allowed},
        )
        app.state.limits = bounds
        return app
    routes = [
        Route("/healthz", healthz, methods=["GET"]),
        Route("/v1/sessions", endpoint(create_session), methods=["POST"]),
        Route("/v1/sessions", endpoint(list_sessions), methods=["GET"]),
        Route("/v1/sessions/{session_id:str}", endpoint(get_session), methods=["GET"]),
        Route("/v1/sessions/{session_id:str}/messages", endpoint(post_message), methods=["POST"]),
        Route("/v1/sessions/{session_id:str}/cancel", endpoint(cancel), methods=["POST"]),
        Route(
            "/v1/sessions/{session_id:str}/approvals/{call_id:str}",
            endpoint(decide),
            methods=["POST"],
        ),
        input_route(endpoint, body_limit),  # POST /v1/sessions/{id}/inputs/{input_id}
        *prompt_routes(endpoint, body_limit),  # GET, POST /v1/sessions/{id}/prompts
        *replay_routes(endpoint, body_limit),  # GET /v1/profiles, POST .../{id}/replays
        Route("/v1/sessions/{session_id:str}/log", endpoint(get_log), methods=["GET"]),
        Route("/v1/sessions/{session_id:str}/events", endpoint(events), methods=["GET"]),
        Route("/v1/sessions/{session_id:str}/blobs/{hash}", endpoint(get_blob), methods=["GET"]),
        Route("/v1/agui", endpoint(agui), methods=["POST"]),
        *page_routes(),  # the web chat: static assets, open like /healthz (they hold no secret)
    ]
    app = Starlette(
        routes=routes,
        lifespan=lifespan,
        middleware=edge,
        exception_handlers={404: _not_found, 405: _not_allowed},
    )
    app.state.limits = bounds  # the server's side of them: _protocol.edge_protocol
    app.state.attachment_limits = attachments  # told to the web chat (``_page``)
    return app


async def _pages(
    source: FeedSource, reader: FeedReader, seq: int, n: int
) -> AsyncIterator[tuple[str, int, int, dict[str, Any]]]:
    """The one feed loop (in-process or PostgreSQL): ``("frame", seq, n, body)`` for each
    live frame numbered after the cursor ``seq:n``, then ``("event", seq, 0, event)`` for each
    durable event after ``seq``; again while the cursor moves, then ``("caught-up", seq, n,
    {})`` before it waits for the flag. Pulled by this reader's own cursor: a slow reader only
    delays its own next page, nothing is buffered for it.

    The frames are read after the page of events: a frame numbered after ``seq`` was written
    before the first event after ``seq``, so a durable event that lands mid-stream (a steer)
    comes after every frame this reader had not yet read, never instead of them."""
    while not source.closed:
        seen = reader.version  # before reading: a wake during the read is not missed
        try:
            page = await reader.events_after(seq, _PAGE)
            frames = await reader.frames_after(seq, n)
        except SessionStorageError as exc:
            await _retry_later(reader, exc)
            continue
        for n, frame in frames:
            yield "frame", seq, n, frame
        for event in page:
            seq, n = event["seq"], 0
            yield "event", seq, 0, event
        if page or frames:
            continue
        yield "caught-up", seq, n, {}
        await reader.wait(seen, PING_SECONDS)


async def _one_per_turn(
    items: AsyncGenerator[dict[str, Any] | bytes],
) -> AsyncGenerator[dict[str, Any] | bytes]:
    """``items`` for the SSE response, one per turn of the event loop.

    The server writes each item to the socket at once (uvicorn's ``send`` does not suspend),
    so a page sent in one go goes on writing after the peer is gone: the transport learns
    it at the first failed write (or a read of the reset), but the server marks the request
    disconnected, and sse-starlette ends the stream, only in a later turn of the loop; each
    write in between lands on a closed transport (asyncio logs ``socket.send() raised
    exception.`` from the fifth on). A turn of the loop between two writes lets that report
    run first: the server drops the write and the stream ends. Only an item ready at once
    needs one made for it; one that came after the feed waited had it (hundreds of readers
    of one session each take one event per wake: no extra turn each)."""
    loop = asyncio.get_running_loop()
    turned = [True]

    def mark() -> None:
        turned[0] = True

    async with contextlib.aclosing(items):
        async for item in items:
            if not turned[0]:
                await asyncio.sleep(0)  # the previous write's report runs first
            turned[0] = False
            loop.call_soon(mark)  # runs at the loop's next turn, whoever causes it
            yield item


async def _retry_later(reader: FeedReader, exc: Exception) -> None:
    """A transient read failure (the server restarts, a pool connection died): the reader
    retries by its cursor after the next wake or a second."""
    log.warning("feed read failed, retrying: %s", exc)
    await reader.wait(reader.version, _RETRY_SECONDS)


async def _feed(
    source: FeedSource, session_id: str, seq: int, n: int
) -> AsyncGenerator[dict[str, Any] | bytes]:
    """The SSE feed: durable events after ``seq`` (``id`` = seq), then live frames of the
    open step after ``n`` (``event: stream``, ``id`` = ``seq:n``)."""
    reader = source.subscribe(session_id)  # before the first read: no wake-up is missed
    retry: dict[str, Any] = {"retry": RETRY_MS}  # on the first event: reconnect after 2 s
    try:
        async for kind, at, number, body in _pages(source, reader, seq, n):
            if kind == "caught-up":
                continue
            if kind == "event":
                body = with_blob_urls(session_id, body)  # a new dict only if it has blobs
                shared = None if retry else event_sse(body)
                if shared is not None:
                    yield shared  # encoded once for every reader of the session
                else:
                    yield {"event": body["type"], "id": str(at), "data": event_json(body)} | retry
            else:
                yield {"event": "stream", "id": f"{at}:{number}", "data": dumps(body)} | retry
            retry = {}
    finally:
        reader.close()


def _server_store(url: str) -> Any:
    """The PostgreSQL store of a served process: lease TTL 15 s unless the URL sets one
    (design/SERVICE.md §3.3: a paused owner is caught within TTL + one sweep)."""
    from ..session.store.postgres import PostgresStore

    store = PostgresStore(url, notify=True)  # its commits wake the SSE readers of any node
    if "lease_ttl=" not in url.partition("?")[2]:
        store.lease_ttl = SERVER_LEASE_TTL
    return store


def _authorize(request: Request, token: str | None) -> None:
    if token is None:
        return
    given = request.headers.get("authorization", "")
    scheme, _, value = given.partition(" ")
    if scheme.lower() != "bearer" or not hmac.compare_digest(value.encode(), token.encode()):
        raise ApiError(401, "unauthorized", "a valid 'Authorization: Bearer <token>' is required")


async def _not_found(request: Request, exc: Exception) -> Response:
    return error_response(ApiError(404, "not_found", f"no route {request.url.path}"))


async def _not_allowed(request: Request, exc: Exception) -> Response:
    return error_response(
        ApiError(405, "method_not_allowed", f"{request.method} is not allowed here")
    )


async def _message_body(request: Request, limit: int, outer: int) -> dict[str, Any]:
    """A body that may carry attachments: read up to ``outer``; what is not base64 data
    stays within ``limit``, as any body."""
    body, size = await _read_json(request, outer)
    if size - attachment_chars(body) > limit:
        raise ApiError(413, "body_too_large", f"the body is over {limit} bytes")
    return body


def _opt_str(body: dict[str, Any], key: str) -> str | None:
    value = body.get(key)
    if value is None:
        return None
    if not isinstance(value, str) or not value or len(value) > 512:
        raise ApiError(422, "invalid_body", f"{key} must be a string of 1 to 512 characters")
    return value


def _int_param(request: Request, name: str, default: int) -> int:
    raw = request.query_params.get(name)
    if raw is None:
        return default
    value = _ascii_int(raw)
    if value is None:
        raise ApiError(422, "invalid_query", f"{name} must be a non-negative integer")
    return value


def _cursor(request: Request) -> tuple[int, int]:
    """``(seq, n)`` to resume after: ``Last-Event-ID`` (``seq`` or ``seq:n``) over ``after``."""
    last = request.headers.get("last-event-id")
    if last is None:
        return _int_param(request, "after", 0), 0
    seq_text, sep, n_text = last.strip().partition(":")
    seq, n = _ascii_int(seq_text), _ascii_int(n_text) if sep else 0
    if seq is None or n is None:
        raise ApiError(422, "invalid_last_event_id", f"Last-Event-ID {last!r} is not seq[:n]")
    return seq, n


def _check_path(request: Request) -> None:
    """Ids in the path are text too (``%00`` decodes to NUL)."""
    for name, value in request.path_params.items():
        if isinstance(value, str):
            check_text(value, name)


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
