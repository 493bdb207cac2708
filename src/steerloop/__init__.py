"""steerloop: a durable, steerable agent-loop runtime.

Layers, imports pointing only down:

1. primitives — ``_signal`` (cooperative cancellation), ``_ids``, ``messages``, ``errors``
2. ``session`` — the append-only event log and its surface projection
3. ``llm`` — adapters, requests, stream chunks, the block assembler
4. ``tools`` and ``prompt`` — tool definitions and pipeline; system prompt assembly
5. ``agent`` — inbox, registry and factory, the loop (driver → step → scheduler)
6. ``_runtime`` — the composition root that wires them (``Runtime.open()``)
"""

from ._cancel import CancelCause
from ._hooks import Disposer
from ._runtime import Runtime
from ._signal import AbortController, AbortSignal
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
from .llm import CallConfig, LlmFailure, RetryPolicy
from .messages import (
    AssistantMessage,
    Block,
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
from .session import Session, SessionEvent, TurnEndReason
from .tools import PostExecute, Tool, ToolDecision, ToolError, ToolExec, ToolResult, define_tool

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
    "Inbox",
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
    "user_message",
]
