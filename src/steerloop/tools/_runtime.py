"""The tool registry and the execute pipeline (prepare → dispatch → finalize)."""

from __future__ import annotations

import asyncio
import inspect
import json
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import jsonschema
import pydantic

from .._cancel import escapes
from .._hooks import Disposer, HookBus
from .._media import DEFAULT_LIMITS
from .._signal import AbortController
from ..errors import AbortedError, SessionPersistenceError
from ..llm._types import ToolSchema
from ..messages import Block, TextBlock, ToolResultMessage, UserMessage, check_json
from ..session._events import ToolErrorInfo, ToolResultEvent
from ._attachments import fit_result
from ._define import PostExecute, Tool, ToolDecision, ToolError, ToolExec, ToolResult
from ._hooks import (
    TOOLS_POST_EXECUTE,
    TOOLS_PRE_EXECUTE,
    TOOLS_RESULT,
    ToolHookPayload,
)

__all__ = [
    "MAX_ARGUMENT_DEPTH",
    "UNVALIDATED",
    "ToolPipeline",
    "ToolRegistry",
    "denied",
    "error_result",
    "parse_arguments",
    "result_blocks",
    "result_event",
    "run_continued",
]

#: Deepest nesting of containers accepted in tool arguments (the top-level object is 1).
#: Real arguments nest a handful of levels; the bound keeps every later recursive walk
#: (validation, hooks, the codec) far from the interpreter's recursion limit.
MAX_ARGUMENT_DEPTH = 256


def parse_arguments(raw: str) -> tuple[Any, str | None]:
    """The model's argument text parsed: ``(value, None)``, or ``(raw, why)`` when refused.

    ``""`` is ``{}``; invalid JSON and nesting past ``MAX_ARGUMENT_DEPTH`` are reported (the
    raw text stays in the log) and become ``INVALID_ARGS``.
    """
    if raw.strip() == "":
        return {}, None
    try:
        value = json.loads(raw)
    except RecursionError:
        return raw, f"nested deeper than {MAX_ARGUMENT_DEPTH} levels"
    except ValueError as exc:
        return raw, str(exc)
    if _depth_exceeds(value, MAX_ARGUMENT_DEPTH):
        return raw, f"nested deeper than {MAX_ARGUMENT_DEPTH} levels"
    return value, None


