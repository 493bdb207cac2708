"""A fixture giving each test a fresh store URL of both kinds the service serves: a SQLite
file and a scratch PostgreSQL schema (dropped after)."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.session.backends import POSTGRES_URL, drop_schema, require_postgres


@pytest.fixture(params=["sqlite", "postgresql"])
async def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'sessions.db'}"
        return
    require_postgres()
    schema = f"steerloop_edge_{uuid.uuid4().hex[:12]}"
    yield f"{POSTGRES_URL}?schema={schema}"
    await drop_schema(schema)


def is_postgres(url: str) -> bool:
    return url.startswith("postgresql://")
