"""HTTP facts both provider adapters read the same way."""

from __future__ import annotations

import contextlib
import email.utils
import time
from collections.abc import Mapping

__all__ = ["retry_after_ms"]


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
