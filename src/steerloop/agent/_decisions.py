"""Hook payloads and the decisions listeners return to the loop."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from .._records import fast_init
from .._signal import AbortSignal
from ..llm._types import LlmFailure, RetryPolicy
from ..messages import UserMessage

if TYPE_CHECKING:
    # Payloads name the protocol: this module sits below ``_agent`` (no import cycle).
    from ..tools._agent_ref import AgentRef as Agent

__all__ = [
    "AgentPayload",
    "ClaimedPayload",
    "CompactPayload",
    "ErrorPayload",
    "InboxMessagePayload",
    "OfAgent",
    "PreStepDecision",
    "PreStepPayload",
    "RequestErrorAction",
    "RequestErrorPayload",
    "RequestPayload",
    "SessionStartPayload",
    "StatusPayload",
    "StreamFrame",
    "StreamFramePayload",
    "TurnStoppingPayload",
]


@fast_init
@dataclass(frozen=True, slots=True)
class PreStepDecision:
    """``agent/pre-step`` result: ``enter(messages)`` or ``reject(reason)``."""

    kind: Literal["enter", "reject"]
    messages: tuple[UserMessage, ...] = ()
    starts_request_series: bool = False
    reason: str | None = None  # a reject's, recorded as ``turn/end.reason.detail``

    @classmethod
    def enter(
        cls, messages: Sequence[UserMessage], starts_request_series: bool = False
    ) -> PreStepDecision:
        batch = tuple(messages)
        if not all(isinstance(m, UserMessage) for m in batch):
            raise ValueError("PreStepDecision.enter() takes UserMessages")
        return cls("enter", batch, starts_request_series)

    @classmethod
    def reject(cls, reason: str | None = None) -> PreStepDecision:
        if reason is not None and not isinstance(reason, str):
            raise ValueError("PreStepDecision.reject() takes a str reason")
        return cls("reject", reason=reason)


@fast_init
@dataclass(frozen=True, slots=True)
class RequestErrorAction:
    """``agent/request-error`` result: ``retry()``; return ``None`` for terminal."""

    kind: Literal["retry"] = "retry"

    @classmethod
    def retry(cls) -> RequestErrorAction:
        return cls()


class OfAgent:
    """The owner of a per-agent payload is its ``agent`` (``HookPayload``); plugin payloads
    with an ``agent`` field derive from it too."""

    __slots__ = ()
    agent: Agent

    @property
    def owner(self) -> str:
        """The id of the agent the payload belongs to (scoped listeners see their own)."""
        return self.agent.id


@fast_init
@dataclass(frozen=True, slots=True)
class AgentPayload(OfAgent):
    """``agent/created`` and ``agent/disposed``."""

    agent: Agent


@fast_init
@dataclass(frozen=True, slots=True)
class SessionStartPayload(OfAgent):
    agent: Agent
    source: Literal["startup", "resume"]


@fast_init
@dataclass(frozen=True, slots=True)
class StatusPayload(OfAgent):
    agent: Agent
    status: Literal["idle", "running"]


@fast_init
@dataclass(frozen=True, slots=True)
class ErrorPayload(OfAgent):
    agent: Agent
    turn: int
    step: int
    error: BaseException


@fast_init
@dataclass(frozen=True, slots=True)
class InboxMessagePayload(OfAgent):
    """``agent/inbox/inserted`` and ``agent/inbox/discarded``."""

    agent: Agent
    message: UserMessage


@fast_init
@dataclass(frozen=True, slots=True)
class ClaimedPayload(OfAgent):
    agent: Agent
    message: UserMessage
    turn: int


@fast_init
@dataclass(frozen=True, slots=True)
class PreStepPayload(OfAgent):
    agent: Agent
    messages: tuple[UserMessage, ...]
    turn: int
    step: int
    signal: AbortSignal


@fast_init
@dataclass(frozen=True, slots=True)
class RequestPayload(OfAgent):
    agent: Agent
    turn: int
    step: int
    signal: AbortSignal


@fast_init
@dataclass(frozen=True, slots=True)
class RequestErrorPayload(OfAgent):
    agent: Agent
    turn: int
    step: int
    provider: str
    failure: LlmFailure
    retry_policy: RetryPolicy | None
    signal: AbortSignal


@fast_init
@dataclass(frozen=True, slots=True)
class CompactPayload(OfAgent):
    """``agent/compact``: compact ``agent``'s history now (the maintenance job's signal)."""

    agent: Agent
    signal: AbortSignal


@fast_init
@dataclass(frozen=True, slots=True)
class TurnStoppingPayload(OfAgent):
    agent: Agent
    turn: int
    signal: AbortSignal


@fast_init
@dataclass(frozen=True, slots=True, kw_only=True)
class StreamFrame:
    """A live frame of ``agent/assistant-stream``: ``start``, ``chunk`` or ``end``."""

    kind: Literal["start", "chunk", "end"]
    attempt_id: str
    revision: int
    turn: int | None = None
    step: int | None = None
    index: int | None = None
    time: int | None = None
    chunk: Any = None
    outcome: Any = None


@fast_init
@dataclass(frozen=True, slots=True)
class StreamFramePayload(OfAgent):
    agent: Agent
    frame: StreamFrame
