"""The service's error answers: ``ApiError`` and the one place that turns an error into
``{"error": {"code", "message"}}`` — for endpoints, middleware and the raw protocol alike."""

from __future__ import annotations

from http import HTTPStatus

from pydantic import ValidationError
from starlette.requests import ClientDisconnect
from starlette.responses import JSONResponse

from ..errors import SessionPersistenceError
from ..session._json import dumps

__all__ = ["BODY_CODES", "ApiError", "error_bytes", "error_response", "to_api_error"]

BODY_CODES = frozenset(
    {"invalid_text", "invalid_mode", "invalid_decision", "invalid_session_id", "invalid_content"}
)
"""Error types of the request-body models (``_bodies``) that are answer codes of their own
(else ``invalid_body``); their messages name the field themselves."""


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


def to_api_error(exc: Exception) -> ApiError | None:
    """The answer an endpoint gives for ``exc``; ``None`` for an error that is a bug (500)."""
    if isinstance(exc, ApiError):
        return exc
    if isinstance(exc, ValidationError):
        first = exc.errors(include_url=False)[0]
        if first["type"] in BODY_CODES:
            return ApiError(422, first["type"], first["msg"])
        where = ".".join(str(p) for p in first["loc"]) or "body"
        if first["type"] == "string_unicode":  # pydantic's own refusal of a lone surrogate
            return ApiError(422, "invalid_text", f"{where} contains a lone surrogate")
        return ApiError(422, "invalid_body", f"{where}: {first['msg']}")
    if isinstance(exc, SessionPersistenceError):
        return ApiError(500, "storage_error", str(exc))
    if isinstance(exc, ClientDisconnect):  # gone (or cut off by the body deadline): no reader
        return ApiError(400, "client_disconnected", "the client went away during the request")
    return None


def error_response(exc: ApiError) -> JSONResponse:
    """``exc`` as a JSON response (its headers included)."""
    return JSONResponse(
        {"error": {"code": exc.code, "message": exc.message}},
        status_code=exc.status,
        headers=exc.headers,
    )


def error_bytes(exc: ApiError) -> bytes:
    """``exc`` as a whole HTTP/1.1 response that closes the connection: what the protocol
    writes itself (a timeout, a refused connection), where no ASGI response exists."""
    body = dumps({"error": {"code": exc.code, "message": exc.message}}).encode()
    reason = HTTPStatus(exc.status).phrase
    lines = [
        f"HTTP/1.1 {exc.status} {reason}",
        "content-type: application/json",
        f"content-length: {len(body)}",
        "connection: close",
        *(f"{name}: {value}" for name, value in exc.headers.items()),
    ]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body
