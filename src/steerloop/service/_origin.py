"""CSRF: a page on another origin must not drive the server through the user's browser.

Every request a browser sends from a page's script with a method other than GET/HEAD (and
every CORS request) carries ``Origin``; a form post does too. Such a request is served only
when that origin is the server's own — the scheme of the connection and the host and port
its ``Host`` names, as the page addressed it — or one given with ``--allowed-origin``. The
JSON bodies are parsed whatever their ``Content-Type`` (so curl lines need no header), which
is why the content type cannot be the guard: a ``text/plain`` form or ``fetch(no-cors)``
would pass it. Requests without ``Origin`` (curl, SDKs, server to server) are unaffected,
except that ``Sec-Fetch-Site: cross-site`` — a browser's own word that another site made
the request — is refused too, but for a top-level navigation (a link to the chat page).

No CORS header is sent unless an allowed origin is configured; then Starlette's
``CORSMiddleware`` answers those origins. Every answer also forbids being framed by another
origin (``frame-ancestors``), so a page cannot overlay the chat's Allow button.
"""

from __future__ import annotations

from collections.abc import Iterable
from urllib.parse import urlsplit

from starlette.datastructures import Headers, MutableHeaders
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ._errors import ApiError, error_response

__all__ = [
    "OriginCheckMiddleware",
    "allowed_origin_set",
    "cors_middleware",
    "normalise_origin",
]

_DEFAULT_PORTS = {"http": 80, "https": 443}
_CORS_HEADERS = ["authorization", "content-type", "last-event-id", "traceparent", "tracestate"]


def normalise_origin(value: str) -> str | None:
    """``scheme://host[:port]`` as a browser serialises it (lowercase, the default port
    left out); ``None`` for anything else (``null``, a path, another scheme)."""
    try:
        parts = urlsplit(value.strip())
        port = parts.port
    except ValueError:
        return None
    scheme, host = parts.scheme.lower(), parts.hostname
    if scheme not in _DEFAULT_PORTS or not host or parts.path not in ("", "/"):
        return None
    if parts.query or parts.fragment or parts.username or parts.password:
        return None
    shown = f"[{host}]" if ":" in host else host
    if port is None or port == _DEFAULT_PORTS[scheme]:
        return f"{scheme}://{shown}"
    return f"{scheme}://{shown}:{port}"


def allowed_origin_set(origins: Iterable[str]) -> frozenset[str]:
    """The allowed origins, normalised.

    Raises:
        ValueError: one is not ``scheme://host[:port]`` with scheme http or https.
    """
    allowed = set()
    for origin in origins:
        normal = normalise_origin(origin)
        if normal is None:
            raise ValueError(f"an allowed origin is scheme://host[:port], not {origin!r}")
        allowed.add(normal)
    return frozenset(allowed)


def _own_origin(scope: Scope, headers: Headers) -> str | None:
    host = headers.get("host")
    if host is None:
        return None
    return normalise_origin(f"{scope.get('scheme', 'http')}://{host}")


def _navigation(scope: Scope, headers: Headers) -> bool:
    """A top-level navigation (a followed link, a typed address): it reads nothing the
    navigating page can see and changes nothing."""
    return (
        scope["method"] in ("GET", "HEAD")
        and headers.get("sec-fetch-mode") == "navigate"
        and headers.get("sec-fetch-dest", "document") == "document"
    )


class OriginCheckMiddleware:
    """Refuse (403 ``origin_not_allowed``) a request from a foreign origin (see the module
    docstring); add ``frame-ancestors`` to every answer."""

    def __init__(self, app: ASGIApp, allowed_origins: Iterable[str] = ()) -> None:
        self.app = app
        self.allowed = allowed_origin_set(allowed_origins)
        ancestors = " ".join(["'self'", *sorted(self.allowed)]) if self.allowed else "'none'"
        self._frame_headers = [("content-security-policy", f"frame-ancestors {ancestors}")]
        if not self.allowed:
            self._frame_headers.append(("x-frame-options", "DENY"))

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        refused = self._refusal(scope, headers)
        if refused is not None:
            await error_response(refused)(scope, receive, send)
            return

        async def framed(message: Message) -> None:
            if message["type"] == "http.response.start":
                out = MutableHeaders(scope=message)
                for name, value in self._frame_headers:
                    out.setdefault(name, value)
            await send(message)

        await self.app(scope, receive, framed)

    def _refusal(self, scope: Scope, headers: Headers) -> ApiError | None:
        origin = headers.get("origin")
        if origin is not None:
            normal = normalise_origin(origin)
            if normal is not None and (
                normal in self.allowed or normal == _own_origin(scope, headers)
            ):
                return None
            return ApiError(
                403,
                "origin_not_allowed",
                f"requests from origin {origin[:100]!r} are refused (only this server's own "
                "origin and those given with --allowed-origin are served)",
            )
        if headers.get("sec-fetch-site") == "cross-site" and not _navigation(scope, headers):
            return ApiError(
                403,
                "origin_not_allowed",
                "a cross-site request (Sec-Fetch-Site: cross-site) is refused",
            )
        return None


def cors_middleware(allowed_origins: Iterable[str]) -> list[Middleware]:
    """Starlette's ``CORSMiddleware`` for the allowed origins; none when there are none, so
    no CORS header is ever sent otherwise."""
    origins = sorted(allowed_origin_set(allowed_origins))
    if not origins:
        return []
    return [
        Middleware(
            CORSMiddleware,
            allow_origins=origins,
            allow_methods=["GET", "POST"],
            allow_headers=_CORS_HEADERS,
            expose_headers=["retry-after"],
            max_age=600,
        )
    ]
