"""Cooperative cancellation: an ``AbortController`` owns an ``AbortSignal``.

The first ``abort(reason)`` wins; listeners run synchronously, once, in registration order.
Work that owns a signal checks it at its checkpoints (``throw_if_aborted``) or races an
awaitable against it (``race``); nothing here cancels tasks.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from .errors import AbortedError

__all__ = ["AbortController", "AbortSignal", "AbortedError"]

T = TypeVar("T")
_log = logging.getLogger("steerloop")


class AbortSignal:
    """Read side of an abort: ``aborted``, ``reason``, listeners and awaiting."""

    __slots__ = ("_aborted", "_listeners", "_reason", "_waiter")

    def __init__(self) -> None:
        self._aborted = False
        self._reason: Any = None
        self._listeners: list[list[Callable[[Any], object] | None]] | None = []
        self._waiter: asyncio.Future[None] | None = None

    @property
    def aborted(self) -> bool:
        return self._aborted

    @property
    def reason(self) -> Any:
        return self._reason

    def throw_if_aborted(self) -> None:
        """Raise ``AbortedError(reason)`` once the signal is aborted."""
        if self._aborted:
            raise AbortedError(self._reason)

    def add_listener(self, fn: Callable[[Any], object]) -> Callable[[], None]:
        """Call ``fn(reason)`` at abort (at once if already aborted); returns a disposer."""
        if self._aborted or self._listeners is None:
            fn(self._reason)
            return _noop
        # One cell per registration: disposing empties the cell, so an abort in progress
        # skips it without the list shifting under the iteration.
        cell: list[Callable[[Any], object] | None] = [fn]
        listeners = self._listeners
        listeners.append(cell)

        def dispose() -> None:
            if cell[0] is None:
                return
            cell[0] = None
            if self._listeners is listeners:
                # By identity: two cells holding the same function compare equal.
                for i, other in enumerate(listeners):
                    if other is cell:
                        del listeners[i]
                        break

        return dispose

    async def wait(self) -> None:
        """Return once the signal is aborted."""
        if self._aborted:
            return
        if self._waiter is None:
            self._waiter = asyncio.get_running_loop().create_future()
        await asyncio.shield(self._waiter)

    async def race(self, awaitable: Awaitable[T]) -> T:
        """Await ``awaitable`` unless the signal aborts first, then raise ``AbortedError``.

        A coroutine passed to an already aborted signal is closed, never started. A loser
        keeps running; a future the caller passed stays the caller's, and the outcome of
        one this call wrapped (a coroutine) is consumed when it ends, so its failure is
        not reported as never retrieved.
        """
        if self._aborted:
            if asyncio.iscoroutine(awaitable):
                awaitable.close()
            raise AbortedError(self._reason)
        fut = asyncio.ensure_future(awaitable)
        if fut.done():
            return fut.result()
        done = asyncio.get_running_loop().create_future()

        def wake(_: object) -> None:
            if not done.done():
                done.set_result(None)

        fut.add_done_callback(wake)
        dispose = self.add_listener(wake)
        try:
            await done
        finally:
            dispose()
            fut.remove_done_callback(wake)
        if fut.done():
            return fut.result()
        if fut is not awaitable:
            fut.add_done_callback(_consume)
        raise AbortedError(self._reason)

    def _fire(self, reason: Any) -> None:
        self._aborted = True
        self._reason = reason
        listeners, self._listeners = self._listeners or [], None
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)
        for cell in listeners:
            fn = cell[0]
            if fn is None:
                continue
            cell[0] = None
            try:
                fn(reason)
            except Exception:
                _log.exception("abort listener raised")


class AbortController:
    """Owner side of an abort; ``signal`` is handed down the call chain."""

    __slots__ = ("signal",)

    def __init__(self) -> None:
        self.signal = AbortSignal()

    def abort(self, reason: Any = None) -> None:
        """Abort the signal with ``reason``; later calls change nothing."""
        if not self.signal._aborted:
            self.signal._fire(reason)


def _consume(fut: asyncio.Future[Any]) -> None:
    if not fut.cancelled():
        fut.exception()


def _noop() -> None:
    return None
