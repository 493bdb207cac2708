"""Agents: the inbox, the registry, creation and teardown, and the loop."""

from ._agent import Agent
from ._decisions import PreStepDecision, RequestErrorAction
from ._factory import AgentHandle, AgentRegistry, AgentScope
from ._inbox import Inbox
from ._options import AgentOptions
from ._run import TurnResult, TurnStream

__all__ = [
    "Agent",
    "AgentHandle",
    "AgentOptions",
    "AgentRegistry",
    "AgentScope",
    "Inbox",
    "PreStepDecision",
    "RequestErrorAction",
    "TurnResult",
    "TurnStream",
]
