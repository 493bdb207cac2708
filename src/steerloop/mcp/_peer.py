"""What a server may ask of us: input from a person, a sample of our model, our roots.

``Peer`` hands the SDK its callbacks (``client_options``). An ``elicitation/create`` during a
call becomes a durable input request of the call's agent (``agent.inputs``): the call waits,
its timeout standing still, until the request is answered (``agent.answer_input``) or the
call is cancelled (answered ``cancel``). The same callback serves the 2026-07-28 input
rounds, which the SDK dispatches from the calling task.

The seam for a transport that drives the 2026-07-28 input rounds itself (to finish a call
after a restart, on whichever process owns the session then): it calls
``Peer.elicit(params, resume=state)`` from the calling task, which records ``state`` (its
``requestState`` and the round's key, say) in ``input/requested.resume`` and returns the
person's answer. Such a request is a durable wait (``session/_waits``): after a restart,
restore repair keeps its call open, the resumed agent waits for the answer again
(``agent.answer_input`` answers it as before) and hands it with ``resume`` to the
``InputResumer`` the transport registered for its server
(``rt.loop_services.resumers.register(name, resumer)``), whose result is the call's.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import mcp_types as types
from mcp.client.session import ClientRequestContext

from ..agent import Agent
from ..errors import AbortedError
from ..ids import new_id
from ..session.events import InputRequest
from ._calls import CallContext, InFlight
from ._config import MCPServer
from ._limits import json_size
from ._sampling import sample

__all__ = ["Peer"]

_log = logging.getLogger("steerloop.mcp")


def _refusal(message: str) -> types.ErrorData:
    return types.ErrorData(code=types.INVALID_REQUEST, message=message)


class Peer:
    """The client side of a server's requests and notifications, for one connection."""

    def __init__(
        self,
        server: MCPServer,
        in_flight: InFlight,
        roots: Sequence[Path],
        on_resource_updated: Callable[[str], None],
    ) -> None:
        self.server = server
        self.in_flight = in_flight
        self.roots = tuple(roots)
        self._on_resource_updated = on_resource_updated

    def client_options(self) -> dict[str, Any]:
        """Keyword arguments of the SDK ``Client``: the capabilities steerloop declares."""
        options: dict[str, Any] = {"elicitation_callback": self._elicit}
        if self.server.sampling != "deny":
            options["sampling_callback"] = self._sample
        if self.roots:
            options["list_roots_callback"] = self._list_roots
        return options

    def notified(self, message: Any) -> None:
        """A server notification: a resource update is reported, nothing is re-read."""
        if isinstance(message, types.ResourceUpdatedNotification):
            self.resource_updated(str(message.params.uri))

    def resource_updated(self, uri: str) -> None:
        """The server said ``uri`` changed (a notification, or a 2026-07-28 listen event)."""
        self._on_resource_updated(uri)

    def attribute(self, meta: Any, what: str) -> tuple[CallContext, Agent] | str:
        """The call (and its agent) a server's request (its ``_meta``) belongs to, or why it
        has none."""
        call, why = self.in_flight.attribute(meta)
        if call is None:
            _log.warning("MCP server %r: %s refused: %s", self.server.name, what, why)
            return f"steerloop refused {what}: {why}"
        agent = call.exec.agent
        if not isinstance(agent, Agent):
            return f"steerloop refused {what}: the call has no steerloop agent to ask"
        return call, agent

    async def ask(
        self, call: CallContext, agent: Agent, request: InputRequest
    ) -> types.ElicitResult | types.ErrorData:
        """Write ``request`` for ``agent`` and wait (the call's clock stopped) for its answer."""
        try:
            with call.deadline.paused():
                answer = await agent.inputs.wait(request, call.signal)
        except ValueError as exc:  # a schema that is not one of an object
            return types.ErrorData(code=types.INVALID_PARAMS, message=str(exc))
        except AbortedError:
            return types.ElicitResult(action="cancel")
        content = None if answer.content is None else dict(answer.content)
        return types.ElicitResult(action=answer.action, content=content)

    async def _elicit(
        self, ctx: ClientRequestContext, params: types.ElicitRequestParams
    ) -> types.ElicitResult | types.ErrorData:
        return await self.elicit(params, meta=ctx.meta)

    async def elicit(
        self, params: types.ElicitRequestParams, *, meta: Any = None, resume: Any = None
    ) -> types.ElicitResult | types.ErrorData:
        """Ask the person behind the current call (``resume``: opaque JSON recorded with the
        request, for a transport that can finish the call after a restart)."""
        found = self.attribute(meta, "a request for input")
        if isinstance(found, str):
            return _refusal(found)
        call, agent = found
        limit = self.server.limits.max_schema_bytes
        schema = (
            params.requested_schema if isinstance(params, types.ElicitRequestFormParams) else None
        )
        size = json_size({"message": params.message, "schema": schema})
        if size > limit:
            return _refusal(
                f"steerloop refused a request for input of {size:,} bytes "
                f"(max_schema_bytes={limit:,})"
            )
        request = InputRequest(
            id=new_id("input"),
            server=self.server.name,
            message=params.message,
            schema=schema,
            url=params.url if isinstance(params, types.ElicitRequestURLParams) else None,
            call_id=call.exec.call_id,
            turn=call.exec.turn or None,
            resume=resume,
        )
        return await self.ask(call, agent, request)

    async def _sample(
        self, ctx: ClientRequestContext, params: types.CreateMessageRequestParams
    ) -> types.CreateMessageResult | types.ErrorData:
        found = self.attribute(ctx.meta, "a sampling request")
        if isinstance(found, str):
            return _refusal(found)
        call, agent = found
        return await sample(
            self.server, lambda request: self.ask(call, agent, request), call, agent, params
        )

    async def _list_roots(self, ctx: ClientRequestContext) -> types.ListRootsResult:
        roots = [
            types.Root.model_validate({"uri": root.as_uri(), "name": root.name or str(root)})
            for root in self.roots
        ]
        return types.ListRootsResult(roots=roots)
