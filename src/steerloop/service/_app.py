"""The ASGI app: the HTTP + SSE surface of API.md ("Service") over a ``ServiceHost``."""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import inspect
import logging
import os
import socket
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any, Literal, cast

from sse_starlette import EventSourceResponse
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from .._runtime import Runtime
from ..errors import SessionPersistenceError, SessionStorageError
from ..llm.retry import install_retry
from ..session._json import dumps, loads
from ._host import ApiError, ServiceHost
from ._no_model import require_model, require_session_model
from ._page import page_routes
from ._profile import Profile, check_profiles
from ._source import FeedReader, FeedSource

__all__ = ["create_app"]

Role = Literal["all", "api", "worker"]
ProfilesArg = Sequence[Profile] | Callable[[Runtime], Sequence[Profile]]
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
    ident = worker_id or f"{socket.gethostname()}:{os.getpid()}"
    state: dict[str, Any] = {}

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        pg_store = _server_store(store) if isinstance(store, str) and postgres else None
        try:
            rt = await Runtime.open(store=pg_store if pg_store is not None else store)
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
                state["source"] = host if pg_feed is None else pg_feed.source
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
                return await handler(request, host_of())
            except ApiError as exc:
                return _error(exc)
            except SessionPersistenceError as exc:
                return _error(ApiError(500, "storage_error", str(exc)))

        return run

    async def create_session(request: Request, host: Host) -> Response:
        body = await _json_body(request, body_limit)
        _only(body, {"session_id", "profile", "meta", "input"})
        profile = host.profile(_opt_str(body, "profile"))
        require_model(profile)
        session_id = _opt_str(body, "session_id") or _new_session_id()
        meta = body.get("meta")
        if meta is not None and not isinstance(meta, dict):
            raise ApiError(422, "invalid_body", "meta must be an object")
        first = body.get("input")
        if first is not None and not isinstance(first, str):
            raise ApiError(422, "invalid_body", "input must be a string")
        try:
            extra = await host.create(session_id, profile, meta, first)
        except ValueError as exc:
            raise ApiError(422, "invalid_body", str(exc)) from None
        return JSONResponse(
            {"session_id": session_id, "events_url": f"/v1/sessions/{session_id}/events"} | extra,
            status_code=201,
        )

    async def list_sessions(request: Request, host: Host) -> Response:
        return JSONResponse({"sessions": await host.listing()})

    async def get_session(request: Request, host: Host) -> Response:
        return JSONResponse(await host.describe(request.path_params["session_id"]))

    async def post_message(request: Request, host: Host) -> Response:
        session_id = request.path_params["session_id"]
        body = await _json_body(request, body_limit)
        _only(body, {"mode", "content", "message_id", "idempotency_key"})
        mode = body.get("mode")
        if mode not in ("followup", "steer", "inject"):
            raise ApiError(
                422, "invalid_mode", f"mode must be followup, steer or inject, not {mode!r}"
            )
        content = body.get("content")
        if not isinstance(content, str):
            raise ApiError(422, "invalid_body", "content must be a string")
        message_id = _opt_str(body, "message_id")
        key = _opt_str(body, "idempotency_key")
        await host.require(session_id)
        await require_session_model(host, session_id)
        # W3C trace context of the caller: the turn this message causes links to it.
        trace = {
            k: request.headers[k] for k in ("traceparent", "tracestate") if k in request.headers
        }
        answer = await host.send(session_id, mode, content, message_id, key, trace=trace or None)
        return JSONResponse(answer, status_code=202)

    async def cancel(request: Request, host: Host) -> Response:
        session_id = request.path_params["session_id"]
        body = await _json_body(request, body_limit, allow_empty=True)
        _only(body, {"keep_inbox"})
        keep = body.get("keep_inbox", False)
        if not isinstance(keep, bool):
            raise ApiError(422, "invalid_body", "keep_inbox must be a boolean")
        await host.require(session_id)
        answer = await host.send(session_id, "cancel", "", None, None, keep_inbox=keep)
        return JSONResponse(answer, status_code=202)

    async def decide(request: Request, host: Host) -> Response:
        session_id = request.path_params["session_id"]
        call_id = request.path_params["call_id"]
        body = await _json_body(request, body_limit)
        _only(body, {"decision", "reason"})
        decision = body.get("decision")
        if decision not in ("allow", "deny"):
            raise ApiError(
                422, "invalid_decision", f"decision must be 'allow' or 'deny', not {decision!r}"
            )
        reason = body.get("reason")
        if reason is not None and (not isinstance(reason, str) or len(reason) > 4096):
            raise ApiError(
                422, "invalid_body", "reason must be a string of at most 4096 characters"
            )
        await host.require(session_id)
        answer = await host.submit_approval(session_id, call_id, decision, reason)
        return JSONResponse(answer, status_code=202)

    async def get_log(request: Request, host: Host) -> Response:
        session_id = request.path_params["session_id"]
        after = _int_param(request, "after", 0)
        limit = min(_int_param(request, "limit", _PAGE), _MAX_LOG_PAGE)
        if limit < 1:
            raise ApiError(422, "invalid_query", "limit must be >= 1")
        await host.require(session_id)
        events = await host.events_after(session_id, after, limit)
        return JSONResponse({"events": events, "last_seq": await host.last_seq(session_id)})

    async def events(request: Request, host: Host) -> Response:
        session_id = request.path_params["session_id"]
        seq, n = _cursor(request)
        await host.require(session_id)
        return sse(_feed(source_of(), session_id, seq, n))

    async def agui(request: Request, host: Host) -> Response:
        from ._agui_run import start_run

        body = await _json_body(request, body_limit)
        return sse(await start_run(host, source_of(), _pages, body))

    def sse(items: AsyncGenerator[dict[str, Any]]) -> Response:
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
        return Starlette(
            routes=[Route("/healthz", healthz, methods=["GET"])],
            lifespan=lifespan,
            exception_handlers={404: _not_found, 405: _not_allowed},
        )
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
        Route("/v1/sessions/{session_id:str}/log", endpoint(get_log), methods=["GET"]),
        Route("/v1/sessions/{session_id:str}/events", endpoint(events), methods=["GET"]),
        Route("/v1/agui", endpoint(agui), methods=["POST"]),
        *page_routes(),  # the web chat: static assets, open like /healthz (they hold no secret)
    ]
    return Starlette(
        routes=routes,
        lifespan=lifespan,
        exception_handlers={404: _not_found, 405: _not_allowed},
    )


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
    items: AsyncGenerator[dict[str, Any]],
) -> AsyncGenerator[dict[str, Any]]:
    """``items`` for the SSE response, one per turn of the event loop.

    The server writes each item to the socket at once (uvicorn's ``send`` does not suspend),
    so a page sent in one go goes on writing after the peer is gone: the transport learns
    it at the first failed write (or a read of the reset), but the server marks the request
    disconnected, and sse-starlette ends the stream, only in a later turn of the loop; each
    write in between lands on a closed transport (asyncio logs ``socket.send() raised
    exception.`` from the fifth on). Yielding to the loop after each item lets that report
    run before the next write: the server drops the write and the stream ends."""
    async with contextlib.aclosing(items):
        async for item in items:
            yield item
            await asyncio.sleep(0)


