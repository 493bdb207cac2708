"""What one AG-UI ``RunAgentInput`` asks of a session, reconciled with its log by id.

The client sends its whole thread every run. ``plan_input`` compares it with the stored log
and keeps only what is new: user messages whose id the log does not have (they become
follow-ups, or steers while a turn runs), tool messages and ``resume`` entries that answer
the session's open interrupts (a client tool's call, an approval, an input request), the
client tools offered for this run, and the state document when the client's differs.
Messages the log already has are never applied again, so an input whose newest message is a
tool result or an assistant message re-sends nothing.

The plan becomes commands the session's owner applies in order (``_agui_commands``): the
same queue as every other command, so an API node and a worker host it alike.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from ag_ui.core import RunAgentInput
from pydantic import ConfigDict, ValidationError

from ..agent import CLIENT_ERROR, ClientCallError
from ..errors import ToolDefinitionError
from ..messages import DEFAULT_LIMITS, AttachmentLimits, Block
from ..session import InputAction
from ..tools import define_tool
from ._agui_inputs import input_resume
from ._agui_media import agui_content
from ._host import ApiError

__all__ = [
    "CLIENT_ERROR",
    "AguiRequest",
    "ClientCallError",
    "LogView",
    "Plan",
    "parse_request",
    "plan_input",
    "view_of",
]

MAX_TOOLS = 128
"""The most client tools one run may declare."""


class AguiRequest(RunAgentInput):
    """``POST /v1/agui``'s body: an AG-UI 1.0 ``RunAgentInput`` with no unknown member."""

    model_config = ConfigDict(extra="forbid")


def parse_request(body: Mapping[str, Any]) -> AguiRequest:
    """Validate the body.

    Raises:
        ApiError: 422 ``invalid_body`` naming the first problem.
    """
    try:
        return AguiRequest.model_validate(dict(body))
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first.get("loc", ()))
        raise ApiError(
            422, "invalid_body", f"not an AG-UI RunAgentInput: {where}: {first.get('msg')}"
        ) from None


@dataclass(slots=True)
class Plan:
    """What to submit for one run, in order; ``answered`` are the interrupt ids it answers."""

    tools: list[dict[str, Any]] = field(default_factory=list)
    state: dict[str, Any] | None = None
    decisions: list[tuple[str, Literal["allow", "deny"], str | None]] = field(default_factory=list)
    results: list[dict[str, Any]] = field(default_factory=list)
    inputs: list[tuple[str, InputAction, dict[str, Any] | None]] = field(default_factory=list)
    messages: list[tuple[str, str | tuple[Block, ...]]] = field(default_factory=list)
    """(id, text or blocks) to send."""
    answered: set[str] = field(default_factory=set)


@dataclass(slots=True)
class LogView:
    """What reconciliation needs from the stored log (JSON form)."""

    ids: set[str] = field(default_factory=set)  # message ids the log has
    approvals: dict[str, dict[str, Any]] = field(default_factory=dict)  # pending, by call
    deferred: dict[str, dict[str, Any]] = field(default_factory=dict)  # pending, by call
    closed: dict[str, str] = field(default_factory=dict)  # call id -> tool name, answered
    decided: set[str] = field(default_factory=set)  # calls whose approval was decided
    inputs: dict[str, str] = field(default_factory=dict)  # pending input id -> its call id
    answered: set[str] = field(default_factory=set)  # input ids answered or closed


def view_of(events: Sequence[Mapping[str, Any]]) -> LogView:
    view = LogView()
    names: dict[str, str] = {}
    for event in events:
        kind, data = event.get("type"), event.get("data")
        if not isinstance(data, dict):
            continue
        if kind == "user/message":
            view.ids.add(str(data.get("id")))
        elif kind == "agent/inbox/spliced":
            view.ids.update(
                str(m.get("id")) for m in data.get("inserted") or () if isinstance(m, dict)
            )
        elif kind in ("assistant/message", "tool/result"):
            message = data.get("message")
            message = message if isinstance(message, dict) else {}
            view.ids.add(str(message.get("id")))
            if kind == "tool/result":
                call_id = str(message.get("call_id"))
                view.closed[call_id] = names.get(call_id, "")
                view.approvals.pop(call_id, None)
                view.deferred.pop(call_id, None)
                _close_inputs(view, call_id)
        elif kind == "tool/call":
            names[str(data.get("call_id"))] = str(data.get("name"))
        elif kind == "tool/approval-requested":
            view.approvals[str(data.get("call_id"))] = data
        elif kind == "tool/approval-decided":
            view.approvals.pop(str(data.get("call_id")), None)
            view.decided.add(str(data.get("call_id")))
        elif kind == "tool/deferred":
            view.deferred[str(data.get("call_id"))] = data
        elif kind == "input/requested":
            view.inputs[str(data.get("id"))] = str(data.get("call_id"))
        elif kind == "input/answered":
            view.inputs.pop(str(data.get("id")), None)
            view.answered.add(str(data.get("id")))
        elif kind == "turn/end":
            _close_inputs(view, None)  # a turn's end closes its waits
    return view


