"""``POST /v1/sessions/{id}/inputs/{input_id}``: a person answers a server's input request.

The request (an MCP ``elicitation/create``) is an ``input/requested`` event; the answer is
checked here against it (pending, and content valid against the requested schema) and then
queued as the session's next command (``input``), which its owner applies with
``agent.answer_input(..., by="http")``: one ``input/answered`` event. An AG-UI ``resume``
answering an input interrupt takes this same path (``_agui_run``).

``GET /v1/sessions/{id}`` lists the pending requests (``input_json``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, ValidationInfo
from pydantic_core import PydanticCustomError
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from ..agent import check_input_answer
from ..session import InputAction, InputRequest, input_state
from ..session.events import SessionEvent
from ._api import Host
from ._errors import ApiError
from ._operation import command
from ._read_body import read_body
from ._text import check_texts

__all__ = [
    "INPUT_BY",
    "INPUT_OPERATION",
    "InputAnswerBody",
    "answer_input",
    "checked_answer",
    "input_json",
    "input_not_waiting",
]

INPUT_BY = "http"
"""``input/answered.by`` of an answer that came over HTTP (or an AG-UI resume)."""


def _text(value: Any, info: ValidationInfo) -> Any:
    try:
        check_texts(value, info.field_name or "body")
    except ApiError as exc:
        raise PydanticCustomError("invalid_text", exc.message) from None
    return value


class InputAnswerBody(BaseModel):
    """``POST /v1/sessions/{id}/inputs/{input_id}``: ``accept`` with ``content`` (an object
    valid against the requested schema), ``decline`` or ``cancel`` (no content)."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    action: Literal["accept", "decline", "cancel"]
    content: Annotated[dict[str, Any], AfterValidator(_text)] | None = None


def input_json(request: InputRequest) -> dict[str, Any]:
    """A pending input request as ``GET /v1/sessions/{id}`` lists it."""
    return {
        "id": request.id,
        "server": request.server,
        "message": request.message,
        "schema": request.schema,
        "url": request.url,
        "kind": request.kind,
        "call_id": request.call_id,
    }


def input_not_waiting(session_id: str, input_id: str, state: str) -> ApiError:
    """The answer for an input request that waits for none: 409 ``ALREADY_DECIDED`` when it
    was answered, else 404."""
    if state == "answered":
        return ApiError(409, "ALREADY_DECIDED", f"input {input_id!r} was already answered")
    return ApiError(
        404, "input_not_found", f"session {session_id!r} has no pending input {input_id!r}"
    )


def checked_answer(
    session_id: str,
    events: Sequence[SessionEvent],
    pending: Sequence[InputRequest],
    input_id: str,
    action: InputAction,
    content: Mapping[str, Any] | None,
) -> dict[str, Any] | None:
    """The content to record for an answer to ``input_id``, checked before it is queued.

    Raises:
        ApiError: 404 ``input_not_found`` (not pending), 409 ``ALREADY_DECIDED`` (answered),
            422 ``invalid_answer`` (content the requested schema refuses, or content with a
            decline or cancel; the message says where).
    """
    request = next((r for r in pending if r.id == input_id), None)
    if request is None:
        raise input_not_waiting(session_id, input_id, input_state(events, input_id))
    try:
        return check_input_answer(request, action, content)
    except ValueError as exc:
        raise ApiError(422, "invalid_answer", str(exc)) from None


async def answer_input(request: Request, host: Host) -> Response:
    """``POST /v1/sessions/{id}/inputs/{input_id}`` → 202 ``{"cmd_seq"}`` once the answer is
    accepted as the session's next command (durable)."""
    session_id = request.path_params["session_id"]
    input_id = request.path_params["input_id"]
    body = await read_body(request, InputAnswerBody)
    await host.require(session_id)
    answer = await host.submit_input(session_id, input_id, body.action, body.content)
    return JSONResponse(answer, status_code=202)


INPUT_OPERATION = command(
    "/v1/sessions/{session_id:str}/inputs/{input_id:str}",
    "Answer a pending input request (an MCP elicitation)",
    answer_input,
    InputAnswerBody,
    frozenset({404, 409, 422, 429}),
)
