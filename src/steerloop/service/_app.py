"""The ASGI app: the HTTP + SSE surface of API.md ("Service") over a host (``_api.Host``).

``create_app`` checks its arguments, keeps them as the app's typed state (``_state``), and
builds the edge middleware and the routes of the operation table (``_routes``); the
lifespan (``_lifespan``) opens the host, the endpoints (``_endpoints`` and the other
endpoint modules) answer."""

from __future__ import annotations

import os
import socket
from collections.abc import Sequence

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import Response

from ..messages import DEFAULT_LIMITS, AttachmentLimits
from ._api import ApiError
from ._content import body_limit_for
from ._dispatch import operation_routes
from ._errors import error_response
from ._hostcheck import HostCheckMiddleware, allowed_names
from ._lifespan import lifespan
from ._limits import Limits
from ._origin import OriginCheckMiddleware, cors_middleware
from ._page import page_routes
from ._routes import operations
from ._sse import PING_SECONDS
from ._state import ProfilesArg, Role, ServiceState, Settings
from ._streams import StreamLimitMiddleware

__all__ = ["create_app"]


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
    # Every parameter, by name (the signature is API.md's; ``_settings`` types and checks).
    settings = _settings(**locals())
    return _app(settings)


def _settings(
    *,
    store: str | None,
    profiles: ProfilesArg,
    role: Role,
    token: str | None,
    idle_unload: float | None,
    max_unconsumed: int,
    body_limit: int,
    retry: bool,
    worker_id: str | None,
    ping_seconds: float,
    send_timeout: float,
    capacity: int,
    drain_timeout: float,
    allowed_hosts: Sequence[str],
    allowed_origins: Sequence[str],
    limits: Limits | None,
    max_attachment_bytes: int,
    max_message_attachment_bytes: int,
) -> Settings:
    """``create_app``'s arguments as the app's settings, refused now (``ValueError``) when
    they cannot serve, not at the first request."""
    attachments = AttachmentLimits(max_attachment_bytes, max_message_attachment_bytes)
    settings = Settings(
        store=store,
        profiles=profiles,
        role=role,
        ident=worker_id or f"{socket.gethostname()}:{os.getpid()}",
        token=token,
        idle_unload=idle_unload,
        max_unconsumed=max_unconsumed,
        retry=retry,
        capacity=capacity,
        drain_timeout=drain_timeout,
        body_limit=body_limit,
        message_limit=body_limit_for(attachments, body_limit),
        attachments=attachments,
        ping_seconds=ping_seconds,
        send_timeout=send_timeout,
        limits=limits or Limits(),
        allowed_hosts=tuple(allowed_hosts),
        allowed_origins=tuple(allowed_origins),
    )
    _check(settings)
    return settings


def _app(settings: Settings) -> Starlette:
    """The app of ``settings``: the edge middleware, the routes of its operation table."""
    table = operations(settings.role)
    routes = operation_routes(table)
    if settings.role != "worker":  # a worker drives agents; its HTTP surface is its health
        routes += page_routes()  # the web chat: static assets, open like /healthz
    app = Starlette(
        routes=routes,
        lifespan=lifespan,
        middleware=[
            Middleware(HostCheckMiddleware, allowed_hosts=settings.allowed_hosts),
            Middleware(OriginCheckMiddleware, allowed_origins=settings.allowed_origins),
            *cors_middleware(settings.allowed_origins),
            Middleware(StreamLimitMiddleware, limits=settings.limits),
        ],
        exception_handlers={404: _not_found, 405: _not_allowed},
    )
    app.state.service = ServiceState(settings=settings, operations=table)
    app.state.limits = settings.limits  # the server's side of them: _protocol.edge_protocol
    app.state.attachment_limits = settings.attachments  # told to the web chat (``_page``)
    return app


def _check(settings: Settings) -> None:
    role, store = settings.role, settings.store
    if role not in ("all", "api", "worker"):
        raise ValueError(f"role must be all, api or worker, not {role!r}")
    if role != "all" and not settings.postgres:
        shown = store.split("://", 1)[0] + "://" if isinstance(store, str) else "an in-memory"
        raise ValueError(
            f"role {role!r} needs a postgresql:// store shared by every process; {shown} "
            "store serves one process with role 'all'"
        )
    if settings.max_unconsumed < 1 or settings.body_limit < 1 or settings.capacity < 1:
        raise ValueError("max_unconsumed, body_limit and capacity must be >= 1")
    if settings.drain_timeout < 0:
        raise ValueError("drain_timeout must be >= 0")
    allowed_names(settings.allowed_hosts)


async def _not_found(request: Request, exc: Exception) -> Response:
    return error_response(ApiError(404, "not_found", f"no route {request.url.path}"))


async def _not_allowed(request: Request, exc: Exception) -> Response:
    """405 with ``Allow``: every method of the path (one route per path: ``_dispatch``),
    in a fixed order."""
    headers = exc.headers if isinstance(exc, HTTPException) else None
    given = (headers or {}).get("Allow", "")
    allow = ", ".join(sorted(m.strip() for m in given.split(",") if m.strip()))
    return error_response(
        ApiError(
            405,
            "method_not_allowed",
            f"{request.method} is not allowed here",
            {"Allow": allow} if allow else None,
        )
    )
