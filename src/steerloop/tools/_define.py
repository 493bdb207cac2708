"""Tool definitions: schema, body, concurrency class, and the records a call produces."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, Literal, cast, overload

import jsonschema
import pydantic
import referencing
from typing_extensions import TypeVar

from .._media import MODALITIES
from ..errors import ToolDefinitionError
from ..messages import Block, ToolCallBlock, UserMessage
from ._agent_ref import AgentRef

if TYPE_CHECKING:
    from .._signal import AbortSignal

__all__ = [
    "PostExecute",
    "Tool",
    "ToolDecision",
    "ToolError",
    "ToolExec",
    "ToolResult",
    "define_tool",
    "idempotency_key",
]

#: Resolves a schema's references within the schema only. jsonschema's default retrieves any
#: other ``$ref`` over the network while validating: a schema from an MCP server could point
#: it at an internal address (SEP-2106); such a reference is unresolvable instead.
_NO_RETRIEVAL: referencing.Registry[Any] = referencing.Registry()

#: What a tool's body receives: the validated arguments (a pydantic model instance, or the
#: parsed JSON for a JSON-schema tool).
ArgsT = TypeVar("ArgsT", default=Any)

_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


@dataclass(frozen=True, slots=True)
class ToolError:
    """Machine-readable error of a tool result (``code`` from EVENTS.md §5, or the tool's own)."""

    code: str
    name: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolResult:
    """What a tool call produced."""

    content: str | Sequence[Block]
    is_error: bool = False
    error: ToolError | None = None
    concludes_turn: bool = False
    meta: Any = None


def idempotency_key(session_id: str, turn: int, step: int, call_id: str) -> str:
    """The idempotency key of a call: a hex SHA-256 of its session id, turn, step and call id.

    The turn and step are part of it because a provider may reuse call ids across steps.
    """
    text = json.dumps([session_id, turn, step, call_id], ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


@dataclass(slots=True, kw_only=True, eq=False)
class ToolExec:
    """The context of one tool call, handed to the body and the pipeline hooks."""

    call_id: str
    name: str
    arguments: Any
    raw_arguments: str
    signal: AbortSignal
    agent: AgentRef
    turn: int = 0
    step: int = 0
    deferred: list[UserMessage] = field(default_factory=list)
    input_modalities: frozenset[str] = MODALITIES
    """What the model that made the call accepts (``"text"``, ``"image"``, ``"file"``): a
    result block it does not is replaced by a note saying so."""

    @property
    def idempotency_key(self) -> str:
        """A key for this call, the same on every retry, after resume and after a takeover.

        Pass it to an external API that deduplicates requests (an ``Idempotency-Key``
        header, a unique column of an upsert), so the world sees the effect once even if
        the call is asked again or reconciled. It is 64 hex digits.
        """
        return idempotency_key(self.agent.id, self.turn, self.step, self.call_id)

    def defer_context(self, message: UserMessage) -> None:
        """Queue ``message`` for the next step, once this call's result has committed."""
        if not isinstance(message, UserMessage):
            raise ValueError("defer_context takes a UserMessage")
        self.deferred.append(message)


@dataclass(frozen=True, slots=True)
class ToolDecision:
    """A ``tools/pre-execute`` verdict: run the call, refuse it, or ask a person.

    ``ask`` holds the call: the loop writes ``tool/approval-requested`` and waits (until the
    turn is cancelled) for ``agent.decide_approval(call_id, "allow" | "deny")``.
    """

    kind: Literal["allow", "deny", "ask"]
    reason: str | None = None

    @classmethod
    def allow(cls) -> ToolDecision:
        return cls("allow")

    @classmethod
    def deny(cls, reason: str) -> ToolDecision:
        return cls("deny", reason)

    @classmethod
    def ask(cls, reason: str | None = None) -> ToolDecision:
        """Hold the call until a person decides; ``reason`` says why they are asked."""
        if reason is not None and not isinstance(reason, str):
            raise ValueError("ToolDecision.ask(reason) takes a string or None")
        return cls("ask", reason)


@dataclass(frozen=True, slots=True)
class PostExecute:
    """A ``tools/post-execute`` verdict."""

    kind: Literal["accept", "block"]
    content: str | Sequence[Block] | None = None
    additional_contexts: tuple[UserMessage, ...] = ()

    @classmethod
    def accept(
        cls,
        content: str | Sequence[Block] | None = None,
        additional_contexts: Sequence[UserMessage] = (),
    ) -> PostExecute:
        return cls("accept", content, tuple(additional_contexts))

    @classmethod
    def block(cls, feedback: str, additional_contexts: Sequence[UserMessage] = ()) -> PostExecute:
        return cls("block", feedback, tuple(additional_contexts))


Execute = Callable[[Any, ToolExec], Awaitable[Any] | Any]
Reconcile = Callable[[ToolCallBlock, ToolExec], Awaitable[ToolResult | None] | ToolResult | None]
"""``reconcile(call, exec)``: at recovery, what a call whose outcome is unknown did (``None``:
it cannot tell)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Tool(Generic[ArgsT]):
    """A tool the model can call. Build one with ``define_tool`` or ``@tool``; ``ArgsT`` is
    what the body receives."""

    name: str
    description: str
    parameters: Mapping[str, Any]
    execute: Callable[[ArgsT, ToolExec], Awaitable[Any] | Any]
    concurrency_safe: bool | Callable[[Any], bool] = False
    model: type[pydantic.BaseModel] | None = None
    timeout: float | None = None
    durable_dispatch: bool | None = None
    """``True``: the call starts only once its ``tool/call`` is durable; ``False``: at once;
    ``None``: durable first unless the call is concurrency-safe."""
    reconcile: Reconcile | None = None
    validator: Any = field(default=None, repr=False, compare=False)

    def validate(self, args: Any) -> ArgsT:
        """Check parsed arguments against the schema; returns what the body receives."""
        if self.model is not None:
            return cast("ArgsT", self.model.model_validate(args))
        if self.validator is not None:
            error = jsonschema.exceptions.best_match(self.validator.iter_errors(args))
            if error is not None:
                raise error
        else:
            jsonschema.validate(args, dict(self.parameters))
        return cast("ArgsT", args)

    def is_concurrency_safe(self, args: Any) -> bool:
        flag = self.concurrency_safe
        return bool(flag(args)) if callable(flag) else bool(flag)

    def needs_durable_dispatch(self, safe: bool) -> bool:
        """Whether a call classified ``safe`` waits for its intent to be durable."""
        return not safe if self.durable_dispatch is None else self.durable_dispatch


M = TypeVar("M", bound=pydantic.BaseModel)


@overload
def define_tool(
    *,
    name: str,
    description: str,
    parameters: type[M],
    execute: Callable[[M, ToolExec], Awaitable[Any] | Any],
    concurrency_safe: bool | Callable[[M], bool] = False,
    timeout: float | None = None,
    durable_dispatch: bool | None = None,
    reconcile: Reconcile | None = None,
) -> Tool[M]: ...


@overload
def define_tool(
    *,
    name: str,
    description: str,
    parameters: Mapping[str, Any],
    execute: Execute,
    concurrency_safe: bool | Callable[[Any], bool] = False,
    timeout: float | None = None,
    durable_dispatch: bool | None = None,
    reconcile: Reconcile | None = None,
) -> Tool[Any]: ...


def define_tool(
    *,
    name: str,
    description: str,
    parameters: type[pydantic.BaseModel] | Mapping[str, Any],
    execute: Execute,
    concurrency_safe: bool | Callable[[Any], bool] = False,
    timeout: float | None = None,
    durable_dispatch: bool | None = None,
    reconcile: Reconcile | None = None,
) -> Tool[Any]:
    """Define a tool from a pydantic model or a JSON-schema dict.

    Args:
        durable_dispatch: whether a call waits, before its body starts, until the events
            announcing it (up to its ``tool/call`` and an approval decision) are durable, so
            a crash can never leave an effect the log does not know about. ``None`` (the
            default): it waits unless the call is ``concurrency_safe`` (a read is safe to
            repeat).
        reconcile: ``reconcile(call, exec) -> ToolResult | None`` (sync or async), asked at
            recovery for a call whose outcome would be ``TOOL_OUTCOME_UNKNOWN``: a result it
            returns is recorded instead (``tool/result`` with ``reconciled: true``); ``None``
            or an error keeps the call unknown.

    Raises:
        ToolDefinitionError: a bad name, schema, body, timeout, ``durable_dispatch`` or
            ``reconcile``.
    """
    if not isinstance(name, str) or not _NAME.match(name):
        raise ToolDefinitionError(f"tool name {name!r} must match {_NAME.pattern}")
    if not isinstance(description, str):
        raise ToolDefinitionError("description must be a string")
    if not callable(execute):
        raise ToolDefinitionError("execute must be callable (async, or sync for quick work)")
    if timeout is not None and (
        isinstance(timeout, bool) or not isinstance(timeout, int | float) or timeout <= 0
    ):
        raise ToolDefinitionError("timeout must be a positive number of seconds")
    if durable_dispatch is not None and not isinstance(durable_dispatch, bool):
        raise ToolDefinitionError("durable_dispatch must be True, False or None")
    if reconcile is not None and not callable(reconcile):
        raise ToolDefinitionError("reconcile must be callable: reconcile(call, exec)")
    model: type[pydantic.BaseModel] | None = None
    validator: Any = None
    if isinstance(parameters, type) and issubclass(parameters, pydantic.BaseModel):
        model = parameters
        schema: Mapping[str, Any] = parameters.model_json_schema()
    elif isinstance(parameters, Mapping):
        validator_cls = jsonschema.validators.validator_for(parameters)
        try:
            validator_cls.check_schema(dict(parameters))
        except jsonschema.SchemaError as exc:
            raise ToolDefinitionError(f"invalid parameter schema: {exc.message}") from None
        schema = dict(parameters)
        # Compiled once: jsonschema.validate() would re-check the schema on every call.
        validator = validator_cls(schema, registry=_NO_RETRIEVAL)
    else:
        raise ToolDefinitionError("parameters must be a pydantic model or a JSON-schema dict")
    return Tool(
        name=name,
        description=description,
        parameters=schema,
        execute=execute,
        concurrency_safe=concurrency_safe,
        model=model,
        timeout=timeout,
        durable_dispatch=durable_dispatch,
        reconcile=reconcile,
        validator=validator,
    )
