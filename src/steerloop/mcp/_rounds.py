"""The 2026-07-28 input rounds of a tool call, driven here so that they survive a restart.

A stateless server answers ``tools/call`` with ``resultType: input_required``: requests for
the client (``input_requests``, keyed by the server) and opaque ``request_state``; the
client answers them and sends the call again with ``input_responses`` and the state. The
SDK's own driver keeps a round in memory, so a crash loses it. Here each round's
elicitations become durable input requests (``Peer.elicit``) whose ``input/requested``
carries the round (``resume``): the tool, the state, the round's requests and the responses
gathered so far. After a restart the runtime's ``InputResumer`` for the server (``resume``,
registered at install) gets the request and the person's answer, and finishes the round and
the call on whichever process owns the session then: the answer reaches the server once.

The requests are answered in the server's key order, one at a time (each elicitation is a
wait of its own). Sampling and roots requests are answered as during any call (the
``Peer``'s callbacks); their responses go into the recorded round. A round carrying state
only is sent again after a short back-off. At most ``MAX_ROUNDS`` rounds per call.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import mcp_types as types
from mcp.client import Client
from mcp.client.session import ClientRequestContext
from mcp.shared.exceptions import MCPError
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import TypeAdapter, ValidationError

from .. import AbortSignal
from ..errors import AbortedError
from ..session.events import InputAnswered, InputRequest
from ._calls import CallContext
from ._limits import json_size

if TYPE_CHECKING:
    from ._connection import Connection

__all__ = ["MAX_ROUNDS", "Round", "Rounds"]

#: Rounds of one call before it fails (the SDK's and the other SDKs' default).
MAX_ROUNDS = 10

#: Version of the ``resume`` state recorded in ``input/requested``.
_FORMAT = 1

# Back-off of a round that carries state only (no requests): 50 ms doubling to 250 ms.
_BACKOFF = (0.05, 0.25)

# The SDK's per-request read timeout stays out of the way; the call's deadline bounds it.
_READ_TIMEOUT = 7 * 24 * 3600.0

_REQUEST: TypeAdapter[types.InputRequest] = TypeAdapter(types.InputRequest)


class RoundError(ValueError):
    """A stored round (``input/requested.resume``) that cannot be taken up."""


@dataclass(slots=True, kw_only=True)
class Round:
    """One input round of a call: what the server asked and what was answered so far."""

    tool: str
    number: int
    request_state: str | None
    requests: dict[str, dict[str, Any]]  # key -> the input request (JSON, as sent)
    responses: dict[str, dict[str, Any]] = field(default_factory=dict)  # key -> JSON

    def resume(self, key: str) -> dict[str, Any]:
        """The state recorded with the elicitation of ``key``."""
        return {
            "v": _FORMAT,
            "tool": self.tool,
            "round": self.number,
            "key": key,
            "request_state": self.request_state,
            "requests": self.requests,
            "responses": self.responses,
        }

    @classmethod
    def stored(cls, resume: Any) -> tuple[Round, str]:
        """The round and the key a stored ``resume`` names (a row is hostile input).

        Raises:
            RoundError: not the state this module records.
        """
        if not isinstance(resume, dict) or resume.get("v") != _FORMAT:
            raise RoundError("the input request records no input round of this version")
        tool, number, key = resume.get("tool"), resume.get("round"), resume.get("key")
        state, requests = resume.get("request_state"), resume.get("requests")
        responses = resume.get("responses")
        if not (
            isinstance(tool, str)
            and isinstance(number, int)
            and 1 <= number <= MAX_ROUNDS
            and isinstance(key, str)
            and (state is None or isinstance(state, str))
            and isinstance(requests, dict)
            and key in requests
            and all(isinstance(v, dict) for v in requests.values())
            and isinstance(responses, dict)
            and all(isinstance(v, dict) for v in responses.values())
        ):
            raise RoundError("the input request's recorded round is malformed")
        return cls(
            tool=tool,
            number=number,
            request_state=state,
            requests=requests,
            responses=responses,
        ), key


def _dump(model: Any) -> dict[str, Any]:
    data = model.model_dump(mode="json", by_alias=True, exclude_none=True)
    assert isinstance(data, dict)
    return data


class Rounds:
    """Calls a connection's tools, answering input rounds durably (see the module)."""

    def __init__(self, connection: Connection) -> None:
        self.connection = connection

    async def call(
        self, call: CallContext, tool: str, arguments: dict[str, Any]
    ) -> types.CallToolResult:
        """The tool's final result after every input round.

        Raises:
            AbortedError: the call's signal aborted.
            MCPError: the server's error, a refused input request, or too many rounds.
        """
        result = await self._send(call.signal, tool, arguments, None, None)
        return await self._drive(call, tool, arguments, result, 0)

    async def finish(self, call: CallContext, request: InputRequest, answer: InputAnswered) -> Any:
        """Finish a call whose elicitation ``request`` (recorded with its round) got
        ``answer`` on another process (or before a restart).

        Raises:
            RoundError: the request records no round this module can take up.
        """
        round_, key = Round.stored(request.resume)
        content = None if answer.content is None else dict(answer.content)
        response = types.ElicitResult(action=answer.action, content=content)
        round_.responses[key] = _dump(response)
        arguments = call.exec.arguments if isinstance(call.exec.arguments, dict) else {}
        responses = await self._answer(call, round_)
        result = await self._send(
            call.signal, round_.tool, arguments, responses, round_.request_state
        )
        return await self._drive(call, round_.tool, arguments, result, round_.number)

    async def _drive(
        self, call: CallContext, tool: str, arguments: dict[str, Any], result: Any, number: int
    ) -> types.CallToolResult:
        delay = _BACKOFF[0]
        while isinstance(result, types.InputRequiredResult):
            number += 1
            if number > MAX_ROUNDS:
                raise MCPError(
                    types.INTERNAL_ERROR,
                    f"the server asked for input more than {MAX_ROUNDS} times in one call",
                )
            responses: types.InputResponses | None = None
            if result.input_requests:
                delay = _BACKOFF[0]
                round_ = Round(
                    tool=tool,
                    number=number,
                    request_state=result.request_state,
                    requests={k: _dump(r) for k, r in result.input_requests.items()},
                )
                self._check_size(round_)
                responses = await self._answer(call, round_)
            else:
                await _sleep(delay, call.signal)
                delay = min(delay * 2, _BACKOFF[1])
            result = await self._send(call.signal, tool, arguments, responses, result.request_state)
        if not isinstance(result, types.CallToolResult):
            raise MCPError(types.INTERNAL_ERROR, "the server answered with no tool result")
        return result

    def _check_size(self, round_: Round) -> None:
        # The round is logged with each elicitation: a server's hostile round must not be.
        limit = self.connection.server.limits.max_schema_bytes
        size = json_size(round_.resume(""))
        if size > limit:
            raise MCPError(
                types.INVALID_REQUEST,
                f"steerloop refused an input round of {size:,} bytes (max_schema_bytes={limit:,})",
            )

    async def _answer(self, call: CallContext, round_: Round) -> types.InputResponses:
        """Answer the round's requests not answered yet, in key order; its responses."""
        for key in sorted(round_.requests):
            if key in round_.responses:
                continue
            try:
                request = _REQUEST.validate_python(round_.requests[key])
            except ValidationError as exc:
                raise MCPError(
                    types.INVALID_PARAMS, f"input request {key!r} is malformed: {exc}"
                ) from None
            response = await self._one(call, round_, key, request)
            if isinstance(response, types.ErrorData):
                raise MCPError.from_error_data(response)
            if isinstance(response, types.ElicitResult) and call.signal.aborted:
                # Answered ``cancel`` because the call ended: the server is not told more.
                raise AbortedError(call.signal.reason)
            round_.responses[key] = _dump(response)
        return {k: _RESPONSE.validate_python(v) for k, v in round_.responses.items()}

    async def _one(
        self, call: CallContext, round_: Round, key: str, request: types.InputRequest
    ) -> types.InputResponse | types.ErrorData:
        peer = self.connection.peer
        if peer is None:
            return types.ErrorData(code=types.INVALID_REQUEST, message="steerloop takes no input")
        if isinstance(request, types.ElicitRequest):
            return await peer.elicit(request.params, meta=None, resume=round_.resume(key))
        client = await self.connection.client(call.signal)
        params = request.params
        context = ClientRequestContext(
            session=client.session, request_id=key, meta=params.meta if params else None
        )
        return await client.session.dispatch_input_request(context, request)

    async def _send(
        self,
        signal: AbortSignal,
        tool: str,
        arguments: dict[str, Any],
        responses: types.InputResponses | None,
        state: str | None,
    ) -> Any:
        def send(client: Client) -> Awaitable[Any]:
            return _call_once(client, tool, arguments, responses, state)

        return await self.connection.run(signal, send)


