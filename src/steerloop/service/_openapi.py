"""``GET /openapi.json``: the service's OpenAPI 3.1 document, built from the app's operation
table (``_routes``) and the pydantic models its endpoints read (``_bodies`` and the endpoint
modules) and answer (``_answers``), so it names exactly the routes the app serves.

The web chat's static assets (``/`` and ``/_web/<file>``, ``_page``) are routes but not
part of the API, and are left out. HEAD is answered wherever GET is (Starlette's routing:
the GET's headers, no body) and is not listed as an operation of its own; a 405 names
every method of its path in ``Allow``, HEAD included where GET is.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable
from typing import Any

from pydantic import BaseModel
from pydantic.json_schema import models_json_schema
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from ._answers import Error
from ._operation import Answer, Operation, Param, body_model
from ._state import state_of

__all__ = ["OPENAPI", "document"]

_REF = "#/components/schemas/{model}"
_ERROR = {"$ref": _REF.format(model="Error")}
_CONVERTOR = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)(?::[a-z]+)?\}")
_SEGMENT = {"type": "string", "minLength": 1, "pattern": r"^[^/]*[^/.][^/]*$"}
"""A path segment (an id): no ``/``, not ``.`` or ``..`` (clients collapse those)."""
_PATH_SCHEMAS = {"hash": {"type": "string", "pattern": "^sha256:[0-9a-f]{64}$"}}
"""Path parameters narrower than a segment (``messages.check_blob_hash``: else 422)."""
_MAX_SEQ = 10**18 - 1  # ``_read_body.ascii_int``: at most 18 digits
_RETRY_AFTER = {
    "description": "Seconds to wait before trying again.",
    "schema": {"type": "string", "pattern": "^[0-9]+$"},
}
_ERRORS = {
    400: "The body is not JSON.",
    401: "No valid `Authorization: Bearer <token>` (only when the server runs with a token).",
    403: "A foreign `Host`, or a browser request from a foreign origin (the edge).",
    404: "No such session (or the thing named in the path).",
    409: "A conflict: the session exists, a reused idempotency key or message id, or a "
    "decision or answer already given.",
    413: "The body (less its base64 attachment data) is over the server's body limit.",
    422: "A body, path text or query the endpoint refuses (the code names what).",
    429: "Too many queued commands or streams for the session, or replays running.",
    502: "A server the request needed (an MCP server) failed.",
    503: "The service is not running yet or is shutting down, no model is configured, or "
    "the server's streams are at their limit.",
}
_WITH_RETRY_AFTER = frozenset({429, 503})
Refs = dict[Any, dict[str, Any]]
"""A model's ``$ref`` in the document (pydantic names a model twice named apart)."""
_DESCRIPTION = (
    "The HTTP + SSE surface of steerloop's service (API.md, 'Service'). Every error answer "
    'is `{"error": {"code", "message"}}` (the `Error` schema). When the server runs '
    "with a token, every operation but `GET /healthz` and `GET /openapi.json` needs "
    "`Authorization: Bearer <token>`. HEAD is answered wherever GET is; a 405 carries "
    "`Allow` with every method of its path."
)


async def openapi_json(request: Request) -> Response:
    """The document of the app's own table (open: it holds no secret)."""
    return JSONResponse(document(state_of(request).operations))


OPENAPI = Operation(
    method="GET",
    path="/openapi.json",
    summary="This OpenAPI document (open: no token)",
    public=openapi_json,
    answers=(Answer(status=200, description="An OpenAPI 3.1 document."),),
)


