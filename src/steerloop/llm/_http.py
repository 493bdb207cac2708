"""What both provider adapters do the same way over HTTP: read ``Retry-After``, and give up
a request or a response when the request's signal aborts."""

from __future__ import annotations

import asyncio
import contextlib
import email.utils
import re
import time
from collections.abc import Awaitable, Mapping
from typing import Any, TypeVar

from .._signal import AbortSignal
from ..errors import AbortedError

__all__ = ["NO_KEY", "ResponseGuard", "open_response", "redact", "retry_after_ms"]

T = TypeVar("T")

NO_KEY = "no-key"
"""The placeholder key sent to servers that need none (never worth redacting)."""

# A key-shaped token starts a word: "disk-usage-report" holds no ``sk-`` key.
_SECRETS = re.compile(r"\b(?:sk|pk|rk)-[A-Za-z0-9_\-*]{6,}|(?<=Bearer )\S+", re.IGNORECASE)

MIN_SECRET_LENGTH = 6
"""A configured key shorter than this is not searched for: replacing a one-letter "key"
everywhere would mangle every word that holds the letter, and hides nothing worth hiding."""


def redact(text: str, secret: str | None) -> str:
    """``text`` without the adapter's own key nor anything shaped like an API key."""
    if secret and secret != NO_KEY and len(secret) >= MIN_SECRET_LENGTH:
        text = text.replace(secret, "***")
    return _SECRETS.sub("***", text)


def retry_after_ms(headers: Mapping[str, str] | None) -> int | None:
    """The wait a server asked for: ``retry-after-ms``, else ``retry-after`` (seconds or an
    HTTP date); ``None`` when absent or unreadable."""
    if headers is None:
        return None
    raw_ms = headers.get("retry-after-ms")
    if raw_ms:
        with contextlib.suppress(ValueError):
            return max(0, round(float(raw_ms)))
    raw = headers.get("retry-after")
    if not raw:
        return None
    with contextlib.suppress(ValueError):
        return max(0, round(float(raw) * 1000))
    with contextlib.suppress(TypeError, ValueError):
        when = email.utils.parsedate_to_datetime(raw)
        return max(0, round((when.timestamp() - time.time()) * 1000))
    return None


async def open_response(call: Awaitable[T], signal: AbortSignal | None) -> T:
    """Await the SDK call that sends a request and returns its streaming response.

    Raises:
        AbortedError: ``signal`` aborted first.

    Until the response headers arrive there is no response to close, and the SDKs take no
    cancellation token: the private task awaiting the headers is the one thing that can be
    given up, so it is cancelled. A response that arrived as the signal fired is closed.
    """
    if signal is None:
        return await call
    task = asyncio.ensure_future(call)
    try:
        response = await signal.race(task)
    except AbortedError:
        if not task.done():
            task.cancel()
            await asyncio.wait([task])  # its outcome is ours to drop; our own cancel is not
        if not task.cancelled() and task.exception() is None:
            await _close(task.result())  # it answered anyway
        raise
    if signal.aborted:  # the headers and the abort landed in the same turn: the abort wins
        await _close(response)
        raise AbortedError(signal.reason)
    return response


async def _close(response: Any) -> None:
    with contextlib.suppress(Exception):
        await response.close()


class ResponseGuard:
    """Closes an SDK response stream as soon as ``signal`` aborts.

    Closing releases the connection (the server sees the hang-up) and wakes a read blocked
    on it, which then fails or ends; the adapter checks the signal and reports ``aborted``.
    ``close()`` always runs at the end of the stream, whatever ended it.
    """

    __slots__ = ("_closing", "_dispose", "_stream")

    def __init__(self, sdk_stream: Any, signal: AbortSignal | None) -> None:
        self._stream = sdk_stream
        self._closing: list[asyncio.Future[Any]] = []
        self._dispose = signal.add_listener(self._close_soon) if signal is not None else None

    def _close_soon(self, _reason: object) -> None:
        # Listeners run synchronously inside abort(): schedule the close.
        self._closing.append(asyncio.ensure_future(self._stream.close()))

    async def close(self) -> None:
        if self._dispose is not None:
            self._dispose()
            self._dispose = None
        with contextlib.suppress(Exception):
            await self._stream.close()
        for closing in self._closing:
            with contextlib.suppress(Exception):
                await closing