async def _retry_later(reader: FeedReader, exc: Exception) -> None:
    """A transient read failure (the server restarts, a pool connection died): the reader
    retries by its cursor after the next wake or a second."""
    log.warning("feed read failed, retrying: %s", exc)
    await reader.wait(reader.version, _RETRY_SECONDS)


async def _feed(
    source: FeedSource, session_id: str, seq: int, n: int
) -> AsyncGenerator[dict[str, Any]]:
    """The SSE feed: durable events after ``seq`` (``id`` = seq), then live frames of the
    open step after ``n`` (``event: stream``, ``id`` = ``seq:n``)."""
    reader = source.subscribe(session_id)  # before the first read: no wake-up is missed
    retry: dict[str, Any] = {"retry": RETRY_MS}  # on the first event: reconnect after 2 s
    try:
        async for kind, at, number, body in _pages(source, reader, seq, n):
            if kind == "caught-up":
                continue
            if kind == "event":
                yield {"event": body["type"], "id": str(at), "data": dumps(body)} | retry
            else:
                yield {"event": "stream", "id": f"{at}:{number}", "data": dumps(body)} | retry
            retry = {}
    finally:
        reader.close()


def _server_store(url: str) -> Any:
    """The PostgreSQL store of a served process: lease TTL 15 s unless the URL sets one
    (design/SERVICE.md §3.3: a paused owner is caught within TTL + one sweep)."""
    from ..session.store.postgres._store import PostgresStore

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


def _error(exc: ApiError) -> JSONResponse:
    return JSONResponse(
        {"error": {"code": exc.code, "message": exc.message}},
        status_code=exc.status,
        headers=exc.headers,
    )


async def _not_found(request: Request, exc: Exception) -> Response:
    return _error(ApiError(404, "not_found", f"no route {request.url.path}"))


async def _not_allowed(request: Request, exc: Exception) -> Response:
    return _error(ApiError(405, "method_not_allowed", f"{request.method} is not allowed here"))


async def _json_body(request: Request, limit: int, allow_empty: bool = False) -> dict[str, Any]:
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise ApiError(413, "body_too_large", f"the body is over {limit} bytes")
    data = bytearray()
    async for chunk in request.stream():
        data += chunk
        if len(data) > limit:
            raise ApiError(413, "body_too_large", f"the body is over {limit} bytes")
    if not data and allow_empty:
        return {}
    try:
        body = loads(bytes(data))
    except (ValueError, TypeError) as exc:
        raise ApiError(400, "invalid_json", f"the body is not JSON: {exc}") from None
    if not isinstance(body, dict):
        raise ApiError(422, "invalid_body", "the body must be a JSON object")
    return body


def _only(body: dict[str, Any], allowed: set[str]) -> None:
    extra = sorted(set(body) - allowed)
    if extra:
        raise ApiError(422, "invalid_body", f"unknown fields: {', '.join(extra)}")


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
    if not raw.isdigit() or len(raw) > 18:
        raise ApiError(422, "invalid_query", f"{name} must be a non-negative integer")
    return int(raw)


def _cursor(request: Request) -> tuple[int, int]:
    """``(seq, n)`` to resume after: ``Last-Event-ID`` (``seq`` or ``seq:n``) over ``after``."""
    last = request.headers.get("last-event-id")
    if last is None:
        return _int_param(request, "after", 0), 0
    seq_text, sep, n_text = last.strip().partition(":")
    parts = [seq_text, n_text] if sep else [seq_text]
    if not all(p.isdigit() and len(p) <= 18 for p in parts):
        raise ApiError(422, "invalid_last_event_id", f"Last-Event-ID {last!r} is not seq[:n]")
    return int(seq_text), int(n_text) if sep else 0


def _new_session_id() -> str:
    from .._ids import new_id

    return new_id("s")
