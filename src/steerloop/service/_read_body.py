"""Reading a request's JSON body within a size bound (every endpoint's first step)."""

from __future__ import annotations

from typing import Any, TypeVar

from pydantic import BaseModel
from starlette.requests import Request

from ..session._json import loads
from ._errors import ApiError
from ._state import state_of

__all__ = ["ascii_int", "read_body", "read_json", "read_json_sized"]

Body = TypeVar("Body", bound=BaseModel)


async def read_body(request: Request, model: type[Body], allow_empty: bool = False) -> Body:
    """The body as ``model``, read within the app's body limit (``read_json``'s errors, and
    the model's ``ValidationError``)."""
    limit = state_of(request).settings.body_limit
    return model.model_validate(await read_json(request, limit, allow_empty))


async def read_json(request: Request, limit: int, allow_empty: bool = False) -> dict[str, Any]:
    """The body as a JSON object, read up to ``limit`` bytes.

    Raises:
        ApiError: 413 past ``limit``, 400 for bytes that are not JSON, 422 for JSON that is
            not an object (an empty body is ``{}`` with ``allow_empty``).
    """
    return (await read_json_sized(request, limit, allow_empty))[0]


async def read_json_sized(
    request: Request, limit: int, allow_empty: bool = False
) -> tuple[dict[str, Any], int]:
    """The JSON object of the body and the body's size in bytes (``read_json``'s errors)."""
    declared = ascii_int(request.headers.get("content-length"))
    if declared is not None and declared > limit:
        raise ApiError(413, "body_too_large", f"the body is over {limit} bytes")
    data = bytearray()
    async for chunk in request.stream():
        data += chunk
        if len(data) > limit:
            raise ApiError(413, "body_too_large", f"the body is over {limit} bytes")
    if not data and allow_empty:
        return {}, 0
    try:
        body = loads(bytes(data))
    except (ValueError, TypeError) as exc:
        raise ApiError(400, "invalid_json", f"the body is not JSON: {exc}") from None
    if not isinstance(body, dict):
        raise ApiError(422, "invalid_body", "the body must be a JSON object")
    return body, len(data)


def ascii_int(text: str | None) -> int | None:
    """``text`` as a non-negative integer of at most 18 ASCII digits, else ``None``
    (``str.isdigit`` alone takes ``²`` and other digits ``int`` refuses)."""
    if text is None or not (text.isascii() and text.isdigit()) or len(text) > 18:
        return None
    return int(text)
