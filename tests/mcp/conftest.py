"""Fixtures of the MCP tests: a directory a test server notes what it saw in, and a file for
its stderr."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TextIO

import pytest


@pytest.fixture
def state(tmp_path: Path) -> Path:
    path = tmp_path / "state"
    path.mkdir()
    return path


@pytest.fixture
def errlog(tmp_path: Path) -> Iterator[TextIO]:
    with (tmp_path / "server-stderr.txt").open("w") as f:
        yield f
