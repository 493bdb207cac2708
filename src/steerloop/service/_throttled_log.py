"""Warnings that arrive by the thousand under load (a descriptor limit reached, connections
refused), written once per interval with a count instead of once each: a flood must not
fill the disk with the same traceback."""

from __future__ import annotations

import asyncio
import errno
import logging
import time
from collections.abc import Callable
from typing import Any

__all__ = ["RESOURCE_ERRNOS", "ThrottledLog", "quiet_resource_errors"]

RESOURCE_ERRNOS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})
"""``accept()`` failures that mean "out of descriptors or memory", not a bad peer."""


class ThrottledLog:
    """``warn(key, message)`` logs the first of a kind, then at most once per ``interval``
    seconds with how many were held back."""

    def __init__(
        self,
        logger: logging.Logger,
        interval: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.logger = logger
        self.interval = interval
        self._clock = clock
        self._last: dict[str, float] = {}
        self._held: dict[str, int] = {}

    def warn(self, key: str, message: str) -> None:
        now = self._clock()
        last = self._last.get(key)
        if last is not None and now - last < self.interval:
            self._held[key] = self._held.get(key, 0) + 1
            return
        held = self._held.pop(key, 0)
        self._last[key] = now
        more = f" ({held} more in the last {now - last:.0f} s)" if held and last else ""
        self.logger.warning("%s%s", message, more)


def quiet_resource_errors(loop: asyncio.AbstractEventLoop, log: ThrottledLog) -> None:
    """Route the event loop's "out of system resource" reports (``accept()`` failing with
    ``EMFILE`` and friends: asyncio retries after a second, each time with a traceback)
    through ``log``; every other report goes where it went before."""
    previous = loop.get_exception_handler()

    def handle(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        exc = context.get("exception")
        if isinstance(exc, OSError) and exc.errno in RESOURCE_ERRNOS:
            log.warn(
                f"resource:{exc.errno}",
                f"{context.get('message', 'out of system resource')}: {exc} — new "
                "connections wait in the listen backlog; raise the descriptor limit "
                "(ulimit -n) or lower --max-connections",
            )
            return
        if previous is not None:
            previous(loop, context)
        else:
            loop.default_exception_handler(context)

    loop.set_exception_handler(handle)