def _close_inputs(view: LogView, call_id: str | None) -> None:
    """The pending inputs of call ``call_id`` (``None``: all) are closed."""
    for input_id, waiting in list(view.inputs.items()):
        if call_id is None or waiting == call_id:
            del view.inputs[input_id]
            view.answered.add(input_id)


def _content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    parts = [getattr(p, "text", None) for p in content or ()]
    if any(getattr(p, "type", "text") != "text" for p in content or ()):
        raise ApiError(422, "invalid_body", "only text content parts are supported")
    return "".join(p for p in parts if isinstance(p, str))


def _payload_text(payload: Any) -> str:
    if isinstance(payload, str):
        return payload
    return json.dumps(payload, ensure_ascii=False)


def _decision(payload: Any) -> tuple[Literal["allow", "deny"], str | None]:
    if isinstance(payload, Mapping):
        decision, reason = payload.get("decision"), payload.get("reason")
        extra = set(payload) - {"decision", "reason"}
        if (
            decision in ("allow", "deny")
            and not extra
            and (reason is None or (isinstance(reason, str) and len(reason) <= 4096))
        ):
            return decision, reason
    raise ApiError(
        422,
        "invalid_resume",
        'an approval is resumed with {"decision": "allow" | "deny", "reason"?: string}',
    )


def _never(arguments: Any, exec: Any) -> None:
    """The body of a tool defined only to check its definition."""


def _check_tools(request: AguiRequest) -> list[dict[str, Any]]:
    tools = request.tools or []
    if len(tools) > MAX_TOOLS:
        raise ApiError(422, "invalid_body", f"at most {MAX_TOOLS} client tools per run")
    out: list[dict[str, Any]] = []
    for tool in tools:
        parameters = tool.parameters if tool.parameters is not None else {"type": "object"}
        if not isinstance(parameters, dict):
            raise ApiError(422, "invalid_body", f"tool {tool.name!r}: parameters must be an object")
        try:
            define_tool(
                name=tool.name, description=tool.description, parameters=parameters, execute=_never
            )
        except ToolDefinitionError as exc:
            raise ApiError(422, "invalid_body", f"tool {tool.name!r}: {exc}") from None
        out.append({"name": tool.name, "description": tool.description, "parameters": parameters})
    if len({t["name"] for t in out}) != len(out):
        raise ApiError(422, "invalid_body", "client tool names must be unique")
    return out


def plan_input(
    request: AguiRequest,
    view: LogView,
    state: Mapping[str, Any],
    limits: AttachmentLimits = DEFAULT_LIMITS,
) -> Plan:
    """Reconcile ``request`` with the log (see the module docstring).

    Raises:
        ApiError: 422 for a resume entry naming no open interrupt of this thread, a bad
            approval payload, content no block holds or a state that is not an object;
            413 for images or files over ``limits``.
    """
    plan = Plan(tools=_check_tools(request))
    given = request.state
    if given is not None:
        if not isinstance(given, dict):
            raise ApiError(422, "invalid_body", "state must be a JSON object")
        # A fresh client sends {}: that is "no state yet", not "clear the document".
        if given != dict(state) and (given or not state):
            plan.state = given
    for entry in request.resume or []:
        call_id = entry.interrupt_id
        if call_id in view.approvals:
            if entry.status == "cancelled":
                plan.decisions.append((call_id, "deny", "cancelled by the client"))
            else:
                plan.decisions.append((call_id, *_decision(entry.payload)))
        elif call_id in view.deferred:
            if entry.status == "cancelled":
                plan.results.append(
                    {
                        "call_id": call_id,
                        "content": "the client cancelled this call",
                        "is_error": True,
                    }
                )
            elif entry.payload is not None:
                plan.results.append(
                    {"call_id": call_id, "content": _payload_text(entry.payload), "is_error": False}
                )
            else:
                continue  # the result comes as a tool message
        elif call_id in view.inputs:
            plan.inputs.append((call_id, *input_resume(entry)))
        elif call_id in view.closed or call_id in view.decided or call_id in view.answered:
            continue  # answered already (a retried request, another client): nothing to do
        else:
            raise ApiError(
                422, "invalid_resume", f"thread {request.thread_id!r} has no interrupt {call_id!r}"
            )
        plan.answered.add(call_id)
    for message in request.messages:
        if message.id in view.ids or message.id in plan.answered:
            continue
        if message.role == "user":
            plan.messages.append((message.id, agui_content(message.content, limits)))
        elif message.role == "tool":
            call_id = message.tool_call_id
            text = _content_text(message.content)
            error = message.error
            if call_id in view.deferred:
                if call_id not in plan.answered:
                    plan.results.append(
                        {
                            "call_id": call_id,
                            "content": text or error or "",
                            "is_error": error is not None,
                        }
                    )
                    plan.answered.add(call_id)
            elif view.closed.get(call_id):
                # The call was closed before this result came (a cancel, a crash): the
                # result is not lost, the model gets it as a message.
                name = view.closed[call_id]
                plan.messages.append(
                    (
                        message.id,
                        f"The client's result for the earlier call {call_id} of tool {name}, "
                        f"which arrived after that call had been closed:\n{error or text}",
                    )
                )
        # assistant, system, developer, reasoning and activity messages are the client's
        # copy of the thread: the log is its record, they are never applied.
    return plan
