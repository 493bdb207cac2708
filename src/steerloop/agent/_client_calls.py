"""Client tools as deferred calls: tools a client (an AG-UI frontend) declares for a run,
offered to the model like any tool, whose bodies run on the client.

A call to one is started like any call (``tool/call``, the pre-execute policy), then its
body appends ``tool/deferred`` and waits for ``answer``; the answer is the body's result,
so the scheduler commits it as the call's ``tool/result`` and the turn continues. The wait
races the turn's signal: a cancel answers the call like any call cancelled in its body
(``ABORTED``). Client tools are exclusive (never concurrency-safe): while one waits, every
earlier call has committed and no later one has started, so a waiting call is a clean point
for a client to leave the run and come back with the result.

The wait itself lives in the process that runs the turn; ``tool/deferred`` and the result
are in the log. A crash closes the call as restore repair closes any started call
(``TOOL_OUTCOME_UNKNOWN``); a result that arrives after that is not lost (the service
sends it to the model as a message).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .._hooks import Disposer
from ..errors import ToolDefinitionError
from ..session._events import ToolDeferred
from ..tools._define import Tool, ToolError, ToolExec, ToolResult, define_tool

if TYPE_CHECKING:
    from ..session._session import Session
    from ..tools._runtime import ToolRegistry

__all__ = ["CLIENT_ERROR", "ClientCallError", "ClientCalls", "ClientTool"]

CLIENT_ERROR = "CLIENT_ERROR"
"""``tool/result.error.code`` of a call the client answered with an error or cancelled."""


class ClientCallError(ValueError):
    """An answer for a call that does not wait for one here, or a client tool refused."""


@dataclass(frozen=True, slots=True)
class ClientTool:
    """A tool a client declares: its body runs on the client."""

    name: str
    description: str
    parameters: Mapping[str, Any] = field(default_factory=lambda: {"type": "object"})


class _Waiting:
    __slots__ = ("future", "record")

    def __init__(self, record: ToolDeferred, future: asyncio.Future[ToolResult]) -> None:
        self.record = record
        self.future = future


class ClientCalls:
    """One agent's client tools (the current offer) and the calls waiting for the client."""

    def __init__(self, agent_id: str, session: Session, tools: ToolRegistry) -> None:
        self._agent_id = agent_id
        self._session = session
        self._registry = tools
        self._offered: dict[str, Disposer] = {}
        self._waiting: dict[str, _Waiting] = {}

    @property
    def offered(self) -> tuple[str, ...]:
        """Names of the client tools the model is offered now."""
        return tuple(self._offered)

    @property
    def pending(self) -> tuple[ToolDeferred, ...]:
        """Calls waiting for their result from the client, in call order."""
        return tuple(w.record for w in self._waiting.values() if not w.future.done())

    def offer(self, tools: Sequence[ClientTool]) -> None:
        """Make ``tools`` the client tools of this agent, replacing the previous offer.

        Raises:
            ClientCallError: a name used twice, or the name of a server tool the agent has,
                or a tool ``define_tool`` refuses (bad name or schema); nothing changes.
        """
        names = [t.name for t in tools]
        if len(set(names)) != len(names):
            raise ClientCallError("client tool names must be unique")
        for name in names:
            existing = self._registry.get(name, self._agent_id)
            if existing is not None and name not in self._offered:
                raise ClientCallError(f"{name!r} is a server tool; a client tool cannot replace it")
        built: list[Tool[Any]] = []
        for tool in tools:
            try:
                built.append(
                    define_tool(
                        name=tool.name,
                        description=tool.description,
                        parameters=dict(tool.parameters),
                        execute=self._wait,
                        concurrency_safe=False,
                    )
                )
            except ToolDefinitionError as exc:
                raise ClientCallError(f"client tool {tool.name!r}: {exc}") from None
        self.withdraw()
        for tool_def in built:
            self._offered[tool_def.name] = self._registry.register(tool_def, owner=self._agent_id)

    def withdraw(self) -> None:
        """Offer no client tool any more (calls already waiting keep waiting)."""
        offered, self._offered = self._offered, {}
        for dispose in offered.values():
            dispose()

    def answer(
        self, call_id: str, content: str, *, is_error: bool = False, name: str | None = None
    ) -> None:
        """Give a waiting call its result (committed by the scheduler as its ``tool/result``).

        Raises:
            ClientCallError: ``call_id`` does not wait for a result in this process.
        """
        waiting = self._waiting.get(call_id)
        if waiting is None or waiting.future.done():
            raise ClientCallError(f"call {call_id!r} does not wait for a client result")
        error = ToolError(CLIENT_ERROR, name) if is_error else None
        waiting.future.set_result(ToolResult(content=content, is_error=is_error, error=error))

    async def _wait(self, arguments: Any, exec: ToolExec) -> ToolResult:
        record = ToolDeferred(
            turn=exec.turn,
            step=exec.step,
            call_id=exec.call_id,
            name=exec.name,
            arguments=exec.raw_arguments,
        )
        future: asyncio.Future[ToolResult] = asyncio.get_running_loop().create_future()
        self._waiting[exec.call_id] = _Waiting(record, future)
        try:
            self._session.append(record)
            return await exec.signal.race(future)
        finally:
            self._waiting.pop(exec.call_id, None)
