"""Id and clock factories; injectable so logs can be reproduced in tests (G-9)."""

from __future__ import annotations

import itertools
import time
import uuid
from collections.abc import Callable

__all__ = ["Clock", "IdFactory", "counting_ids", "default_clock", "default_ids", "new_id"]

IdFactory = Callable[[str], str]
Clock = Callable[[], int]


def default_ids(prefix: str) -> str:
    """A random, globally unique id such as ``msg_3f2a…``."""
    return f"{prefix}_{uuid.uuid4().hex}"


def default_clock() -> int:
    """Unix epoch milliseconds."""
    return time.time_ns() // 1_000_000


def counting_ids() -> IdFactory:
    """Deterministic ids (``msg_1``, ``msg_2``, …) for tests and golden logs."""
    counter = itertools.count(1)
    return lambda prefix: f"{prefix}_{next(counter)}"


_current: list[IdFactory] = [default_ids]


def new_id(prefix: str) -> str:
    """Make an id with the process-wide factory."""
    return _current[0](prefix)


def set_id_factory(factory: IdFactory) -> Callable[[], None]:
    """Install ``factory`` process-wide; returns a function restoring the previous one."""
    previous = _current[0]
    _current[0] = factory

    def restore() -> None:
        _current[0] = previous

    return restore
