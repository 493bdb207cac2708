"""Shared fixtures. The helpers live in ``tests/support.py``; the names below are
re-exported so ``from ..conftest import ...`` keeps working."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from steerloop import Runtime

from .llm.sse_server import SSEServer
from .support import (
    SETTLE_TIMEOUT,
    Harness,
    Recorder,
    compact,
    events_of,
    gate,
    label,
    open_harness,
    render,
    settle,
    texts,
    types,
    u,
    within,
)

__all__ = [
    "SETTLE_TIMEOUT",
    "Harness",
    "Recorder",
    "compact",
    "events_of",
    "gate",
    "label",
    "render",
    "settle",
    "texts",
    "types",
    "u",
    "within",
]


@pytest.fixture
async def rt() -> AsyncIterator[Runtime]:
    async with open_harness() as harness:
        yield harness.rt


@pytest.fixture
async def h(rt: Runtime) -> Harness:
    return Harness(rt)


@pytest.fixture
async def store_rt() -> AsyncIterator[Runtime]:
    """A runtime over a fresh ``memory://`` store (``rt.sessions.persistence``)."""
    async with open_harness(store="memory://") as harness:
        yield harness.rt


@pytest.fixture
async def hs(store_rt: Runtime) -> Harness:
    """Like ``h``, but the runtime persists sessions in a ``MemoryStore``."""
    return Harness(store_rt)


@pytest.fixture
async def server() -> AsyncIterator[SSEServer]:
    """A loopback scripted HTTP server (``llm/sse_server.py``), stopped after the test."""
    srv = await SSEServer.start()
    try:
        yield srv
    finally:
        await srv.stop()
