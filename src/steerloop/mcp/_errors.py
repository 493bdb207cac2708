"""The MCP client's errors, and which failures are the transport's own."""

from __future__ import annotations

import anyio
import httpx2

from ..errors import ToolDefinitionError

__all__ = ["TRANSPORT_ERRORS", "MCPConnectionError", "MCPLimitError", "describe"]


class MCPConnectionError(ConnectionError):
    """An MCP server could not be reached, or its connection ended during a request."""


class MCPLimitError(ToolDefinitionError):
    """An MCP server's tool list is over its ``MCPLimits`` and was refused."""


#: Failures of the transport itself (the connection, not the server's answer).
TRANSPORT_ERRORS = (
    OSError,
    anyio.BrokenResourceError,
    anyio.ClosedResourceError,
    anyio.EndOfStream,
    httpx2.TransportError,
)


def describe(exc: BaseException) -> str:
    """The message of ``exc``, or of the failures an exception group wraps."""
    if isinstance(exc, BaseExceptionGroup):
        return "; ".join(describe(e) for e in exc.exceptions)
    text = str(exc)
    return f"{text} ({type(exc).__name__})" if text else type(exc).__name__
