"""The web chat (API.md "Web chat"): static HTML, CSS and ES modules shipped in the package
under ``_web/`` and served as they are, at ``/`` and ``/_web/<file>``.

The assets carry no secret, so they are served without the bearer token; every API call the
page makes sends it (the page keeps it in ``sessionStorage``). The page reads the SSE feed
with ``fetch`` rather than ``EventSource`` so that the token travels in the
``Authorization`` header, never in a URL (access logs) or a cookie (CSRF).
"""

from __future__ import annotations

import re
from importlib import resources

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from ..messages import DEFAULT_LIMITS

__all__ = ["page_routes"]

_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".svg": "image/svg+xml",
}
# One path segment of a known kind: nothing like "../" can reach past the folder.
_NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,63}\.(?:js|css|svg)")
_HEADERS = {
    # Defence in depth behind the page's own escaping (it builds the DOM with textContent):
    # no inline script or handler runs, nothing loads from another origin.
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
        "img-src 'self' blob:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}


def asset(name: str) -> bytes | None:
    """The bytes of ``_web/<name>`` as installed with the package, or None."""
    path = resources.files(__package__ or "steerloop.service").joinpath("_web", name)
    if not path.is_file():
        return None
    return path.read_bytes()


def _serve(name: str) -> Response:
    body = asset(name)
    if body is None:
        return _missing(name)
    suffix = name[name.rfind(".") :]
    return Response(body, media_type=_TYPES[suffix], headers=_HEADERS)


def _missing(name: str) -> Response:
    return JSONResponse(
        {"error": {"code": "not_found", "message": f"no web asset {name!r}"}}, status_code=404
    )


async def _index(request: Request) -> Response:
    """The page, told the attachment caps it checks before an upload (``<body data-…>``)."""
    body = asset("index.html")
    if body is None:
        return _missing("index.html")
    limits = getattr(request.app.state, "attachment_limits", DEFAULT_LIMITS)
    told = (
        f'<body data-max-attachment-bytes="{int(limits.block_bytes)}" '
        f'data-max-message-attachment-bytes="{int(limits.message_bytes)}">'
    )
    page = body.replace(b"<body>", told.encode(), 1)
    return Response(page, media_type=_TYPES[".html"], headers=_HEADERS)


async def _file(request: Request) -> Response:
    name = request.path_params["name"]
    if not _NAME.fullmatch(name):
        return _missing(name)
    return _serve(name)


def page_routes() -> list[Route]:
    """``GET /`` (the chat page) and ``GET /_web/<file>`` (its assets)."""
    return [
        Route("/", _index, methods=["GET"]),
        Route("/_web/{name:str}", _file, methods=["GET"]),
    ]
