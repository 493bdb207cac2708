"""Fixtures of the adapter tests."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from .sse_server import SSEServer


@pytest.fixture
async def server() -> AsyncIterator[SSEServer]:
    """A loopback scripted HTTP server (``sse_server``), stopped after the test."""
    srv = await SSEServer.start()
    try:
        yield srv
    finally:
        await srv.stop()
