"""The bounds of the edge (issue 23, ``Limits``): connections, SSE streams (server and
session), the request head and body deadlines, and a flood under a small descriptor limit
answered, never hung, with a log that does not grow per connection. uvicorn with the edge
protocol (what ``steerloop serve`` runs) on 127.0.0.1:0, and ``steerloop serve`` itself."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import os
import resource
import socket
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn

from steerloop.service import Limits, create_app
from steerloop.service._protocol import edge_protocol
from steerloop.service._throttled_log import ThrottledLog, quiet_resource_errors

from .profiles import profiles
from .served import WAIT
from .stores import store_url

pytestmark = pytest.mark.timeout(180)
__all__ = ["store_url"]
ROOT = Path(__file__).resolve().parents[2]


@contextlib.asynccontextmanager
async def edge_served(app: Any) -> AsyncIterator[httpx.AsyncClient]:
    """``app`` under uvicorn with the edge protocol of its limits, as ``steerloop serve``
    runs it."""
    limits = app.state.limits
    config = uvicorn.Config(
        app, host="127.0.0.1", port=0, log_level="warning", http=edge_protocol(limits)
    )
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve())
    try:
        async with asyncio.timeout(WAIT):
            while not server.started:
                if task.done():
                    task.result()
                await asyncio.sleep(0.01)
        port = server.servers[0].sockets[0].getsockname()[1]
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=WAIT) as client:
            yield client
    finally:
        server.should_exit = True
        await asyncio.wait_for(task, WAIT)


async def open_raw(client: httpx.AsyncClient) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    port = client.base_url.port
    assert port is not None
    return await asyncio.open_connection("127.0.0.1", port)


async def read_answer(reader: asyncio.StreamReader) -> tuple[int, dict[str, str], bytes]:
    """The whole answer of a connection the server closes: status, headers, body."""
    async with asyncio.timeout(WAIT):
        data = await reader.read()
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    headers = dict(line.lower().split(": ", 1) for line in lines[1:])
    return int(lines[0].split()[1]), headers, body


def sqlite(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'sessions.db'}"


async def test_past_max_connections_a_connection_is_answered_503_at_once(tmp_path: Path) -> None:
    """With 3 connections open, a 4th is answered 503 ``too_many_connections`` with
    ``Retry-After`` before it sends anything, then closed; once one closes, a request is
    served again."""
    limits = Limits(max_connections=3, header_timeout=60)
    async with edge_served(create_app(sqlite(tmp_path), profiles, limits=limits)) as client:
        held = [await open_raw(client) for _ in range(3)]
        reader, writer = await open_raw(client)
        status, headers, body = await read_answer(reader)
        assert (status, headers["retry-after"], headers["connection"]) == (503, "1", "close")
        assert b'"too_many_connections"' in body
        writer.close()
        held[0][1].close()
        async with asyncio.timeout(WAIT):
            while True:  # the server learns of the close on its next loop turn
                try:
                    answer = await client.get("/healthz")
                except httpx.TransportError:
                    answer = None
                if answer is not None and answer.status_code == 200:
                    break
                await asyncio.sleep(0.02)
        for _reader, other in held[1:]:
            other.close()


async def test_a_slow_request_head_is_answered_408_and_closed(tmp_path: Path) -> None:
    """A head that never ends within ``header_timeout`` → 408 ``header_timeout`` and the
    connection closed (uvicorn alone waits forever); a connection that sent nothing is closed
    without an answer (a browser's connection opened ahead of use would take one as the
    answer to its next request); a kept-alive connection idle longer than that still serves
    its next request (the deadline starts at the next request's first byte)."""
    limits = Limits(header_timeout=0.5)
    async with edge_served(create_app(sqlite(tmp_path), profiles, limits=limits)) as client:
        silent = await open_raw(client)
        partial = await open_raw(client)
        partial[1].write(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: a")
        status, _headers, body = await read_answer(partial[0])
        assert status == 408
        assert b'"header_timeout"' in body
        partial[1].close()
        async with asyncio.timeout(WAIT):
            assert await silent[0].read() == b""
        silent[1].close()
        reader, writer = await open_raw(client)
        request = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
        writer.write(request)
        assert (await asyncio.wait_for(reader.readline(), WAIT)).startswith(b"HTTP/1.1 200")
        await asyncio.wait_for(reader.readuntil(b'"worker_id"'), WAIT)
        await asyncio.wait_for(reader.readuntil(b"}"), WAIT)
        await asyncio.sleep(1.0)  # idle past header_timeout, inside keep-alive
        writer.write(request)
        assert (await asyncio.wait_for(reader.readline(), WAIT)).startswith(b"HTTP/1.1 200")
        writer.close()


async def test_a_slow_request_body_is_answered_408_and_nothing_is_applied(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A body that does not arrive within ``body_timeout`` of its head → 408
    ``body_timeout``, the connection closed, and the request not applied; the handler that
    was reading it ends quietly (no "Exception in ASGI application")."""
    limits = Limits(body_timeout=0.5)
    async with edge_served(create_app(sqlite(tmp_path), profiles, limits=limits)) as client:
        reader, writer = await open_raw(client)
        writer.write(
            b"POST /v1/sessions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json"
            b'\r\nContent-Length: 40\r\n\r\n{"session_id": "slow"'
        )
        status, _headers, body = await read_answer(reader)
        assert status == 408
        assert b'"body_timeout"' in body
        writer.close()
        assert (await client.get("/v1/sessions")).json() == {"sessions": []}
    assert not [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]


async def test_sse_streams_are_bounded_per_server_and_per_session(store_url: str) -> None:
    """Two streams of session a fill its share: a third is 429; with b's the server is
    full: c's is 503; both with ``Retry-After`` and the connection closed; once a stream
    ends its slot serves another."""
    limits = Limits(max_streams=3, max_streams_per_session=2)
    async with edge_served(create_app(store_url, profiles, limits=limits)) as client:
        for session_id in "abc":
            await client.post("/v1/sessions", json={"session_id": session_id})
        async with contextlib.AsyncExitStack() as stack:
            for session_id, status in (("a", 200), ("a", 200), ("a", 429), ("b", 200), ("c", 503)):
                feed = await stack.enter_async_context(
                    client.stream("GET", f"/v1/sessions/{session_id}/events")
                )
                assert feed.status_code == status, session_id
                if status != 200:
                    await feed.aread()
                    assert feed.json()["error"]["code"] == "too_many_streams"
                    assert feed.headers["retry-after"] == "1"
                    assert feed.headers["connection"] == "close"
        async with asyncio.timeout(WAIT):
            while True:
                async with client.stream("GET", "/v1/sessions/c/events") as feed:
                    if feed.status_code == 200:
                        break
                await asyncio.sleep(0.02)


def test_out_of_descriptors_is_logged_once_per_interval() -> None:
    """A thousand ``accept()`` failures with ``EMFILE`` reported to the loop write one
    warning (asyncio writes a traceback for each); other reports still reach the
    previous handler."""
    records: list[logging.LogRecord] = []
    logger = logging.getLogger("test.edge.resources")
    logger.addHandler(handler := _Collect(records))
    others: list[dict[str, Any]] = []
    loop = asyncio.new_event_loop()
    try:
        loop.set_exception_handler(lambda _loop, context: others.append(context))
        quiet_resource_errors(loop, ThrottledLog(logger, interval=3600))
        for _ in range(1000):
            loop.call_exception_handler(
                {
                    "message": "socket.accept() out of system resource",
                    "exception": OSError(errno.EMFILE, "Too many open files"),
                }
            )
        loop.call_exception_handler({"message": "something else"})
    finally:
        loop.close()
        logger.removeHandler(handler)
    assert len(records) == 1
    assert "Too many open files" in records[0].getMessage()
    assert [c["message"] for c in others] == ["something else"]


class _Collect(logging.Handler):
    def __init__(self, into: list[logging.LogRecord]) -> None:
        super().__init__()
        self.into = into

    def emit(self, record: logging.LogRecord) -> None:
        self.into.append(record)


async def test_a_flood_under_a_small_descriptor_limit_is_answered_and_logged_once(
    tmp_path: Path,
) -> None:
    """``steerloop serve`` under ``ulimit -n 128`` with ``--max-connections 1000`` (more
    than the descriptors: the limit is what runs out): 400 connections that send half a
    head and wait. Every hostile connection gets an answer or a close (none hangs: 408
    after ``--header-timeout``, or the 503 of the cap); meanwhile a legitimate request
    gets an answer too once the flood's heads time out; the log has a handful of lines,
    not a traceback per ``accept()``."""
    port = _free_port()
    log = tmp_path / "server.log"
    command = [
        sys.executable,
        "-m",
        "steerloop.cli",
        "serve",
        "--store",
        f"sqlite:///{tmp_path / 's.db'}",
        "--port",
        str(port),
        "--profiles",
        "tests.service.profiles:profiles",
        "--max-connections",
        "1000",
        "--header-timeout",
        "1",
    ]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT / "src"), str(ROOT)]))
    with log.open("wb") as out:
        proc = subprocess.Popen(
            command,
            cwd=tmp_path,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (128, 128)),
        )
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=5) as client:
            async with asyncio.timeout(60):
                while True:
                    with contextlib.suppress(httpx.TransportError):
                        if (await client.get("/healthz")).status_code == 200:
                            break
                    await asyncio.sleep(0.1)
            outcomes = await asyncio.gather(*[_slow_head(port) for _ in range(400)])
            assert all(outcome in ("408", "503", "closed") for outcome in outcomes), outcomes
            assert "408" in outcomes
            async with asyncio.timeout(60):
                while True:
                    with contextlib.suppress(httpx.TransportError):
                        answer = await client.get("/v1/sessions")
                        if answer.status_code == 200:
                            break
                    await asyncio.sleep(0.1)
    finally:
        proc.terminate()
        proc.wait(30)
    lines = log.read_text(errors="replace").splitlines()
    assert len(lines) < 20, lines[:40]
    assert not [line for line in lines if line.startswith("Traceback")]
    emfile = [line for line in lines if "Too many open files" in line]
    assert 1 <= len(emfile) <= 4, lines  # it happened, and was said once per 10 s


async def _slow_head(port: int) -> str:
    """Open, send half a head, wait for the server: ``"408"``/``"503"`` for its answer,
    ``"closed"`` for a connection it could not take or closed silently."""
    try:
        async with asyncio.timeout(60):
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            try:
                writer.write(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-a: ")
                data = await reader.read()
            finally:
                writer.close()
    except (ConnectionError, OSError):
        return "closed"
    return data[9:12].decode() if data.startswith(b"HTTP/1.1 ") else "closed"


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])