def _depth_exceeds(value: Any, bound: int) -> bool:
    """Whether containers nest deeper than ``bound`` (iterative: no recursion to exhaust)."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        if depth > bound:
            return True
        stack.extend((child, depth + 1) for child in children if isinstance(child, dict | list))
    return False


class _Entry:
    __slots__ = ("owner", "tool")

    def __init__(self, tool: Tool, owner: str | None) -> None:
        self.tool = tool
        self.owner = owner


class ToolRegistry:
    """Tools by name (``rt.tools``); scoped tools are visible to their own agent only."""

    def __init__(self) -> None:
        self._entries: list[_Entry] = []
        # schemas() while no registration is scoped (every agent sees the same tools); reset
        # by register/dispose. Built once instead of once per request.
        self._shared_schemas: tuple[ToolSchema, ...] | None = None

    def register(self, tool: Tool, *, owner: str | None = None) -> Disposer:
        """Make ``tool`` visible; the latest registration of a name wins."""
        if not isinstance(tool, Tool):
            raise ValueError("register() takes a Tool made by define_tool()")
        entry = _Entry(tool, owner)
        self._entries.append(entry)
        self._shared_schemas = None

        def dispose() -> None:
            if entry in self._entries:
                self._entries.remove(entry)
                self._shared_schemas = None

        return Disposer(dispose)

    def get(self, name: str, agent_id: str | None = None) -> Tool | None:
        """The tool called ``name`` as ``agent_id`` sees it (any registration when ``None``)."""
        for entry in reversed(self._entries):
            if entry.tool.name == name and (
                agent_id is None or entry.owner is None or entry.owner == agent_id
            ):
                return entry.tool
        return None

    def list(self, agent_id: str | None = None) -> tuple[Tool, ...]:
        """Visible tools, one per name, in first-registration order."""
        seen: dict[str, Tool] = {}
        for entry in self._entries:
            if agent_id is None or entry.owner is None or entry.owner == agent_id:
                seen[entry.tool.name] = entry.tool
        return tuple(seen.values())

    def schemas(self, agent_id: str | None = None) -> tuple[ToolSchema, ...]:
        """Schemas of the visible tools (the same tuple until the registry changes)."""
        cached = self._shared_schemas
        if cached is not None:
            return cached
        schemas = tuple(
            ToolSchema(name=t.name, description=t.description, parameters=t.parameters)
            for t in self.list(agent_id)
        )
        if all(e.owner is None for e in self._entries):
            self._shared_schemas = schemas
        return schemas


def result_blocks(content: str | Sequence[Block]) -> tuple[Block, ...]:
    if isinstance(content, str):
        return (TextBlock(content),)
    return tuple(content)


def result_event(
    turn: int,
    step: int,
    call_id: str,
    result: ToolResult,
    message_id: str,
    *,
    reconciled: bool | None = None,
) -> ToolResultEvent:
    """The ``tool/result`` payload recording ``result`` for call ``call_id``."""
    error = None
    if result.is_error:
        err = result.error
        code = err.code if err else "TOOL_FAILED"
        error = ToolErrorInfo(code=code, name=err.name if err else None)
    return ToolResultEvent(
        turn=turn,
        step=step,
        message=ToolResultMessage(
            id=message_id,
            call_id=call_id,
            content=result_blocks(result.content),
            is_error=result.is_error,
        ),
        error=error,
        meta=result.meta,
        reconciled=reconciled,
    )


def error_result(code: str, message: str, name: str | None = None) -> ToolResult:
    return ToolResult(content=message, is_error=True, error=ToolError(code, name))


def _normalise(value: Any) -> ToolResult:
    if isinstance(value, ToolResult):
        return value
    if isinstance(value, str):
        return ToolResult(content=value)
    check_json(value, "tool result")
    return ToolResult(content=json.dumps(value, ensure_ascii=False))


def _describe(exc: BaseException) -> str:
    return str(exc) or type(exc).__name__


UNVALIDATED: Any = object()


class ToolPipeline:
    """Runs one call through pre-execute policy, the body, and post-execute."""

    def __init__(self, hooks: HookBus) -> None:
        self._hooks = hooks
        self.attachment_limits = DEFAULT_LIMITS  # the runtime's (``Runtime.open``)

    async def prepare(
        self,
        exec: ToolExec,
        tool: Tool | None,
        parse_error: str | None,
        validated: Any = UNVALIDATED,
    ) -> ToolResult | ToolDecision | None:
        """Return a result that answers the call without running it, ``None`` to dispatch,
        or an ``ask`` decision: a person decides (the caller records the request and waits).

        ``validated`` carries arguments the caller already validated against ``tool``.
        """
        if parse_error is not None:
            return error_result("INVALID_ARGS", f"arguments are not valid JSON: {parse_error}")
        if tool is None:
            return error_result("UNKNOWN_TOOL", f"unknown tool {exec.name!r}")
        try:
            exec.arguments = (
                tool.validate(exec.arguments) if validated is UNVALIDATED else validated
            )
        except pydantic.ValidationError as exc:
            return error_result("INVALID_ARGS", f"invalid arguments: {exc}")
        except jsonschema.ValidationError as exc:
            return error_result("INVALID_ARGS", f"invalid arguments: {exc.message}")
        except Exception as exc:  # a validator of the tool's own may raise anything
            return error_result("INVALID_ARGS", f"invalid arguments: {_describe(exc)}")
        if exec.signal.aborted:
            return aborted_before_dispatch()
        if not self._hooks.has(TOOLS_PRE_EXECUTE):
            return None  # no policy: nothing to ask, no payload to build
        try:
            decision = await self._hooks.serial(TOOLS_PRE_EXECUTE, ToolHookPayload(exec))
        except BaseException as exc:
            if escapes(exc):
                raise
            return error_result(
                "TOOL_FAILED", f"pre-execute policy failed: {_describe(exc)}", type(exc).__name__
            )
        if exec.signal.aborted:
            return aborted_before_dispatch()
        if isinstance(decision, ToolDecision):
            if decision.kind == "deny":
                return denied(decision.reason)
            if decision.kind == "ask":
                return decision
        return None

    async def dispatch(self, exec: ToolExec, tool: Tool) -> ToolResult:
        """Run the body; exceptions become ``TOOL_FAILED``, a cancelled success ``ABORTED``.

        With ``tool.timeout`` the body gets a child signal that also aborts at the deadline
        (cooperative: the body still decides when to return); whatever it returns or raises
        after the deadline becomes a ``TOOL_FAILED`` result naming the timeout.
        """
        parent = exec.signal
        if parent.aborted:
            return aborted_before_dispatch()
        timer: asyncio.TimerHandle | None = None
        timed_out = False
        dispose_relay = None
        if tool.timeout is not None:
            child = AbortController()
            dispose_relay = parent.add_listener(child.abort)

            def expire() -> None:
                nonlocal timed_out
                timed_out = True
                child.abort(TimeoutError(f"tool {tool.name!r} timed out after {tool.timeout}s"))

            timer = asyncio.get_running_loop().call_later(tool.timeout, expire)
            exec.signal = child.signal
        try:
            value = tool.execute(exec.arguments, exec)
            if inspect.isawaitable(value):
                value = await value
            result = fit_result(_normalise(value), exec, self.attachment_limits)
        except BaseException as exc:
            # A foreign CancelledError (the body awaited a task someone else cancelled), a
            # GeneratorExit or any other non-Exception is the tool's failure; only what
            # belongs to the host (Ctrl-C, exit, cancelling this very task) goes through.
            if escapes(exc):
                raise
            if parent.aborted:
                return _aborted(exc)
            if timed_out:
                return _timed_out(tool)
            return error_result("TOOL_FAILED", _describe(exc), type(exc).__name__)
        finally:
            if timer is not None:
                timer.cancel()
            if dispose_relay is not None:
                dispose_relay()
            exec.signal = parent
        if parent.aborted:
            return result if result.is_error else _aborted(None)
        if timed_out:
            return _timed_out(tool)
        return result

    async def finalize(
        self, exec: ToolExec, result: ToolResult
    ) -> tuple[ToolResult, tuple[UserMessage, ...]]:
        """Apply ``tools/post-execute`` and announce ``tools/result``."""
        hooks = self._hooks
        if not hooks.has(TOOLS_POST_EXECUTE):
            # The chain is its default (accept, unchanged): skip the payloads and awaits.
            if hooks.has(TOOLS_RESULT):
                hooks.emit(TOOLS_RESULT, ToolHookPayload(exec, result))
            return result, ()
        contexts: tuple[UserMessage, ...] = ()

        async def default() -> PostExecute:
            return PostExecute.accept()

        try:
            verdict = await self._hooks.waterfall(
                TOOLS_POST_EXECUTE, ToolHookPayload(exec, result), default
            )
        except BaseException as exc:
            if escapes(exc):
                raise
            result = error_result(
                "TOOL_FAILED", f"post-execute policy failed: {_describe(exc)}", type(exc).__name__
            )
        else:
            if isinstance(verdict, PostExecute):
                contexts = verdict.additional_contexts
                if verdict.kind == "block":
                    # A policy refusal: DENIED is the runtime's code for it (EVENTS.md §5).
                    result = ToolResult(
                        content=verdict.content or "blocked by policy",
                        is_error=True,
                        error=ToolError("DENIED"),
                        meta=result.meta,
                    )
                elif verdict.content is not None:
                    result = ToolResult(
                        content=verdict.content,
                        is_error=result.is_error,
                        error=result.error,
                        concludes_turn=result.concludes_turn,
                        meta=result.meta,
                    )
        self._hooks.emit(TOOLS_RESULT, ToolHookPayload(exec, result))
        return result, contexts


async def run_continued(exec: ToolExec, body: Callable[[ToolExec], Awaitable[Any]]) -> ToolResult:
    """Run ``body`` in place of the body of a call an earlier process started (a durable
    wait: it waits for what that body was waiting for). Its outcome maps as ``dispatch``
    maps a body's — an exception is ``TOOL_FAILED``, a cancel ``ABORTED`` — but it runs even
    when the call is already cancelled: the call did start, and the wait must answer the
    cancel itself. A refused fence (``SessionPersistenceError``: the session is no longer
    ours to write) is raised, as the scheduler raises a refused gate."""
    try:
        result = _normalise(await body(exec))
    except BaseException as exc:
        if escapes(exc) or isinstance(exc, SessionPersistenceError):
            raise
        if exec.signal.aborted:
            return _aborted(exc)
        return error_result("TOOL_FAILED", _describe(exc), type(exc).__name__)
    if exec.signal.aborted:
        return result if result.is_error else _aborted(None)
    return result


def denied(reason: str | None) -> ToolResult:
    """The answer of a call a policy or a person refused (``DENIED``, the reason as content)."""
    return error_result("DENIED", reason or "denied by policy")


def aborted_before_dispatch() -> ToolResult:
    """The answer of a call cancelled before its body started."""
    return error_result(
        "ABORTED_BEFORE_DISPATCH", "the call was cancelled before it started", "AbortError"
    )


def _timed_out(tool: Tool) -> ToolResult:
    return error_result(
        "TOOL_FAILED", f"tool {tool.name!r} timed out after {tool.timeout}s", "TimeoutError"
    )


def _aborted(exc: BaseException | None) -> ToolResult:
    if exc is not None and not isinstance(exc, AbortedError):
        return error_result("TOOL_FAILED", _describe(exc), type(exc).__name__)
    return error_result("ABORTED", "the call was cancelled", "AbortError")
