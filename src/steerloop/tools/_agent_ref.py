"""``AgentRef``: what layers below the agent see of an agent (tool calls, hook payloads).

The agent layer sits above tools, so a ``ToolExec`` or a hook payload cannot name ``Agent``;
they name this protocol, which ``steerloop.agent.Agent`` satisfies.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal, Protocol

if TYPE_CHECKING:
    from .._cancel import CancelCause
    from ..messages import UserMessage
    from ..session._session import Session

__all__ = ["AgentRef"]


class AgentRef(Protocol):
    """An agent as tools and hook listeners use it: identity, log, shared state, sends,
    cancel."""

    @property
    def id(self) -> str: ...
    @property
    def session(self) -> Session: ...
    @property
    def parent(self) -> AgentRef | None: ...
    @property
    def status(self) -> Literal["idle", "running"]: ...
    @property
    def state(self) -> Mapping[str, Any]: ...

    def update_state(self, patch: list[dict[str, Any]]) -> int: ...

    def followup(self, message: UserMessage) -> int: ...
    def steer(self, message: UserMessage) -> int: ...
    def inject(self, message: UserMessage) -> int: ...
    def cancel(self, cause: CancelCause, keep_inbox: bool = False) -> None: ...
    async def when_idle(self) -> None: ...
