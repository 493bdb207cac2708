"""How a replay answers tool calls: from the recording, or live, or ``NOT_RECORDED``.

The replay agent gets a *stand-in* for every tool the recording offered and every tool the
runtime shows it, registered in its own scope (the latest registration of a name wins), so
no call reaches a real body unless the replay lets it. A stand-in answers a call whose name
and canonical arguments match a recorded call of the same turn with that call's recorded
result (and the context it deferred); any other call is ``NOT_RECORDED`` — or, with
``tools="live"``, runs the real tool when it only reads (``concurrency_safe``), or when side
effects are allowed.

Approvals: a matched call whose recording asked a person is asked again
(``ToolDecision.ask``) and decided as recorded; any other approval request during the replay
is denied with a reason (no person is asked).
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable, Collection, Iterable, Mapping
from typing import Any, Literal

from ..agent import Agent, AgentScope
from ..errors import ToolDefinitionError
from ..hooks import ApprovalHookPayload
from ..tools import Tool, ToolDecision, ToolError, ToolExec, ToolResult, define_tool
from ._recording import Call, CallKey, Matcher, Turn, call_key
from ._records import Answer

__all__ = ["NEW_APPROVAL", "NOT_RECORDED", "NOT_RECORDED_TEXT", "REPLAY_BY", "ToolAnswers"]

NOT_RECORDED = "NOT_RECORDED"
NOT_RECORDED_TEXT = "this tool is unavailable during replay"
NEW_APPROVAL = "a new approval request during a replay: no person is asked, so it is denied"
#: ``tool/approval-decided.by`` of the decisions a replay makes.
REPLAY_BY = "steerloop/replay"
_ANY_OBJECT: Mapping[str, Any] = {"type": "object"}


class ToolAnswers:
    """The stand-ins of one replay agent and what each call was answered with."""

    def __init__(
        self,
        recorded_turn: Callable[[int], Turn | None],
        *,
        mode: Literal["recorded", "live"],
        allow_side_effects: bool,
    ) -> None:
        self._recorded_turn = recorded_turn
        self._mode = mode
        self._allow_side_effects = allow_side_effects
        self.matcher = Matcher()
        self.answered: dict[CallKey, Answer] = {}
        self.standins: dict[str, Tool] = {}
        self.tool_executions = 0
        self.not_recorded = 0
        self.approvals_replayed = 0
        self.approvals_denied = 0

    # --- composition ------------------------------------------------------------------

    def register(
        self,
        scope: AgentScope,
        visible: Iterable[Tool],
        schemas: Mapping[str, Mapping[str, Any]],
        concurrent: Collection[str],
    ) -> None:
        """A stand-in for each recorded tool (its recorded schema) and each visible one.

        A stand-in is scheduled as its tool was (so the replay's log interleaves calls as the
        recording did): the visible tool's ``concurrency_safe``, else concurrent when the
        recording ran it beside another call (``concurrent``).
        """
        live = {tool.name: tool for tool in visible}
        for name in [*schemas, *(n for n in live if n not in schemas)]:
            standin = self._standin(name, schemas.get(name), live.get(name), name in concurrent)
            scope.tools.register(standin)
            self.standins[name] = standin

    def _standin(
        self, name: str, schema: Mapping[str, Any] | None, live: Tool | None, overlapped: bool
    ) -> Tool:
        if schema is not None:
            description = str(schema.get("description") or "")
            parameters = schema.get("parameters")
        else:
            assert live is not None
            description, parameters = live.description, live.parameters
        runs = live if self._mode == "live" else None

        async def execute(args: Any, exec: ToolExec) -> Any:
            return await self._execute(runs, exec)

        def safe(args: Any) -> bool:
            return _reads(live, args) if live is not None else overlapped

        def build(params: Mapping[str, Any]) -> Tool:
            return define_tool(
                name=name,
                description=description,
                parameters=params,
                execute=execute,
                concurrency_safe=safe,
                timeout=runs.timeout if runs is not None else None,
            )

        try:
            return build(parameters if isinstance(parameters, Mapping) else _ANY_OBJECT)
        except ToolDefinitionError:
            # A recorded schema this build's validator refuses: the model still gets the tool.
            return build(_ANY_OBJECT)

    # --- the pipeline's hooks -----------------------------------------------------------

    def match(self, exec: ToolExec) -> Call | None:
        at = (exec.turn, exec.step, exec.call_id)
        key = call_key(exec.name, exec.raw_arguments)
        return self.matcher.match(self._recorded_turn(exec.turn), at, key)

    def pre_execute(self, exec: ToolExec, tool: Tool | None) -> ToolDecision | None:
        """Ask again where the recording asked; refuse what no stand-in covers."""
        if tool is not None and tool is not self.standins.get(exec.name):
            # Registered after the replay began, so no stand-in shadows it.
            if self._may_run(tool, exec.raw_arguments):
                self._answer(exec, "live")
                self.tool_executions += 1
                return None
            self._answer(exec, "not-recorded")
            self.not_recorded += 1
            return ToolDecision.deny(NOT_RECORDED_TEXT)
        call = self.match(exec)
        if call is not None and call.approval is not None and call.approval.decision:
            return ToolDecision.ask(call.approval.reason)
        return None

    def on_approval(self, agent: Agent, payload: ApprovalHookPayload) -> None:
        """Decide a held call: as recorded, or deny a request the recording never had."""
        exec = payload.exec
        call = self.match(exec)
        approval = call.approval if call is not None else None
        if approval is not None and approval.decision is not None:
            decision, reason = approval.decision, approval.decision_reason
            self.approvals_replayed += 1
            self._answer(exec, "recording")
        elif call is not None:
            # Another policy asks about a call the recording answers: nothing will run.
            decision, reason = "allow", "answered from the recording during a replay"
        else:
            decision, reason = "deny", NEW_APPROVAL
            self.approvals_denied += 1
            self._answer(exec, "refused")
        agent.decide_approval(exec.call_id, decision, reason=reason, by=REPLAY_BY)

    # --- the stand-in's body -----------------------------------------------------------

    async def _execute(self, live: Tool | None, exec: ToolExec) -> Any:
        call = self.match(exec)
        if call is not None and call.result is not None:
            self._answer(exec, "recording")
            for message in call.deferred:
                exec.defer_context(message)
            return _recorded_result(call)
        if live is not None and self._may_run(live, exec.raw_arguments):
            self._answer(exec, "live")
            self.tool_executions += 1
            return await _run_live(live, exec)
        self._answer(exec, "not-recorded")
        self.not_recorded += 1
        return ToolResult(content=NOT_RECORDED_TEXT, is_error=True, error=ToolError(NOT_RECORDED))

    def _answer(self, exec: ToolExec, answer: Answer) -> None:
        self.answered[(exec.turn, exec.step, exec.call_id)] = answer

    def _may_run(self, tool: Tool, raw: str) -> bool:
        if self._mode != "live":
            return False
        if self._allow_side_effects:
            return True
        try:
            return _reads(tool, json.loads(raw) if raw.strip() else {})
        except ValueError:
            return False


def _reads(tool: Tool, args: Any) -> bool:
    """Whether ``tool`` called with ``args`` only reads (its ``concurrency_safe`` answer)."""
    try:
        return tool.is_concurrency_safe(tool.validate(args))
    except Exception:  # arguments its own schema refuses: not known to be a read
        return False


def _recorded_result(call: Call) -> ToolResult:
    assert call.result is not None
    message, error = call.result.message, call.result.error
    return ToolResult(
        content=message.content,
        is_error=message.is_error,
        error=ToolError(error.code, error.name) if error is not None else None,
        meta=call.result.meta,
    )


async def _run_live(tool: Tool, exec: ToolExec) -> Any:
    """Run the real ``tool`` for ``exec``: its own validation, then its body."""
    raw = exec.raw_arguments
    try:
        args = tool.validate(json.loads(raw) if raw.strip() else {})
    except Exception as exc:
        return ToolResult(
            content=f"invalid arguments: {exc}", is_error=True, error=ToolError("INVALID_ARGS")
        )
    exec.arguments = args
    value = tool.execute(args, exec)
    if inspect.isawaitable(value):
        value = await value
    return value
