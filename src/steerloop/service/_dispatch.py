"""The routes of an operation table: one Starlette route per path dispatching by method,
every API endpoint behind ``guarded`` (the token, the path's text, the host, and the one
error path: ``to_api_error`` → ``error_response``)."""

from __future__ import annotations

import hmac
from collections.abc import Iterable, Mapping

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from ._api import ApiError
from ._errors import error_response, to_api_error
from ._operation import Handler, OpenHandler, Operation
from ._state import host_of, state_of
from ._text import check_text

__all__ = ["authorize", "check_path", "guarded", "operation_routes"]


def guarded(handler: Handler) -> OpenHandler:
    """``handler`` behind the token and the path check, given the running host (503 before
    the lifespan opened it); an ``ApiError`` (or what ``to_api_error`` maps) is answered as
    ``{"error": …}``, anything else is a bug and propagates (500)."""

    async def run(request: Request) -> Response:
        try:
            authorize(request, state_of(request).settings.token)
            check_path(request)
            return await handler(request, host_of(request))
        except Exception as exc:
            error = to_api_error(exc)
            if error is None:
                raise
            return error_response(error)

    return run


def operation_routes(operations: Iterable[Operation]) -> list[Route]:
    """One route per path, in the table's order, dispatching by method: Starlette's 405 of a
    path then names every method of it (``Allow``, HEAD wherever GET is)."""
    by_path: dict[str, dict[str, Operation]] = {}
    for op in operations:
        methods = by_path.setdefault(op.path, {})
        if op.method in methods:
            raise ValueError(f"{op.method} {op.path} is in the table twice")
        methods[op.method] = op
    return [Route(path, _by_method(ops), methods=list(ops)) for path, ops in by_path.items()]


def _by_method(operations: Mapping[str, Operation]) -> OpenHandler:
    served = {method: _endpoint(op) for method, op in operations.items()}
    if "GET" in served:
        served["HEAD"] = served["GET"]  # Starlette routes HEAD where GET is

    async def dispatch(request: Request) -> Response:
        return await served[request.method](request)

    return dispatch


def _endpoint(op: Operation) -> OpenHandler:
    """``op.public`` as it is, or ``op.handler`` behind ``guarded``."""
    if op.public is not None:
        return op.public
    assert op.handler is not None  # Operation.__post_init__
    return guarded(op.handler)


def authorize(request: Request, token: str | None) -> None:
    """401 unless ``token`` is unset or the request carries it as a bearer token."""
    if token is None:
        return
    given = request.headers.get("authorization", "")
    scheme, _, value = given.partition(" ")
    if scheme.lower() != "bearer" or not hmac.compare_digest(value.encode(), token.encode()):
        raise ApiError(401, "unauthorized", "a valid 'Authorization: Bearer <token>' is required")


def check_path(request: Request) -> None:
    """Ids in the path are text too (``%00`` decodes to NUL)."""
    for name, value in request.path_params.items():
        if isinstance(value, str):
            check_text(value, name)
