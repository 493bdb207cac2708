"""A transport's streams as a connection sees them: end-of-stream reported, each message
bounded (``Bounder``), each request's method noted for the bounds of its answer."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import anyio
import mcp_types as types

from ._bounds import Bounder

__all__ = ["checkpoint", "watched"]


class _WatchedReader:
    """A transport's read stream that reports its end-of-stream (the server went away) and,
    given a ``Bounder``, bounds each message it hands on."""

    def __init__(self, inner: Any, on_end: Callable[[], None], bounder: Bounder | None) -> None:
        self._inner = inner
        self._on_end = on_end
        self._bounder = bounder

    async def receive(self) -> Any:
        try:
            message = await self._inner.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError):
            self._on_end()
            raise
        message = _complete_by_default(message)
        if self._bounder is not None:
            return await self._bounder.bound_message(message)
        return message

    def __aiter__(self) -> _WatchedReader:
        return self

    async def __anext__(self) -> Any:
        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None

    async def aclose(self) -> None:
        await self._inner.aclose()

    async def __aenter__(self) -> _WatchedReader:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


class _NotingWriter:
    """A transport's write stream that tells the ``Bounder`` the method of each request."""

    def __init__(self, inner: Any, bounder: Bounder) -> None:
        self._inner = inner
        self._bounder = bounder

    async def send(self, item: Any) -> None:
        self._bounder.sent(item)
        await self._inner.send(item)

    async def aclose(self) -> None:
        await self._inner.aclose()

    async def __aenter__(self) -> _NotingWriter:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


def _complete_by_default(message: Any) -> Any:
    """A result without ``resultType`` is ``complete``: what 2026-07-28 asks a client to
    assume (SEP-2322), where the SDK's result models would refuse the result instead."""
    inner = getattr(message, "message", None)
    if isinstance(inner, types.JSONRPCResponse) and isinstance(inner.result, dict):
        inner.result.setdefault("resultType", "complete")
    return message


@asynccontextmanager
async def watched(
    inner: Any, ended: Callable[[], None], bounder: Bounder | None
) -> AsyncIterator[tuple[Any, Any]]:
    async with inner as (read, write):
        if bounder is not None:
            write = _NotingWriter(write, bounder)
        yield _WatchedReader(read, ended, bounder), write


async def checkpoint() -> None:
    await anyio.lowlevel.checkpoint()
