"""The bounds of the HTTP edge: how much of the process one client, or many, may hold."""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = ["Limits"]


@dataclass(frozen=True, kw_only=True, slots=True)
class Limits:
    """Bounds of the HTTP edge (README "Serve it"); past one a request is answered at once,
    never left hanging: 503 with ``Retry-After`` (429 for a session's own bound).

    ``max_connections``: open connections; one more is answered 503 and closed. The default
    leaves room under the common 1,024-descriptor limit for the store, MCP servers and the
    log. ``max_streams`` / ``max_streams_per_session``: SSE streams (``/events`` and
    ``/v1/agui``) of the server / of one session. ``header_timeout``: seconds from a
    connection's first byte (or its opening) to a complete request head (slowloris);
    ``body_timeout``: seconds from the head to the end of the body. Both answer 408 and
    close. Streams are bounded by the app; connections and the two timeouts by the server
    ``steerloop serve`` runs (``_protocol.EdgeProtocol`` on uvicorn).
    """

    max_connections: int = 512
    max_streams: int = 256
    max_streams_per_session: int = 16
    header_timeout: float = 10.0
    body_timeout: float = 30.0

    def __post_init__(self) -> None:
        for name in ("max_connections", "max_streams", "max_streams_per_session"):
            value = getattr(self, name)
            if type(value) is not int or value < 1:
                raise ValueError(f"{name} must be an integer >= 1, not {value!r}")
        for name in ("header_timeout", "body_timeout"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float):
                value = None
            if value is None or not 0 < value < math.inf:
                shown = getattr(self, name)
                raise ValueError(f"{name} must be a finite number of seconds > 0, not {shown!r}")
