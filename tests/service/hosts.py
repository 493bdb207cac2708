"""Both hosts under one test: the in-process host on a SQLite file (``--role all``), and an
API node on PostgreSQL with a real worker process (``steerloop serve --role worker``). The
same profiles (``pgprofiles``) serve both, so the model's requests are read the same way."""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import httpx
import pytest

from steerloop.service import create_app
from steerloop.session.store._open import open_store

from . import pgprofiles
from .pgworkers import Pg, WorkerProc, pg_schema, records, workers
from .served import WAIT, served

__all__ = ["HOSTS", "HostUnderTest", "open_host"]

HOSTS = ["sqlite", "postgresql"]
"""The parameter of a test that runs against both hosts."""


@dataclass
class HostUnderTest:
    """The served API of one host, and what it stored."""

    kind: Literal["sqlite", "postgresql"]
    client: httpx.AsyncClient
    url: str
    record: Path
    pg: Pg | None = None
    worker: WorkerProc | None = None

    @property
    def owner_pid(self) -> int:
        """The process that runs the agents: this one, or the worker process."""
        return os.getpid() if self.worker is None else self.worker.pid

    def open_gate(self, name: str) -> None:
        """Let the ``gate`` tool call named ``name`` return (``pgprofiles``)."""
        (self.record.parent / "gates" / name).touch()

    async def written(self) -> dict[str, Any]:
        """Every stored session with its event count, and on PostgreSQL the service's
        spec and command rows: what a refused request must leave unchanged."""
        store = open_store(self.url)
        try:
            ids = sorted(await store.list())
            found: dict[str, Any] = {
                "sessions": {sid: (await store.info(sid)).events for sid in ids}
            }
        finally:
            await store.close()
        if self.pg is not None:
            found["specs"] = await self.pg.val("SELECT count(*) FROM steerloop_specs")
            found["commands"] = await self.pg.val("SELECT count(*) FROM steerloop_commands")
            found["wakeups"] = await self.pg.val("SELECT count(*) FROM steerloop_wakeups")
        return found

    async def loaded(self, session_id: str) -> None:
        """Until the session's owner has it loaded (``idle``, its session stored; on
        PostgreSQL the worker process, its wakeup done), so what loading writes is written
        before a test looks."""
        async with asyncio.timeout(WAIT):
            while not await self._loaded(session_id):
                await asyncio.sleep(0.02)

    async def _loaded(self, session_id: str) -> bool:
        status = (await self.client.get(f"/v1/sessions/{session_id}")).json()["status"]
        if status != "idle":
            return False
        store = open_store(self.url)
        try:  # the owner reports ``idle`` before its first batch commits the session
            if not await store.exists(session_id):
                return False
        finally:
            await store.close()
        if self.pg is None:
            return True
        woken = "SELECT count(*) FROM steerloop_wakeups WHERE session_id = $1"
        return bool(await self.pg.val(woken, session_id) == 0)

    def requests(self) -> list[dict[str, Any]]:
        """The model's requests, by every process of the host (``pgprofiles`` records)."""
        return records(self.record) if self.record.exists() else []


@contextlib.asynccontextmanager
async def open_host(
    kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, **options: Any
) -> AsyncIterator[HostUnderTest]:
    """Serve ``kind`` (``HOSTS``) with ``create_app`` ``options``; yield its client."""
    gates = tmp_path / "gates"
    gates.mkdir(exist_ok=True)
    env = {
        "STEERLOOP_TEST_RECORD": str(tmp_path / "requests.jsonl"),
        "STEERLOOP_TEST_GATES": str(gates),
    }
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    record = Path(env["STEERLOOP_TEST_RECORD"])
    if kind == "sqlite":
        url = f"sqlite:///{tmp_path / 'sessions.db'}"
        app = create_app(url, pgprofiles.profiles, **options)
        async with served(app) as client:
            yield HostUnderTest("sqlite", client, url, record)
        return
    async with (
        pg_schema() as pg,
        workers(tmp_path, pg.url, 1, **env) as (worker,),
        served(create_app(pg.url, pgprofiles.profiles, "api", **options)) as client,
    ):
        yield HostUnderTest("postgresql", client, pg.url, record, pg, worker)
