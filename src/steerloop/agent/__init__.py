"""Agents: the inbox, the registry, creation and teardown, and the loop."""

from ._agent import Agent, live_agent
from ._attachments import check_limits
from ._client_calls import CLIENT_ERROR, ClientCallError, ClientTool
from ._decisions import PreStepDecision, RequestErrorAction
from ._factory import AgentHandle, AgentRegistry, AgentScope
from ._inbox import Inbox
from ._inputs import check_input_answer
from ._options import AgentOptions, validate_call
from ._run import TurnResult, TurnStream, sum_usage

__all__ = [
    "CLIENT_ERROR",
    "Agent",
    "AgentHandle",
    "AgentOptions",
    "AgentRegistry",
    "AgentScope",
    "ClientCallError",
    "ClientTool",
    "Inbox",
    "PreStepDecision",
    "RequestErrorAction",
    "TurnResult",
    "TurnStream",
    "check_input_answer",
    "check_limits",
    "live_agent",
    "sum_usage",
    "validate_call",
]
