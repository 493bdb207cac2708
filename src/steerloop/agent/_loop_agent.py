"""``LoopAgent``: the agent as the loop modules (driver, step, scheduler, settle, run) see it.

``Agent`` imports the loop modules to run; they name this protocol instead of ``Agent`` so the
agent layer has no import cycle. The private members are the driver's side of the phase
machine, used only by ``_driver`` (open a turn, converge).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from ..tools._agent_ref import AgentRef

if TYPE_CHECKING:
    from ._approvals import Approvals
    from ._client_calls import ClientCalls
    from ._inbox import Inbox
    from ._inputs import Inputs
    from ._options import AgentOptions
    from ._phase import PhaseMachine
    from ._request import RequestBuilder
    from ._services import LoopServices

__all__ = ["LoopAgent"]


class LoopAgent(AgentRef, Protocol):
    """What a turn uses of its agent."""

    @property
    def options(self) -> AgentOptions: ...
    @property
    def inbox(self) -> Inbox: ...
    @property
    def services(self) -> LoopServices: ...
    @property
    def meta(self) -> dict[str, Any]: ...
    @property
    def parent(self) -> LoopAgent | None: ...
    @property
    def _requests(self) -> RequestBuilder: ...

    @property
    def phase(self) -> PhaseMachine: ...
    @property
    def approvals(self) -> Approvals: ...
    @property
    def client_calls(self) -> ClientCalls: ...
    @property
    def inputs(self) -> Inputs: ...

    def report_error(self, turn: int, step: int, error: BaseException) -> None: ...
