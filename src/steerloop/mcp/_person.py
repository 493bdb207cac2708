"""Time a connection spends on a person (at an OAuth authorization URL), which its
connect bound does not count."""

from __future__ import annotations

import asyncio
from typing import Any, TypeVar

__all__ = ["PersonTime", "ready_within"]

T = TypeVar("T")


class PersonTime:
    """Whether a connection waits on a person (at an authorization URL), with a wake-up for
    each change."""

    def __init__(self) -> None:
        self._waits = 0
        self._changed = asyncio.Event()

    @property
    def busy(self) -> bool:
        return self._waits > 0

    def waiting(self, started: bool) -> None:
        self._waits += 1 if started else -1
        self._changed.set()

    async def changed(self) -> None:
        await self._changed.wait()
        self._changed.clear()


async def ready_within(ready: asyncio.Future[T], bound: float, person: PersonTime) -> T:
    """The result of ``ready``, within ``bound`` seconds of connecting; time spent on a
    person at an authorization URL is not counted (``MCPOAuth.authorize`` bounds it).

    Raises:
        TimeoutError: the bound ran out (``ready`` is left as it is).
    """
    loop = asyncio.get_running_loop()
    left = bound
    while not ready.done():
        change: asyncio.Future[Any] = asyncio.ensure_future(person.changed())
        busy, started = person.busy, loop.time()
        try:
            waited: set[asyncio.Future[Any]] = {ready, change}
            await asyncio.wait(
                waited, timeout=None if busy else left, return_when=asyncio.FIRST_COMPLETED
            )
        finally:
            change.cancel()
        if not busy:
            left -= loop.time() - started
        if left <= 0 and not ready.done() and not person.busy:
            raise TimeoutError
    return ready.result()
