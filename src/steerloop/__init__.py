"""steerloop: a durable, steerable agent-loop runtime.

Layers, imports pointing only down (``tests/test_layers.py`` pins it, ``TYPE_CHECKING`` and
function-local imports included):

1. primitives — ``errors``, ``_signal``, ``_cancel``, ``_ids``, ``messages``, ``_model`` (the
   failures, usage and stream chunks the log and the model share), ``_hooks``, ``_records``
2. ``session`` — the append-only log, its folds (surface, inbox), codec, repair, ``store/``
3. ``llm`` — the adapter seam, the provider-stream template, the failure table, adapters
4. ``tools`` and ``prompt`` — tool definitions, registry and pipeline; system prompt
5. ``agent`` — inbox, phase machine, turn → pre-step → step → attempt → settle, scheduler,
   recovery, registry; it sees the runtime only as the ``LoopServices`` record
6. ``_runtime`` — the composition root, the only module that wires every layer
7. plugins on the public hooks — ``llm.retry``, ``llm.config``, ``goals``, ``subagents``,
   ``workspace``, ``mcp``, ``telemetry``, ``context``, ``service``, ``testing``, ``evals``
8. ``cli``
"""

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ._cancel import CancelCause
    from ._hooks import Disposer
    from ._runtime import Runtime
    from ._signal import (
        AbortController,
        AbortSignal,
    )
    from .agent import (
        Agent,
        AgentHandle,
        AgentOptions,
        AgentScope,
        Inbox,
        PreStepDecision,
        RequestErrorAction,
        TurnResult,
        TurnStream,
    )
    from .errors import (
        AbortedError,
        LlmError,
        SessionConflictError,
        SessionCorruptError,
        SessionPersistenceError,
        SessionPersistenceNotFoundError,
        SessionStorageError,
        SteerloopError,
        ToolDefinitionError,
    )
    from .llm import (
        CallConfig,
        LlmFailure,
        RetryPolicy,
    )
    from .messages import (
        AssistantMessage,
        Block,
        FileBlock,
        ImageBlock,
        Message,
        MessageSource,
        ReasoningBlock,
        SystemMessage,
        TextBlock,
        ToolCallBlock,
        ToolResultMessage,
        UserMessage,
        user_message,
    )
    from .session import (
        InputRequest,
        Session,
        SessionEvent,
        TurnEndReason,
    )
    from .tools import (
        PostExecute,
        Tool,
        ToolDecision,
        ToolError,
        ToolExec,
        ToolResult,
        define_tool,
        tool,
    )

__all__ = [
    "AbortController",
    "AbortSignal",
    "AbortedError",
    "Agent",
    "AgentHandle",
    "AgentOptions",
    "AgentScope",
    "AssistantMessage",
    "Block",
    "CallConfig",
    "CancelCause",
    "Disposer",
    "FileBlock",
    "ImageBlock",
    "Inbox",
    "InputRequest",
    "LlmError",
    "LlmFailure",
    "Message",
    "MessageSource",
    "PostExecute",
    "PreStepDecision",
    "ReasoningBlock",
    "RequestErrorAction",
    "RetryPolicy",
    "Runtime",
    "Session",
    "SessionConflictError",
    "SessionCorruptError",
    "SessionEvent",
    "SessionPersistenceError",
    "SessionPersistenceNotFoundError",
    "SessionStorageError",
    "SteerloopError",
    "SystemMessage",
    "TextBlock",
    "Tool",
    "ToolCallBlock",
    "ToolDecision",
    "ToolDefinitionError",
    "ToolError",
    "ToolExec",
    "ToolResult",
    "ToolResultMessage",
    "TurnEndReason",
    "TurnResult",
    "TurnStream",
    "UserMessage",
    "define_tool",
    "tool",
    "user_message",
]

# Loaded on first use (PEP 562), so ``import steerloop.cli`` (``steerloop --version``, ``--help``)
# does not import the runtime; the first public name asked for loads them all at once.
_HOMES: dict[str, tuple[str, ...]] = {
    "._cancel": ("CancelCause",),
    "._hooks": ("Disposer",),
    "._runtime": ("Runtime",),
    "._signal": (
        "AbortController",
        "AbortSignal",
    ),
    ".agent": (
        "Agent",
        "AgentHandle",
        "AgentOptions",
        "AgentScope",
        "Inbox",
        "PreStepDecision",
        "RequestErrorAction",
        "TurnResult",
        "TurnStream",
    ),
    ".errors": (
        "AbortedError",
        "LlmError",
        "SessionConflictError",
        "SessionCorruptError",
        "SessionPersistenceError",
        "SessionPersistenceNotFoundError",
        "SessionStorageError",
        "SteerloopError",
        "ToolDefinitionError",
    ),
    ".llm": (
        "CallConfig",
        "LlmFailure",
        "RetryPolicy",
    ),
    ".messages": (
        "AssistantMessage",
        "Block",
        "FileBlock",
        "ImageBlock",
        "Message",
        "MessageSource",
        "ReasoningBlock",
        "SystemMessage",
        "TextBlock",
        "ToolCallBlock",
        "ToolResultMessage",
        "UserMessage",
        "user_message",
    ),
    ".session": (
        "InputRequest",
        "Session",
        "SessionEvent",
        "TurnEndReason",
    ),
    ".tools": (
        "PostExecute",
        "Tool",
        "ToolDecision",
        "ToolError",
        "ToolExec",
        "ToolResult",
        "define_tool",
        "tool",
    ),
}


def __getattr__(name: str) -> object:
    if name not in __all__:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    _load()
    return globals()[name]


def _load() -> None:
    import importlib

    for module, names in _HOMES.items():
        home = importlib.import_module(module, __name__)
        for name in names:
            globals()[name] = getattr(home, name)
    _rehome(__all__)


def _rehome(names: list[str]) -> None:
    """Give every exported class and function the public ``__module__`` ``steerloop``, so
    reprs and tracebacks name ``steerloop.Tool``, not a private module path.

    String annotations (``from __future__ import annotations``) are resolved against an
    object's ``__module__``; they are resolved first, in their own module, so
    ``typing.get_type_hints`` and pydantic keep working after the move (a name imported
    only for type checking stays a string).
    """
    import inspect
    import sys

    for name in names:
        obj = globals()[name]
        if not (inspect.isclass(obj) or inspect.isfunction(obj)):
            continue  # type aliases (``Message``, ``Block``) have no module of their own
        home = vars(sys.modules[obj.__module__])
        owners = (
            [obj]
            if inspect.isfunction(obj)
            else [klass for klass in obj.__mro__ if klass.__module__ == obj.__module__]
        )
        for owner in owners:
            own = inspect.get_annotations(owner)
            if own:
                local = dict(vars(owner)) if inspect.isclass(owner) else None
                resolved = {key: _resolve(value, home, local) for key, value in own.items()}
                if inspect.isclass(owner):
                    type.__setattr__(owner, "__annotations__", resolved)
                    # pydantic reads a dataclass field's own copy of the annotation.
                    for field in owner.__dict__.get("__dataclass_fields__", {}).values():
                        if isinstance(field.type, str):
                            field.type = resolved.get(field.name, field.type)
                else:
                    owner.__annotations__ = resolved
        obj.__module__ = __name__


def _resolve(value: object, home: dict[str, object], local: dict[str, object] | None) -> object:
    if not isinstance(value, str):
        return value
    try:
        return eval(value, home, local)
    except NameError:
        return value
