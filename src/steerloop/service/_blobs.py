"""``GET /v1/sessions/{id}/blobs/{hash}``: the bytes of an image or file a session's log
references, with the same auth as every route (the endpoint wrapper checks it).

Only a blob some event of *that* session references is served (another session's hash is
404 like a hash never stored). The bytes never change under their hash, so the answer is
cacheable for good (``immutable``, privately: it needed the token). It is served as its own
type, but with ``nosniff`` and a sandboxing CSP: a text/html file someone attached cannot
run script in the service's origin.
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from ..errors import SessionPersistenceNotFoundError
from ..messages import check_blob_hash
from ..session import StoredBlob, event_blobs
from ._api import Host
from ._errors import ApiError
from ._operation import Answer, Operation, Param

__all__ = ["BLOB_OPERATION", "get_blob"]

_HEADERS = {
    "Cache-Control": "private, max-age=31536000, immutable",
    "X-Content-Type-Options": "nosniff",
    "Content-Security-Policy": "default-src 'none'; sandbox",
    "Cross-Origin-Resource-Policy": "same-origin",
}


async def get_blob(request: Request, host: Host) -> Response:
    """The blob ``hash`` of session ``session_id``.

    Raises:
        ApiError: 422 ``invalid_blob_hash`` for a hash that is not ``sha256:<64 hex>``,
            404 ``session_not_found`` / ``blob_not_found``.
    """
    session_id: str = request.path_params["session_id"]
    hash: str = request.path_params["hash"]
    try:
        check_blob_hash(hash)
    except ValueError as exc:
        raise ApiError(422, "invalid_blob_hash", str(exc)) from None
    await host.require(session_id)
    etag = f'"{hash}"'
    try:
        blob = await _read(host, session_id, hash)
    except SessionPersistenceNotFoundError:
        raise ApiError(
            404, "blob_not_found", f"session {session_id!r} references no blob {hash}"
        ) from None
    headers = _HEADERS | {"ETag": etag}
    if request.headers.get("if-none-match") == etag:
        return Response(status_code=304, headers=headers)
    return Response(blob.data, media_type=blob.media_type, headers=headers)


async def _read(host: Any, session_id: str, hash: str) -> StoredBlob:
    """From the host's store (PostgreSQL: the shared one); a host without a store has only
    its live sessions' blocks."""
    store = getattr(host, "store", None)
    if store is None:
        store = host.rt.sessions.persistence
    if store is not None:
        blob: StoredBlob = await store.get_blob(hash, session_id=session_id)
        return blob
    for event in await host.log_events(session_id):
        for put in event_blobs(event):
            if put.hash == hash and put.data is not None:
                return StoredBlob(hash, put.media_type, put.data)
    raise SessionPersistenceNotFoundError(f"no blob {hash}")


BLOB_OPERATION = Operation(
    method="GET",
    path="/v1/sessions/{session_id:str}/blobs/{hash:str}",
    summary="The bytes of an image or file the session's log references",
    handler=get_blob,
    answers=(
        Answer(
            status=200,
            description="The blob's bytes, as its own media type.",
            media="*/*",
            headers=(("ETag", "The blob's hash, quoted."), ("Cache-Control", "Immutable.")),
        ),
        Answer(status=304, description="`If-None-Match` named this blob.", media=""),
    ),
    params=(
        Param(
            name="If-None-Match",
            where="header",
            description="The ETag of a copy the client has.",
            pattern=r'^"[^"]*"$',
        ),
    ),
    errors=frozenset({404, 422}),
)
