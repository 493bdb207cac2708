"""The commands a session takes, on either host: one frozen record per kind, one union
(``Command``), one ``apply(agent, command)``.

The in-process host builds the records from the request and applies them in its queue
(``_local_commands``); the PostgreSQL API node stores them as command rows and the owning
worker reads each row back with ``parse_command`` and applies it with the same ``apply``
(``_pg._drain``). A row whose kind nobody knows, or whose body no API writes, is a
``CommandError``: the worker records it on the row (``error``) instead of consuming the row
as if it had applied.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Literal, assert_never, get_args

import jsonpatch
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    JsonValue,
    TypeAdapter,
    ValidationError,
)

from .. import CancelCause
from ..agent import Agent, ClientTool
from ..messages import Block, MessageSource, block_from_json, user_message
from ._api import APPROVAL_BY, ApiError
from ._inputs_api import INPUT_BY
from ._ledger import HTTP_SOURCE
from ._trace import continue_caller_trace

__all__ = [
    "COMMAND_KINDS",
    "Answer",
    "Cancel",
    "ClientResult",
    "ClientTools",
    "Command",
    "CommandError",
    "Decide",
    "Followup",
    "Inject",
    "SetState",
    "Steer",
    "agui_command",
    "apply",
    "parse_command",
]


class _Record(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")


def _blocks_only(content: str | tuple[Any, ...]) -> str | tuple[Block, ...]:
    if isinstance(content, tuple) and not all(isinstance(b, get_args(Block)) for b in content):
        raise ValueError("content parts must be content blocks")
    return content


MessageContent = Annotated[str | tuple[Any, ...], AfterValidator(_blocks_only)]
"""A message's content: text, or blocks (images and files by the hash they are stored
under)."""


class _Message(_Record):
    """A user message: its content, its id (``None``: minted when applied), the caller's
    trace headers, and what the in-process host records with it (``source.http``)."""

    content: MessageContent
    message_id: str | None = None
    trace: Mapping[str, JsonValue] | None = None
    source: Mapping[str, JsonValue] | None = None  # the source's extras (an MCP prompt's)
    record: Mapping[str, JsonValue] | None = None


class Followup(_Message):
    """Queue a message for the next turn and wake the agent."""

    kind: Literal["followup"] = "followup"


class Steer(_Message):
    """Queue a message for the next step and wake the agent."""

    kind: Literal["steer"] = "steer"


class Inject(_Message):
    """Queue a message for the next step without waking the agent."""

    kind: Literal["inject"] = "inject"


class Cancel(_Record):
    """Abort the active turn (the inbox kept or cleared)."""

    kind: Literal["cancel"] = "cancel"
    keep_inbox: bool = False


class Decide(_Record):
    """Answer a call that waits for an approval."""

    kind: Literal["approval"] = "approval"
    call_id: str
    decision: Literal["allow", "deny"]
    reason: str | None = None
    by: str = APPROVAL_BY


class Answer(_Record):
    """Answer an input request that waits (``agent.answer_input``)."""

    kind: Literal["input"] = "input"
    id: str
    action: Literal["accept", "decline", "cancel"]
    content: dict[str, JsonValue] | None = None
    by: str = INPUT_BY


class _Tool(_Record):
    name: str
    description: str
    parameters: dict[str, JsonValue]


class ClientTools(_Record):
    """Offer the client tools of an AG-UI run (replacing the previous offer)."""

    kind: Literal["client_tools"] = "client_tools"
    tools: tuple[_Tool, ...]


class ClientResult(_Record):
    """A client tool's result for a call that waits for it."""

    kind: Literal["client_result"] = "client_result"
    call_id: str
    content: str
    is_error: bool = False


class SetState(_Record):
    """The client's shared state document (applied as one RFC 6902 patch)."""

    kind: Literal["state"] = "state"
    state: dict[str, JsonValue]


Command = Annotated[
    Followup | Steer | Inject | Cancel | Decide | Answer | ClientTools | ClientResult | SetState,
    Field(discriminator="kind"),
]
"""Every command a session takes."""

COMMAND_KINDS = (
    "followup",
    "steer",
    "inject",
    "cancel",
    "approval",
    "input",
    "client_tools",
    "client_result",
    "state",
)
"""The ``kind`` of each record of ``Command``."""

