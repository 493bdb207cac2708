"""Structured output of one turn, built on public hooks only.

The turn that claims a ``run(..., output_type=T)`` message asks for a JSON answer: through
``CallConfig.output_schema`` where the adapter says the model supports it
(``ModelInfo.json_schema_output``), else through a ``final_result`` tool visible to that
turn only. ``agent/turn-stopping`` validates the answer. An invalid one is answered with
the validation error as an ``inject``-ed next-step message (so the retry is in the log and
the next step of the same turn carries it), at most ``retries`` times; after that the
listener raises an ``LlmError`` with code ``OUTPUT_INVALID``, which the driver records as
``turn/end{error}`` like any other turn failure. A valid answer is recorded as a log-only
``turn/output`` event before ``turn/end``, so resume and replay know the turn's output.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Generic, Literal, TypeVar

import jsonschema
import pydantic
import referencing
import referencing.exceptions

from .._hooks import Disposer
from ..errors import LlmError
from ..llm._types import CallConfig, LlmFailure
from ..messages import AssistantMessage, MessageSource, TextBlock, user_message
from ..session._events import AssistantMessageEvent, SessionEvent, TurnOutput
from ..tools import Tool, ToolResult
from . import _handles as h
from ._decisions import RequestPayload, TurnStoppingPayload

if TYPE_CHECKING:
    from ._loop_agent import LoopAgent as Agent

__all__ = ["FINAL_RESULT", "OUTPUT_PLUGIN", "OutputController", "OutputSpec", "answer_text"]

T = TypeVar("T")
FINAL_RESULT = "final_result"
OUTPUT_PLUGIN = "steerloop/output"
_RETRY_SOURCE = MessageSource(kind="plugin", plugin=OUTPUT_PLUGIN)
# The model sees the output schema; the arguments are validated at turn-stopping instead,
# so an invalid call counts against the retries and comes back as a next-step message.
_ANY = jsonschema.Draft202012Validator({})


class OutputSpec(Generic[T]):
    """An output type, its object-rooted JSON schema and its validator.

    ``output_type`` is a type pydantic's ``TypeAdapter`` takes, or a JSON-schema dict (the
    output is then the plain JSON value, checked with ``jsonschema``). Providers want an
    object at the root (OpenAI ``json_schema``, tool parameters), so any other schema is
    wrapped as ``{"response": <value>}``.
    """

    def __init__(self, output_type: Any) -> None:
        self.adapter: pydantic.TypeAdapter[T] | None = None
        self.checker: Any = None
        if isinstance(output_type, Mapping):
            schema = dict(output_type)
            checker_cls = jsonschema.validators.validator_for(schema)
            try:
                checker_cls.check_schema(schema)
            except jsonschema.SchemaError as exc:
                raise ValueError(f"invalid output schema: {exc.message}") from None
            # References resolve within the schema only: jsonschema's default registry
            # fetches any other ``$ref`` over the network while validating (SEP-2106).
            self.checker = checker_cls(schema, registry=referencing.Registry())
        else:
            try:
                self.adapter = pydantic.TypeAdapter(output_type)
                schema = dict(self.adapter.json_schema())
            except (pydantic.PydanticUserError, TypeError) as exc:
                raise ValueError(f"output_type {output_type!r} has no JSON schema: {exc}") from None
        name = str(schema.get("title") or getattr(output_type, "__name__", "output"))
        self.wrapped = schema.get("type") != "object"
        if self.wrapped:
            defs = schema.pop("$defs", None)
            schema = {
                "title": name,
                "type": "object",
                "properties": {"response": schema},
                "required": ["response"],
                **({"$defs": defs} if defs else {}),
            }
        self.schema: dict[str, Any] = schema

    def validate(self, text: str) -> T:
        """The value of the JSON ``text``.

        Raises:
            ValueError: the text is not JSON or does not validate; the message lists why.
        """
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ValueError(f"invalid JSON: {exc}") from None
        if self.wrapped:
            if not isinstance(data, dict) or "response" not in data:
                raise ValueError('expected an object with the field "response"')
            data = data["response"]
        return self.from_json(data)

    def from_json(self, value: Any) -> T:
        """Validate a JSON value (also a logged ``turn/output`` one, on resume or replay).

        Raises:
            ValueError: it does not validate; the message lists why.
        """
        if self.adapter is None:
            try:
                error = jsonschema.exceptions.best_match(self.checker.iter_errors(value))
            except referencing.exceptions.Unresolvable as exc:
                raise ValueError(f"the output schema has an unresolvable $ref: {exc}") from None
            if error is not None:
                where = ".".join(str(p) for p in error.absolute_path) or "(root)"
                raise ValueError(f"{where}: {error.message}")
            return value  # type: ignore[no-any-return]
        try:
            return self.adapter.validate_json(json.dumps(value))
        except pydantic.ValidationError as exc:
            raise ValueError(_describe(exc)) from None

    def to_json(self, value: T) -> Any:
        """The plain JSON form of a validated value, as the log stores it."""
        if self.adapter is None:
            return value
        return json.loads(self.adapter.dump_json(value))


def _describe(exc: pydantic.ValidationError) -> str:
    lines = []
    for error in exc.errors(include_url=False):
        where = ".".join(str(part) for part in error["loc"]) or "(root)"
        lines.append(f"{where}: {error['msg']}")
    return "; ".join(lines)


def answer_text(message: AssistantMessage) -> str:
    """The text blocks of ``message``, joined."""
    return "".join(b.text for b in message.content if isinstance(b, TextBlock))


def _last_answer(events: Sequence[SessionEvent]) -> tuple[int, AssistantMessage] | None:
    """The latest ``assistant/message`` of the open turn (the step that just completed)."""
    for index in range(len(events) - 1, -1, -1):
        event = events[index]
        if event.type == "turn/start":
            return None
        if event.type == "assistant/message" and isinstance(event.data, AssistantMessageEvent):
            return event.seq, event.data.message
    return None


class OutputController(Generic[T]):
    """Asks for, validates and records the output of the turn that claims one message."""

    def __init__(self, agent: Agent, spec: OutputSpec[T], retries: int) -> None:
        self.agent = agent
        self.spec = spec
        self.retries = retries
        self.retried = 0
        self.turn: int | None = None  # set by the run's watch when the message is claimed
        self.value: T | None = None
        self.recorded = False
        self._via: Literal["native", "tool"] = "tool"
        self._tool = Tool(
            name=FINAL_RESULT,
            description="Give your final answer: call this once, with the answer as arguments.",
            parameters=spec.schema,
            execute=self._final_result,
            # No side effect: approval policies treat it as a read, and it may run with others.
            concurrency_safe=True,
            validator=_ANY,
        )
        self._tool_disposer: Disposer | None = None
        hooks, owner = agent.services.hooks, agent.id
        self._disposers = [
            hooks.on(h.REQUEST, self._on_request, owner=owner),
            hooks.on(h.TURN_STOPPING, self._on_stopping, owner=owner),
        ]

    def close(self) -> None:
        self._set_tool(False)
        for dispose in self._disposers:
            dispose()
        self._disposers.clear()

    # --- asking ----------------------------------------------------------------------

    async def _on_request(
        self, payload: RequestPayload, next_: Callable[[], Awaitable[CallConfig]]
    ) -> CallConfig:
        config = await next_()
        if payload.turn != self.turn or not isinstance(config, CallConfig):
            return config
        native = await self._native(config)
        self._via = "native" if native else "tool"
        self._set_tool(not native)
        if native:
            return config.replace(output_schema=self.spec.schema)
        return config.replace(output_schema=None) if config.output_schema is not None else config

    async def _native(self, config: CallConfig) -> bool:
        if not config.provider or not config.model:
            return False
        adapter = self.agent.services.llm.adapter_for(config.provider)
        if adapter is None:
            return False  # prepare_call reports the missing adapter
        info = await adapter.resolve_model(config.provider, config.model)
        return info is not None and info.json_schema_output

    def _set_tool(self, visible: bool) -> None:
        if visible and self._tool_disposer is None:
            self._tool_disposer = self.agent.services.tools.register(
                self._tool, owner=self.agent.id
            )
        elif not visible and self._tool_disposer is not None:
            self._tool_disposer()
            self._tool_disposer = None

    @staticmethod
    async def _final_result(args: Any, exec: Any) -> ToolResult:
        return ToolResult(content="Final result received.", concludes_turn=True)

    # --- validating ------------------------------------------------------------------

    async def _on_stopping(self, payload: TurnStoppingPayload) -> None:
        if payload.turn != self.turn or self.recorded:
            return
        session = self.agent.session
        found = _last_answer(session.events)
        try:
            if found is None:
                raise ValueError("the turn has no answer")
            seq, message = found
            calls = [c for c in message.tool_calls if c.name == FINAL_RESULT]
            if calls:
                value = self.spec.validate(calls[-1].arguments)
            elif self._via == "native":
                value = self.spec.validate(answer_text(message))
            else:
                raise ValueError(f"no {FINAL_RESULT} call")
        except ValueError as exc:
            self._retry_or_fail(str(exc))
            return
        self.value = value
        self.recorded = True
        session.append(
            TurnOutput(turn=payload.turn, message_seq=seq, output=self.spec.to_json(value)),
            ignorable=True,
        )

    def _retry_or_fail(self, problem: str) -> None:
        if self.retried >= self.retries:
            raise LlmError(
                LlmFailure(
                    message=f"the output did not validate after {self.retried} retries: {problem}",
                    code="OUTPUT_INVALID",
                )
            )
        self.retried += 1
        if self._via == "native":
            text = (
                f"Your answer does not match the output schema: {problem}. "
                "Answer again with only the corrected JSON."
            )
        else:
            text = (
                f"Your final answer is not valid: {problem}. "
                f"Call {FINAL_RESULT} again with corrected arguments."
            )
        self.agent.inject(user_message(text, source=_RETRY_SOURCE))
