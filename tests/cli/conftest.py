"""Fixtures of the command-line tests (the ``server`` fixture is the suite's own)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.cli.helpers import Tmux


@pytest.fixture
async def tmux(tmp_path: Path) -> AsyncIterator[Tmux]:
    """A private tmux server (its own socket), killed after the test."""
    term = Tmux(tmp_path / "tmux.sock")
    try:
        yield term
    finally:
        await term.kill()
