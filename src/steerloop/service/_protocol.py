"""The connection-level bounds uvicorn does not have, on its own h11 protocol.

uvicorn reads a request head for as long as the client takes (its keep-alive timer runs only
between requests, and every byte received cancels it), and its ``limit_concurrency`` is
checked only once a whole head has arrived, with a plain-text 503. So 1,300 connections
sending a header byte now and then (slowloris) hold 1,300 descriptors before any check runs.
``EdgeProtocol`` adds, per connection:

* a cap: past ``max_connections`` open ones, a new connection is answered 503 (JSON,
  ``Retry-After``) at once, half-closed, and dropped when the peer closes or after a second
  (at most ``MAX_LINGERING`` at a time; past that, closed at once);
* a head deadline: ``header_timeout`` seconds from the connection's opening, or from the
  first byte of a later request on it, to a complete head (a connection that sent nothing
  by then is closed without an answer: it may be a client's connection opened ahead of use);
* a body deadline: ``body_timeout`` seconds from the head to the end of the body.

A missed deadline is otherwise answered 408 (when no response has begun) and the connection
closed.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, ClassVar, Literal

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

from ._errors import ApiError, error_bytes
from ._limits import Limits
from ._throttled_log import ThrottledLog

__all__ = ["LINGER_SECONDS", "EdgeProtocol", "edge_protocol"]

log = logging.getLogger("steerloop.service")

LINGER_SECONDS = 1.0
"""How long a refused connection is kept half-closed so its peer reads the 503 (closing
with its request unread would reset the connection and lose the answer)."""
MAX_LINGERING = 64
"""Refused connections kept lingering at once; past it one is closed right after its 503
(its peer may then see a reset), so a flood cannot hold descriptors beyond the cap."""


class _Gate:
    """The connections of one server: how many are open, and the warnings about them."""

    def __init__(self, limits: Limits) -> None:
        self.limits = limits
        self.open = 0
        self.lingering = 0
        self.warnings = ThrottledLog(log)


class EdgeProtocol(H11Protocol):
    """uvicorn's h11 protocol with a connection cap and head/body deadlines (module
    docstring); ``edge_protocol(limits)`` binds it to one server's bounds."""

    gate: ClassVar[_Gate]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._deadline: asyncio.TimerHandle | None = None
        self._phase: Literal["head", "body"] | None = None
        self._counted = False
        self._refused = False
        self._lingering = False
        self._heard = False  # a byte of the current request arrived

    # --- the cap --------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        gate = self.gate
        if gate.open >= gate.limits.max_connections:
            self._refuse()
            return
        gate.open += 1
        self._counted = True
        self._arm("head")

    def _refuse(self) -> None:
        self._refused = True
        limit = self.gate.limits.max_connections
        self.gate.warnings.warn(
            "max_connections", f"{limit} connections open (--max-connections): refusing more"
        )
        refused = ApiError(
            503,
            "too_many_connections",
            f"the server has {limit} connections open (max_connections)",
            {"Retry-After": "1"},
        )
        self.transport.write(error_bytes(refused))
        if self.gate.lingering >= MAX_LINGERING or not self.transport.can_write_eof():
            self.transport.close()
            return
        self.gate.lingering += 1
        self._lingering = True
        self.transport.write_eof()
        self._deadline = self.loop.call_later(LINGER_SECONDS, self.transport.close)

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        if self._counted:
            self._counted = False
            self.gate.open -= 1
        if self._lingering:
            self._lingering = False
            self.gate.lingering -= 1
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._refused:
            return  # read and dropped: the peer has its answer and closes
        if self._phase is None and self.conn.their_state is h11.IDLE:
            self._arm("head")  # the first byte of the next request on this connection
        self._heard = True
        super().data_received(data)
        self._follow()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self._refused:
            self._follow()

    # --- the deadlines --------------------------------------------------------------------

    def _follow(self) -> None:
        """Move the deadline along with the request: the head's until it has arrived, then
        the body's until it has, then none (the response is the server's own business)."""
        state = self.conn.their_state
        if state is not h11.IDLE:
            self._heard = False  # the next request's bytes are the next head's
        if state is h11.SEND_BODY:
            if self._phase != "body":
                self._arm("body")
        elif state is not h11.IDLE:
            self._disarm()

    def _arm(self, phase: Literal["head", "body"]) -> None:
        self._disarm()
        limits = self.gate.limits
        seconds = limits.header_timeout if phase == "head" else limits.body_timeout
        self._phase = phase
        self._deadline = self.loop.call_later(seconds, self._expired, phase)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None
        self._phase = None

    def _expired(self, phase: Literal["head", "body"]) -> None:
        self._deadline = None
        self._phase = None
        if self.transport.is_closing():
            return
        limits = self.gate.limits
        if phase == "head" and not self._heard:
            # Nothing was sent: close without an answer, as an idle keep-alive connection is
            # closed (a client that opened it ahead of use retries on a new one; an answer
            # here would be read as the answer to its next request).
            self.transport.close()
            return
        if phase == "head":
            error = ApiError(
                408,
                "header_timeout",
                f"the request head did not arrive within {limits.header_timeout:g} s",
            )
        else:
            error = ApiError(
                408,
                "body_timeout",
                f"the request body did not arrive within {limits.body_timeout:g} s",
            )
        cycle = self.cycle
        if cycle is None or cycle.response_complete or not cycle.response_started:
            if cycle is not None:
                # The app may still be waiting for the body: it learns the client is gone,
                # and whatever it sends after is dropped.
                cycle.disconnected = True
                cycle.message_event.set()
            self.transport.write(error_bytes(error))
        self.transport.close()


def edge_protocol(limits: Limits) -> type[EdgeProtocol]:
    """An ``EdgeProtocol`` class bound to ``limits`` (uvicorn's ``Config(http=...)``)."""

    class Bound(EdgeProtocol):
        gate = _Gate(limits)

    return Bound