@functools.cache
def document(operations: tuple[Operation, ...]) -> dict[str, Any]:
    """The OpenAPI 3.1 document of ``operations`` (built once per table)."""
    models = _models(operations)
    found, defs = models_json_schema([(m, "validation") for m in models], ref_template=_REF)
    refs: Refs = {model: ref for (model, _), ref in found.items() if isinstance(model, type)}
    paths: dict[str, dict[str, Any]] = {}
    for op in operations:
        paths.setdefault(openapi_path(op.path), {})[op.method.lower()] = _operation(op, refs)
    return {
        "openapi": "3.1.0",
        "info": {"title": "steerloop service", "version": "1", "description": _DESCRIPTION},
        "paths": paths,
        "components": {
            "schemas": defs.get("$defs", {}),
            "securitySchemes": {
                "bearerAuth": {
                    "type": "http",
                    "scheme": "bearer",
                    "description": "Only when the server runs with a token (--token-env).",
                }
            },
        },
        "security": [{"bearerAuth": []}],
    }


def openapi_path(path: str) -> str:
    """A Starlette path as OpenAPI writes it: ``{session_id:str}`` → ``{session_id}``."""
    return _CONVERTOR.sub(r"{\1}", path)


def _models(operations: Iterable[Operation]) -> list[type[BaseModel]]:
    found: dict[type[BaseModel], None] = {Error: None}
    for op in operations:
        body = body_model(op)
        if body is not None:
            found[body] = None
        found.update((a.model, None) for a in op.answers if a.model is not None)
    return list(found)


def _operation(op: Operation, refs: Refs) -> dict[str, Any]:
    names = [m.group(1) for m in _CONVERTOR.finditer(op.path)]
    params = [
        {"name": n, "in": "path", "required": True, "schema": _PATH_SCHEMAS.get(n, _SEGMENT)}
        for n in names
    ]
    params += [_param(p) for p in op.params]
    doc: dict[str, Any] = {
        "operationId": f"{op.method.lower()}_{_ident(op.path)}",
        "summary": op.summary,
        "responses": _responses(op, refs, has_path_params=bool(names)),
    }
    if params:
        doc["parameters"] = params
    body = body_model(op)
    if body is not None:
        doc["requestBody"] = {
            "required": not op.body_optional,
            "content": {"application/json": {"schema": refs[body]}},
        }
    if op.public is not None:
        doc["security"] = []  # open, like /healthz
    return doc


def _param(param: Param) -> dict[str, Any]:
    schema: dict[str, Any]
    if param.pattern is not None:
        schema = {"type": "string", "pattern": param.pattern}
    else:
        schema = {"type": "integer", "minimum": param.minimum, "maximum": _MAX_SEQ}
    return {
        "name": param.name,
        "in": param.where,
        "required": False,
        "description": param.description,
        "schema": schema,
    }


def _responses(op: Operation, refs: Refs, *, has_path_params: bool) -> dict[str, Any]:
    responses = {str(a.status): _answer(a, refs) for a in op.answers}
    errors = set(op.errors)
    errors.add(403)  # every route is behind the edge's Host and Origin checks
    if op.handler is not None:
        errors |= {401, 503}  # the token; the host is not running
    if has_path_params:
        errors.add(422)  # a path id with NUL or a lone surrogate
    if body_model(op) is not None:
        errors |= {400, 413, 422}
    for status in sorted(errors):
        answer: dict[str, Any] = {
            "description": _ERRORS[status],
            "content": {"application/json": {"schema": _ERROR}},
        }
        if status in _WITH_RETRY_AFTER:
            answer["headers"] = {"Retry-After": _RETRY_AFTER}
        responses[str(status)] = answer
    return responses


def _answer(answer: Answer, refs: Refs) -> dict[str, Any]:
    doc: dict[str, Any] = {"description": answer.description}
    if answer.model is not None:
        doc["content"] = {answer.media: {"schema": refs[answer.model]}}
    elif answer.media == "text/event-stream":
        doc["content"] = {answer.media: {"schema": {"type": "string"}}}
    elif answer.media:
        doc["content"] = {answer.media: {"schema": {}}}
    if answer.headers:
        doc["headers"] = {
            name: {"description": text, "schema": {"type": "string"}}
            for name, text in answer.headers
        }
    return doc


def _ident(path: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "_", openapi_path(path)).strip("_")
