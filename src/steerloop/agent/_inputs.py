"""Durable input requests: what a tool's server asked a person during a call, and the answer.

A plugin (the MCP client, for ``elicitation/create``) calls ``request``: ``input/requested``
is appended and the call waits. ``answer`` validates the answer against the requested schema
and writes ``input/answered`` synchronously (the caller gets its seq), then wakes the wait.
The events are the one mechanism: a terminal prompt, a callback or an HTTP command all end
in ``answer`` (``agent.answer_input``).

A wait ends with its answer, or when the call's signal aborts: the request is then answered
``cancel`` (``by`` is ``None``) so the log says what the server was told.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from jsonschema import Draft202012Validator, FormatChecker, SchemaError

from ..errors import InputError, SessionStorageError
from ..session._input_events import InputAction, InputAnswered, InputRequest
from ..session._inputs import input_state

if TYPE_CHECKING:
    from .._signal import AbortSignal
    from ..session._session import Session

__all__ = ["Inputs", "check_input_schema"]

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
        validator = None if request.schema is None else check_input_schema(request.schema)
        answered: asyncio.Future[InputAnswered] = asyncio.get_running_loop().create_future()
        self._waiting[request.id] = _Waiting(request, signal, validator, answered)
        try:
            seq = self._session.append(request).seq
        except BaseException:
            del self._waiting[request.id]
            raise
        return seq, answered

    def adopt(self, request: InputRequest, signal: AbortSignal) -> asyncio.Future[InputAnswered]:
        """Wait again for a request an earlier process logged and that is still pending in
        this agent's log (``pending_inputs``); nothing is appended.

        Raises:
            ValueError: ``request`` is not pending in the log, or is already waited for.
        """
        state = input_state(self._session.events, request.id)
        if state != "pending" or request.id in self._waiting:
            raise ValueError(f"input request {request.id!r} cannot be adopted: it is {state}")
        validator = None if request.schema is None else check_input_schema(request.schema)
        answered: asyncio.Future[InputAnswered] = asyncio.get_running_loop().create_future()
        self._waiting[request.id] = _Waiting(request, signal, validator, answered)

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
        try:
            return await signal.race(answered)
        except BaseException:
            if not answered.done():
                with contextlib.suppress(SessionStorageError):  # a sealed session: gone
                    self.answer(request.id, "cancel", None, None, closing=True)
            raise
        finally:
            self._waiting.pop(request.id, None)

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
            id=input_id, action=action, content=self._content(waiting, action, content), by=by
        )
        seq = self._session.append(record).seq
        waiting.answered.set_result(record)
        return seq

    def _content(
        self, waiting: _Waiting, action: InputAction, content: Mapping[str, Any] | None
    ) -> dict[str, Any] | None:
        if action != "accept":
            if content is not None:
                raise ValueError(f"a {action!r} answer carries no content")
            return None
        if content is None and waiting.request.schema is not None:
            content = {}
        if content is None:
            return None
        if not isinstance(content, Mapping) or not all(isinstance(k, str) for k in content):
            raise ValueError("content must be a JSON object")
        if waiting.validator is not None:
            errors = sorted(waiting.validator.iter_errors(dict(content)), key=lambda e: e.path)
            if errors:
                where = "/".join(str(p) for p in errors[0].absolute_path) or "content"
                raise ValueError(
                    f"the answer does not match the requested schema: {where}: {errors[0].message}"
                )
        return dict(content)

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
