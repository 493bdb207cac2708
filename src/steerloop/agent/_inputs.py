"""Durable input requests: what a tool's server asked a person during a call, and the answer.

A plugin (the MCP client, for ``elicitation/create``) calls ``request``: ``input/requested``
is appended and the call waits. ``answer`` validates the answer against the requested schema
and writes ``input/answered`` synchronously (the caller gets its seq), then wakes the wait.
The events are the one mechanism: a terminal prompt, a callback or an HTTP command all end
in ``answer`` (``agent.answer_input``).

A wait ends with its answer, or when the call's signal aborts: the request is then answered
``cancel`` (``by`` is ``None``) so the log says what the server was told.

A transport that can finish a call after a restart (the 2026-07-28 stateless rounds) records
opaque ``resume`` state in ``input/requested`` and registers an ``InputResumer`` for its
server (``LoopServices.resumers``). Then the wait survives the process: restore repair keeps
the turn open, the resumed agent waits for the answer again (``rearm``; nothing is
appended) and hands it to the resumer, whose result is the call's (``agent/_waits``).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any

from jsonschema import Draft202012Validator, FormatChecker, SchemaError

from .._hooks import Disposer
from ..errors import InputError, SessionStorageError
from ..session._input_events import InputAction, InputAnswered, InputRequest
from ..session._inputs import input_state
from ..tools._define import ToolExec, ToolResult

if TYPE_CHECKING:
    from .._signal import AbortSignal
    from ..session._session import Session

__all__ = ["InputResumer", "InputResumers", "Inputs", "check_input_answer", "check_input_schema"]

InputResumer = Callable[[InputRequest, InputAnswered, ToolExec], Awaitable[ToolResult]]
"""Finishes a call after a restart: given the request (its ``resume`` state), the person's
answer and the call's ``ToolExec`` (its signal, agent, ids), it returns the call's result.
It runs as the call's body would: an ``AbortedError`` after a cancel becomes ``ABORTED``,
another exception ``TOOL_FAILED``; it may ask again (``input/requested`` for the same call)."""

_ACTIONS = ("accept", "decline", "cancel")


def check_input_schema(schema: Mapping[str, Any]) -> Draft202012Validator:
    """A validator for answers to ``schema`` (a JSON schema of an object).

    Raises:
        ValueError: ``schema`` is not a valid JSON schema of an object.
    """
    if not isinstance(schema, Mapping) or schema.get("type") != "object":
        raise ValueError("an input request's schema must be a JSON schema of type 'object'")
    try:
        Draft202012Validator.check_schema(schema)
    except SchemaError as exc:
        raise ValueError(f"invalid input schema: {exc.message}") from None
    return Draft202012Validator(schema, format_checker=FormatChecker())


def check_input_answer(
    request: InputRequest,
    action: InputAction,
    content: Mapping[str, Any] | None,
    validator: Draft202012Validator | None = None,
) -> dict[str, Any] | None:
    """The content an answer to ``request`` records: ``None`` for ``decline`` and ``cancel``,
    else ``content`` (``{}`` when absent and a schema is asked) valid against the requested
    schema. A service checks an answer with it before queueing it (``validator``: one made
    already for ``request.schema``).

    Raises:
        ValueError: content with a ``decline``/``cancel``, content that is not a JSON object,
            or content the requested schema refuses (the message names where).
    """
    if action not in _ACTIONS:
        raise ValueError(f"action must be 'accept', 'decline' or 'cancel', not {action!r}")
    if action != "accept":
        if content is not None:
            raise ValueError(f"a {action!r} answer carries no content")
        return None
    if content is None and request.schema is not None:
        content = {}
    if content is None:
        return None
    if not isinstance(content, Mapping) or not all(isinstance(k, str) for k in content):
        raise ValueError("content must be a JSON object")
    if validator is None and request.schema is not None:
        validator = check_input_schema(request.schema)
    if validator is not None:
        errors = sorted(validator.iter_errors(dict(content)), key=lambda e: e.path)
        if errors:
            where = "/".join(str(p) for p in errors[0].absolute_path) or "content"
            raise ValueError(
                f"the answer does not match the requested schema: {where}: {errors[0].message}"
            )
    return dict(content)


class _Waiting:
    __slots__ = ("answered", "request", "signal", "validator")

    def __init__(
        self,
        request: InputRequest,
        signal: AbortSignal,
        validator: Draft202012Validator | None,
        answered: asyncio.Future[InputAnswered],
    ) -> None:
        self.request = request
        self.signal = signal
        self.validator = validator
        self.answered = answered


class InputResumers:
    """The resumer of each server whose transport records ``resume`` state (one runtime's)."""

    def __init__(self) -> None:
        self._by_server: dict[str, InputResumer] = {}

    def register(self, server: str, resumer: InputResumer) -> Disposer:
        """Make ``resumer`` finish the calls of ``server`` whose input waits outlived their
        process; returns its disposer.

        Raises:
            ValueError: ``server`` has a resumer already.
        """
        if server in self._by_server:
            raise ValueError(f"server {server!r} already has an input resumer")
        self._by_server[server] = resumer

        def dispose() -> None:
            if self._by_server.get(server) is resumer:
                del self._by_server[server]

        return Disposer(dispose)

    def get(self, server: str) -> InputResumer | None:
        return self._by_server.get(server)


class Inputs:
    """The pending input requests of one agent (``agent.pending_inputs``)."""

    def __init__(self, session: Session) -> None:
        self._session = session
        self._waiting: dict[str, _Waiting] = {}

    @property
    def pending(self) -> tuple[InputRequest, ...]:
        """Requests still waiting, in request order (a cancelled call's are gone at once)."""
        return tuple(
            w.request
            for w in self._waiting.values()
            if not w.answered.done() and not w.signal.aborted
        )

    def request(
        self, request: InputRequest, signal: AbortSignal
    ) -> tuple[int, asyncio.Future[InputAnswered]]:
        """Append ``request`` and register its wait; ``(seq, future of the answer)``.

        Registered before the append, so a ``session/event`` listener of the request may
        already answer it.

        Raises:
            ValueError: the request's schema is not a JSON schema of an object, or its id
                is already waiting.
        """
        if request.id in self._waiting:
            raise ValueError(f"input request {request.id!r} is already waiting")
        answered = self._register(request, signal)
        try:
            seq = self._session.append(request).seq
        except BaseException:
            del self._waiting[request.id]
            raise
        return seq, answered

    def _register(
        self, request: InputRequest, signal: AbortSignal
    ) -> asyncio.Future[InputAnswered]:
        validator = None if request.schema is None else check_input_schema(request.schema)
        answered: asyncio.Future[InputAnswered] = asyncio.get_running_loop().create_future()
        self._waiting[request.id] = _Waiting(request, signal, validator, answered)
        return answered

    def rearm(self, request: InputRequest, signal: AbortSignal) -> asyncio.Future[InputAnswered]:
        """Register the wait for a request an earlier process logged and that is still
        pending in this agent's log, without appending anything; ``outcome`` awaits it.

        Raises:
            ValueError: ``request`` is not pending in the log, or is already waited for, or
                its schema is not a JSON schema of an object.
        """
        state = input_state(self._session.events, request.id)
        if state != "pending" or request.id in self._waiting:
            raise ValueError(f"input request {request.id!r} cannot be adopted: it is {state}")
        return self._register(request, signal)

    def adopt(self, request: InputRequest, signal: AbortSignal) -> asyncio.Future[InputAnswered]:
        """``rearm``, for a caller that awaits the future itself: the wait is released when
        the future is done or ``signal`` aborts.

        Raises:
            ValueError: ``request`` is not pending in the log, or is already waited for.
        """
        answered = self.rearm(request, signal)

        def release(_: object) -> None:
            self._waiting.pop(request.id, None)

        answered.add_done_callback(release)
        unlink = signal.add_listener(release)
        answered.add_done_callback(lambda _: unlink())
        return answered

    async def wait(self, request: InputRequest, signal: AbortSignal) -> InputAnswered:
        """``request`` it, then wait for its answer; an abort of ``signal`` answers it
        ``cancel`` (written, unless the session takes no more events) and ends the wait."""
        _seq, answered = self.request(request, signal)
        return await self.outcome(request.id, answered, signal)

    async def outcome(
        self, input_id: str, answered: asyncio.Future[InputAnswered], signal: AbortSignal
    ) -> InputAnswered:
        """Wait for a registered request's answer; an abort of ``signal`` answers it
        ``cancel`` (written, unless the session takes no more events) and ends the wait."""
        try:
            return await signal.race(answered)
        except BaseException:
            if not answered.done():
                with contextlib.suppress(SessionStorageError):  # a sealed session: gone
                    self.answer(input_id, "cancel", None, None, closing=True)
            raise
        finally:
            self._waiting.pop(input_id, None)

    def answer(
        self,
        input_id: str,
        action: InputAction,
        content: Mapping[str, Any] | None,
        by: str | None,
        *,
        closing: bool = False,
    ) -> int:
        """Write ``input/answered`` for a waiting request; returns its seq.

        Raises:
            ValueError: a bad argument, or content the request's schema refuses.
            InputError: ``input_id`` is not waiting (unknown, already answered, closed).
        """
        if not isinstance(input_id, str) or not input_id:
            raise ValueError("input_id must be a non-empty string")
        if action not in _ACTIONS:
            raise ValueError(f"action must be 'accept', 'decline' or 'cancel', not {action!r}")
        if by is not None and not isinstance(by, str):
            raise ValueError("by must be a string or None")
        waiting = self._waiting.get(input_id)
        if waiting is None or waiting.answered.done() or (waiting.signal.aborted and not closing):
            raise self._refusal(input_id, waiting)
        record = InputAnswered(
            id=input_id,
            action=action,
            content=check_input_answer(waiting.request, action, content, waiting.validator),
            by=by,
        )
        seq = self._session.append(record).seq
        waiting.answered.set_result(record)
        return seq

    def _refusal(self, input_id: str, waiting: _Waiting | None) -> InputError:
        if waiting is not None and not waiting.answered.done():
            return InputError(
                input_id, "closed", f"input {input_id!r} no longer waits: its call ended"
            )
        state = input_state(self._session.events, input_id)
        if state == "answered":
            return InputError(input_id, "answered", f"input {input_id!r} was already answered")
        if state == "unknown":
            return InputError(input_id, "unknown", f"no input {input_id!r} was requested")
        return InputError(input_id, "closed", f"input {input_id!r} no longer waits for an answer")
