"""Id and clock factories; injectable so logs can be reproduced in tests (G-9)."""

from __future__ import annotations

import itertools
import time
import uuid
from collections.abc import Callable

__all__ = ["Clock", "IdFactory", "counting_ids", "default_clock", "default_ids", "new_id"]

IdFactory = Callable[[str], str]
Clock = Callable[[], int]


_PROCESS = uuid.uuid4().hex[:16]
_COUNTER = itertools.count(1)


def default_ids(prefix: str) -> str:
    """A globally unique id such as ``msg_3f2a…_1c``: a random per-process part and a counter.

    Cheaper than a fresh UUID per id, which matters on the per-chunk and per-event paths.
    """
    return f"{prefix}_{_PROCESS}{next(_COUNTER):x}"


def default_clock() -> int:
    """Unix epoch milliseconds."""
    return time.time_ns() // 1_000_000


def counting_ids() -> IdFactory:
    """Deterministic ids (``msg_1``, ``msg_2``, …) for tests and golden logs."""
    counter = itertools.count(1)
    return lambda prefix: f"{prefix}_{next(counter)}"


_installed: list[IdFactory] = []  # the last installed is current; none: default_ids


def new_id(prefix: str) -> str:
    """Make an id with the process-wide factory."""
    return (_installed[-1] if _installed else default_ids)(prefix)


def set_id_factory(factory: IdFactory) -> Callable[[], None]:
    """Install ``factory`` process-wide; returns a function that uninstalls it.

    Installations stack: uninstalling one (in any order) leaves the latest of the others
    current, so runtimes that close out of order never leave a closed one's factory behind.
    """
    _installed.append(factory)
    done = False

    def restore() -> None:
        nonlocal done
        if done:
            return
        done = True
        for i in range(len(_installed) - 1, -1, -1):
            if _installed[i] is factory:
                del _installed[i]
                return

    return restore
