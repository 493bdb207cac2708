"""The request bodies of the service, one pydantic model each (strict: no coercion, no
unknown field). A field's error carries its answer's code (``invalid_text``,
``invalid_mode``, ...) as the pydantic error type; ``_errors.to_api_error`` maps it."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationInfo,
)
from pydantic_core import PydanticCustomError

from ._api import check_session_id
from ._content import Content
from ._errors import ApiError
from ._text import check_texts

__all__ = [
    "CancelBody",
    "CreateBody",
    "DecisionBody",
    "MessageBody",
]


def _text(value: Any, info: ValidationInfo) -> Any:
    try:
        check_texts(value, info.field_name or "body")
    except ApiError as exc:
        raise PydanticCustomError("invalid_text", exc.message) from None
    return value


def _session_id(value: str) -> str:
    try:
        check_session_id(value)
    except ApiError as exc:
        raise PydanticCustomError("invalid_session_id", exc.message) from None
    return value


def _one_of(code: str, name: str, allowed: tuple[str, ...]) -> Any:
    def check(value: Any) -> Any:
        if value not in allowed:
            shown = " or ".join(repr(a) for a in allowed)
            raise PydanticCustomError(code, f"{name} must be {shown}, not {repr(value)[:60]}")
        return value

    return BeforeValidator(check)


def _no_default(schema: dict[str, Any]) -> None:
    """The schema of a field that is required: its ``None`` default exists only so that a
    missing value is refused by the field's validator, with the field's own code."""
    schema.pop("default", None)


Text = Annotated[str, AfterValidator(_text)]
Id = Annotated[str, Field(min_length=1, max_length=512), AfterValidator(_text)]
"""An id or key a client chooses: 1 to 512 characters of text."""
SessionId = Annotated[str, AfterValidator(_session_id)]
Meta = Annotated[dict[str, Any], AfterValidator(_text)]


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class CreateBody(_Body):
    """``POST /v1/sessions``."""

    session_id: SessionId | None = None
    profile: Id | None = None
    meta: Meta | None = None
    input: Content | None = None
    """The first message: text, or parts (``_content``)."""


class MessageBody(_Body):
    """``POST /v1/sessions/{id}/messages``."""

    model_config = ConfigDict(json_schema_extra={"required": ["mode", "content"]})

    mode: Annotated[
        Literal["followup", "steer", "inject"],
        _one_of("invalid_mode", "mode", ("followup", "steer", "inject")),
    ] = Field(default=None, validate_default=True, json_schema_extra=_no_default)
    content: Content
    """Text, or a list of text, image and file parts (``_content``)."""
    message_id: Id | None = None
    idempotency_key: Id | None = None


class CancelBody(_Body):
    """``POST /v1/sessions/{id}/cancel`` (the body may be empty)."""

    keep_inbox: bool = False


class DecisionBody(_Body):
    """``POST /v1/sessions/{id}/approvals/{call_id}``."""

    model_config = ConfigDict(json_schema_extra={"required": ["decision"]})

    decision: Annotated[
        Literal["allow", "deny"], _one_of("invalid_decision", "decision", ("allow", "deny"))
    ] = Field(default=None, validate_default=True, json_schema_extra=_no_default)
    reason: Annotated[str, Field(max_length=4096), AfterValidator(_text)] | None = None
