"""Names the command line makes up: session ids."""

from __future__ import annotations

import secrets
import time

__all__ = ["new_session_id"]


def new_session_id(prefix: str, now: float | None = None) -> str:
    """``PREFIX-YYYYmmdd-HHMMSS-xxxxxx``: readable and sortable by start time, with a random
    tail so that two commands started in the same second never pick the same session."""
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(now))
    return f"{prefix}-{stamp}-{secrets.token_hex(3)}"
