"""Live agents, parent/child edges, and the initiator carried in a ``contextvars`` variable."""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator
from typing import TYPE_CHECKING, Generic, TypeVar

from ..tools._agent_ref import AgentRef

if TYPE_CHECKING:
    from ._loop_agent import LoopAgent as Agent

__all__ = ["LiveAgents", "current_initiator", "initiator_context", "without_initiator"]

A = TypeVar("A", bound=AgentRef)

_initiator: contextvars.ContextVar[Agent | None] = contextvars.ContextVar(
    "steerloop_initiator", default=None
)


def current_initiator() -> Agent | None:
    return _initiator.get()


@contextlib.contextmanager
def initiator_context(agent: Agent | None) -> Iterator[None]:
    """Attribute work done (and tasks created) inside the block to ``agent``."""
    token = _initiator.set(agent)
    try:
        yield
    finally:
        _initiator.reset(token)


def without_initiator() -> contextlib.AbstractContextManager[None]:
    """Host-driven work: attributed to nobody, including tasks created inside."""
    return initiator_context(None)


class LiveAgents(Generic[A]):
    """The registry's tables: agents by id and children by parent id."""

    def __init__(self) -> None:
        self.agents: dict[str, A] = {}
        self.children: dict[str, list[A]] = {}

    def add(self, agent: A) -> None:
        self.agents[agent.id] = agent
        if agent.parent is not None:
            self.children.setdefault(agent.parent.id, []).append(agent)

    def remove(self, agent: A) -> None:
        if self.agents.get(agent.id) is agent:
            del self.agents[agent.id]
        if agent.parent is not None:
            siblings = self.children.get(agent.parent.id, [])
            if agent in siblings:
                siblings.remove(agent)
            if not siblings:
                self.children.pop(agent.parent.id, None)
