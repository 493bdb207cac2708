"""Issue 11, command-line items: each test failed against the code before its fix."""

from __future__ import annotations

import io
import time
from pathlib import Path

import pytest
from rich.console import Console

from steerloop.cli._demo import run_demo

pytestmark = pytest.mark.timeout(120)


async def test_two_demos_started_in_the_same_second_get_their_own_sessions(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Generated session ids carry randomness: with the clock frozen on one second, two
    demos on one store both run (before: the second failed, its id already existed)."""
    frozen = time.localtime(1_790_000_000)
    real = time.strftime
    monkeypatch.setattr(time, "strftime", lambda fmt, t=None: real(fmt, frozen))
    store = f"sqlite:///{tmp_path / 's.db'}"
    console = Console(file=io.StringIO())
    first = await run_demo(store, console)
    second = await run_demo(store, console)
    stamp = real("%Y%m%d-%H%M%S", frozen)
    assert first.startswith(f"demo-{stamp}") and second.startswith(f"demo-{stamp}")
    assert first != second
