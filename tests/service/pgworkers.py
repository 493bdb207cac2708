"""Helpers for the PostgreSQL service tests: a unique schema, worker processes
(``steerloop serve --role worker``) killed in a finally, and SQL on the test schema."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import signal
import sys
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import asyncpg

from tests.session.backends import POSTGRES_URL, drop_schema, require_postgres

ROOT = Path(__file__).resolve().parents[2]
START_WAIT = 60.0
SERVE = (sys.executable, "-c", "from steerloop.cli import main; main()", "serve")
"""The command line of ``steerloop serve`` from this checkout (``env_for`` sets its path)."""


@dataclass
class Pg:
    """The test's schema: its store URL and SQL on its tables."""

    url: str
    schema: str

    async def fetch(self, query: str, *args: Any) -> list[Any]:
        conn = await asyncpg.connect(POSTGRES_URL, timeout=5)
        try:
            await conn.execute(f'SET search_path = "{self.schema}"')
            return list(await conn.fetch(query, *args))
        finally:
            await conn.close()

    async def val(self, query: str, *args: Any) -> Any:
        rows = await self.fetch(query, *args)
        return rows[0][0] if rows else None


@contextlib.asynccontextmanager
async def pg_schema() -> AsyncIterator[Pg]:
    require_postgres()
    schema = f"steerloop_pgsvc_{uuid.uuid4().hex[:12]}"
    try:
        yield Pg(f"{POSTGRES_URL}?schema={schema}", schema)
    finally:
        await drop_schema(schema)


@dataclass
class WorkerProc:
    proc: asyncio.subprocess.Process
    base_url: str
    stderr: Path

    @property
    def pid(self) -> int:
        assert self.proc.pid is not None
        return self.proc.pid

    def kill(self) -> None:
        if self.proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.send_signal(signal.SIGKILL)


def env_for(home: Path, **extra: str) -> dict[str, str]:
    """The environment of a ``steerloop serve`` process living in ``home``: this process's,
    without any ``STEERLOOP_*`` setting, plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("STEERLOOP_")}
    env.update(
        HOME=str(home),
        XDG_CONFIG_HOME=str(home / ".config"),
        XDG_DATA_HOME=str(home / ".local" / "share"),
        PYTHONPATH=os.pathsep.join([str(ROOT / "src"), str(ROOT)]),
        **extra,
    )
    return env


@contextlib.asynccontextmanager
async def workers(
    tmp: Path, url: str, count: int = 1, *args: str, role: str = "worker", **env: str
) -> AsyncIterator[list[WorkerProc]]:
    """Start ``count`` ``steerloop serve --role ROLE`` processes on ``url``; yield them
    once each has started (a worker has registered: it prints its listening line after its
    startup); SIGKILL every one of them on the way out."""
    started: list[WorkerProc] = []
    try:
        for n in range(count):
            home = tmp / f"worker{len(started)}-{n}-{uuid.uuid4().hex[:6]}"
            home.mkdir(parents=True)
            err = home / "stderr.txt"
            with open(err, "wb") as stderr:
                proc = await asyncio.create_subprocess_exec(
                    *SERVE,
                    "--role",
                    role,
                    "--port",
                    "0",
                    "--store",
                    url,
                    "--profiles",
                    "tests.service.pgprofiles:profiles",
                    *args,
                    cwd=ROOT,
                    env=env_for(home, **env),
                    stdout=asyncio.subprocess.PIPE,
                    stderr=stderr,
                )
            worker = WorkerProc(proc, "", err)
            started.append(worker)
            assert proc.stdout is not None
            try:
                async with asyncio.timeout(START_WAIT):
                    line = (await proc.stdout.readline()).decode()
            except TimeoutError:
                raise AssertionError(f"worker did not start: {err.read_text()}") from None
            found = re.search(r"listening on (http://\S+)", line)
            assert found, f"no listening line: {line!r} / {err.read_text()}"
            worker.base_url = found.group(1)
        yield started
    finally:
        for worker in started:
            worker.kill()
        for worker in started:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(worker.proc.wait(), 15)


def records(path: Path) -> list[dict[str, Any]]:
    """The JSON lines the model of every worker process appended (pgprofiles)."""
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


async def until(predicate: Any, what: str, timeout: float = 20.0) -> Any:
    """Poll ``predicate()`` (sync or async) until it returns a truthy value (bounded)."""
    try:
        async with asyncio.timeout(timeout):
            while True:
                value = predicate()
                if asyncio.iscoroutine(value):
                    value = await value
                if value:
                    return value
                await asyncio.sleep(0.05)
    except TimeoutError:
        raise AssertionError(f"timed out waiting for {what}") from None