_RESPONSE: TypeAdapter[types.InputResponse] = TypeAdapter(types.InputResponse)


async def _call_once(
    client: Client,
    tool: str,
    arguments: dict[str, Any],
    responses: types.InputResponses | None,
    state: str | None,
) -> Any:
    """One ``tools/call``; a 2026-07-28 header mismatch (the tool's listing is stale) is
    answered as the spec says: re-list, send once more."""

    def send() -> Awaitable[Any]:
        return client.session.call_tool(
            tool,
            arguments,
            read_timeout_seconds=_READ_TIMEOUT,
            input_responses=responses,
            request_state=state,
            allow_input_required=True,
        )

    try:
        return await send()
    except MCPError as mismatch:
        if (
            mismatch.error.code != types.HEADER_MISMATCH
            or client.protocol_version not in MODERN_PROTOCOL_VERSIONS
        ):
            raise
    await _relist(client, tool)
    return await send()


async def _relist(client: Client, tool: str) -> None:
    cursor: str | None = None
    for _ in range(100):
        page = await client.list_tools(cursor=cursor, cache_mode="refresh")
        cursor = page.next_cursor
        if cursor is None or any(t.name == tool for t in page.tools):
            return


async def _sleep(seconds: float, signal: AbortSignal) -> None:
    await signal.race(asyncio.sleep(seconds))