_ADAPTER: TypeAdapter[Command] = TypeAdapter(Command)
_MEMBERS = frozenset({"str", "tuple[any, ...]"})
"""Union members in a validation error's location (left out of the field's path)."""


class CommandError(ValueError):
    """A stored command that is no command: an unknown kind or a body no API writes."""


def parse_command(kind: str, message_id: str | None, body: Any) -> Command:
    """The command a stored row holds (``kind``, its ``message_id`` column, its JSON body).

    Raises:
        CommandError: an unknown kind, a body that is not an object, or one that does not
            fit the kind; the message says which.
    """
    if kind not in COMMAND_KINDS:
        raise CommandError(f"unknown command kind {kind!r}")
    if not isinstance(body, dict):
        raise CommandError(f"{kind} body is not an object")
    fields = {k: v for k, v in body.items() if k not in ("kind", "message_id", "record")}
    fields["kind"] = kind
    if kind in ("followup", "steer", "inject"):
        fields["message_id"] = message_id
        if isinstance(fields.get("content"), list):
            fields["content"] = _stored_blocks(kind, fields["content"])
    try:
        return _ADAPTER.validate_python(fields)
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        # The field's path, without the union members pydantic names (``content.str``).
        path = [p for p in first["loc"][1:] if not (isinstance(p, str) and p in _MEMBERS)]
        where = ".".join(str(p) for p in path) or "body"
        raise CommandError(f"{kind} {where}: {first['msg']}") from None


def _stored_blocks(kind: str, parts: list[Any]) -> tuple[Block, ...]:
    """A message's content parts in their stored form, as blocks.

    Raises:
        CommandError: a part that is not an object, or not a block.
    """
    if not all(isinstance(part, dict) for part in parts):
        raise CommandError(f"{kind} content: a stored content part is not an object")
    try:
        return tuple(block_from_json(part) for part in parts)
    except (KeyError, TypeError, ValueError) as exc:
        raise CommandError(f"{kind} content: {exc}") from None


def agui_command(
    kind: Literal["client_tools", "client_result", "state"], body: Mapping[str, Any]
) -> Command:
    """The AG-UI command ``_agui_input`` planned (its kind and body).

    Raises:
        ApiError: 422 ``invalid_command`` for a body that does not fit the kind.
    """
    try:
        return parse_command(kind, None, dict(body))
    except CommandError as exc:
        raise ApiError(422, "invalid_command", str(exc)) from None


def apply(agent: Agent, command: Command) -> int | None:
    """Apply ``command`` to the live agent (by the session's owner, in command order).

    Returns the seq of the event it wrote synchronously (a splice, a decision, a state
    change), or ``None`` when it wrote none (a cancel, an offer, a client result: what they
    cause is written by the turn).

    Raises:
        ApprovalError: a decision for a call that waits for none.
        InputError: an answer for an input request that waits for none.
        ValueError: a message or an AG-UI command the agent refuses; nothing changed.
    """
    match command:
        case Followup() | Steer() | Inject():
            return _send(agent, command)
        case Cancel():
            agent.cancel(CancelCause.user(), keep_inbox=command.keep_inbox)
            return None
        case Decide():
            return agent.decide_approval(
                command.call_id, command.decision, reason=command.reason, by=command.by
            )
        case Answer():
            return agent.answer_input(command.id, command.action, command.content, by=command.by)
        case ClientTools():
            agent.client_calls.offer(
                [ClientTool(t.name, t.description, t.parameters) for t in command.tools]
            )
            return None
        case ClientResult():
            agent.client_calls.answer(
                command.call_id,
                command.content,
                is_error=command.is_error,
                name="ClientToolError" if command.is_error else None,
            )
            return None
        case SetState():
            patch = jsonpatch.make_patch(dict(agent.state), command.state).patch
            return agent.update_state(patch) if patch else None
        case _:
            assert_never(command)


def _send(agent: Agent, command: Followup | Steer | Inject) -> int:
    extra: dict[str, JsonValue] = dict(command.source or {})
    if command.record is not None:
        extra[HTTP_SOURCE] = dict(command.record)
    source = MessageSource(extra=extra) if extra else None
    message = user_message(command.content, id=command.message_id, source=source)
    continue_caller_trace(agent, command.trace, message.id)
    if command.kind == "followup":
        return agent.followup(message)
    if command.kind == "steer":
        return agent.steer(message)
    return agent.inject(message)
