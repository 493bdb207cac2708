"""The one stream lifecycle of every provider adapter.

``provider_stream`` owns what all adapters do alike: the pre-abort check, racing the
response headers against the signal, the guard that closes the response on abort, the
request id, the decode loop, "the abort wins" over whatever the transport then raises,
failure construction and the close. An adapter supplies one ``ProviderCall`` per request:
opening the SDK stream (body building included), a decoder, and its SDK-exception map.

Every exit yields exactly one terminal ``Finish`` (``aborted`` or ``error`` from here, the
others from the decoder), except an exception ``ProviderCall.failure`` disowns, which is
raised to the caller unchanged.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Iterable, Sequence
from typing import Any, Protocol

from .._signal import AbortSignal
from ..errors import AbortedError
from ._http import ResponseGuard, open_response
from ._types import LlmFailure
from .chunks import Finish, FinishReason, StreamChunk

__all__ = ["ProviderCall", "aborted_finish", "error_finish", "provider_stream"]

_log = logging.getLogger("steerloop.llm")

ABORTED_MESSAGE = "the request was aborted"


class ProviderCall(Protocol):
    """One model request as an adapter speaks it; ``provider_stream`` drives it."""

    request_id_header: str
    """The response header carrying the provider's request id."""

    def open(self) -> Awaitable[Any]:
        """Send the request; the awaitable gives the SDK's async-iterable response stream
        (with ``.response.headers`` and ``close()``). Called again after ``end`` asks."""
        ...

    def feed(self, event: Any) -> Iterable[StreamChunk]:
        """The chunks of one SDK stream event."""
        ...

    @property
    def done(self) -> bool:
        """Whether the response is complete (later events, if any, are not read)."""
        ...

    def end(self, request_id: str | None) -> Sequence[StreamChunk] | None:
        """The chunks closing a response the transport ended normally, the last one a
        ``Finish``; ``None`` when the turn goes on in another request (``open`` again)."""
        ...

    def failure(self, exc: Exception) -> LlmFailure | None:
        """``exc`` (an SDK or transport exception) as a failure; ``None`` disowns it."""
        ...


def aborted_finish() -> Finish:
    failure = LlmFailure(message=ABORTED_MESSAGE, code="ABORTED")
    return Finish(reason=FinishReason(kind="aborted", failure=failure))


def error_finish(failure: LlmFailure) -> Finish:
    return Finish(reason=FinishReason(kind="error", failure=failure))


def _with_request_id(failure: LlmFailure, request_id: str | None) -> LlmFailure:
    if failure.request_id is not None or request_id is None:
        return failure
    return LlmFailure(**{**failure.to_json(), "request_id": request_id})


def _failed(call: ProviderCall, exc: Exception, request_id: str | None) -> Finish:
    failure = call.failure(exc)
    if failure is None:
        raise exc
    failure = _with_request_id(failure, request_id)
    _log.info("model request failed: %s (%s)", failure.message, failure.code)
    return error_finish(failure)


async def _close_events(events: AsyncIterator[Any], sdk_stream: Any) -> None:
    """Close the SDK's event iterators here, in the request's task. Left suspended (a ``break``
    on the last event leaves them so), they are closed whenever the collector or the loop's
    shutdown reaches them, by then after their client was closed; the SDKs' nested iterators
    do not always survive that (seen twice in CI: "async generator already executing" in the
    finalizer of the transport's ``AsyncResponseStream.__aiter__``).

    Closing what ``aiter`` gave is not enough: the OpenAI SDK's stream keeps its own generator
    (``_iterator``, whose frame refers back to the stream: a reference cycle), so only the
    cyclic collector would free it, at any later point of any task. Closing it here runs its
    ``finally`` (the response's close) now and frees the generators below it by reference
    counting, while this loop runs. ``vars`` so a lazily made iterator (Anthropic's) is not
    made just to be closed."""
    inner = vars(sdk_stream).get("_iterator") if hasattr(sdk_stream, "__dict__") else None
    for iterator in (events, inner):
        if isinstance(iterator, AsyncGenerator):
            # An iterator that finished or failed is already closed: aclose() does nothing.
            with contextlib.suppress(Exception):
                await iterator.aclose()


async def provider_stream(
    call: ProviderCall, signal: AbortSignal | None, *, max_opens: int = 1
) -> AsyncIterator[StreamChunk]:
    """Stream ``call`` to one terminal ``Finish``; at most ``max_opens`` requests are sent
    (a turn continued past that is an error ``PAUSED``)."""
    for _ in range(max_opens):
        if signal is not None and signal.aborted:
            yield aborted_finish()
            return
        try:
            sdk_stream = await open_response(call.open(), signal)
        except AbortedError:
            yield aborted_finish()
            return
        except Exception as exc:
            yield _failed(call, exc, None)
            return
        guard = ResponseGuard(sdk_stream, signal)
        request_id = sdk_stream.response.headers.get(call.request_id_header)
        events = aiter(sdk_stream)
        try:
            async for event in events:
                if signal is not None and signal.aborted:
                    break
                for chunk in call.feed(event):
                    yield chunk
                if call.done:
                    break
            if signal is not None and signal.aborted:
                yield aborted_finish()
                return
            tail = call.end(request_id)
        except Exception as exc:
            # A read woken by the guard closing the response fails in whatever way the
            # transport chooses; once the signal fired, that is the abort, not an error.
            if signal is not None and signal.aborted:
                yield aborted_finish()
                return
            yield _failed(call, exc, request_id)
            return
        finally:
            try:
                await _close_events(events, sdk_stream)
            finally:
                await guard.close()
        if tail is not None:
            for chunk in tail:
                yield chunk
            return
    yield error_finish(
        LlmFailure(
            message=f"the model paused its turn {max_opens} times", code="PAUSED", retryable=False
        )
    )
