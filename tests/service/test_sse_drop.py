"""An SSE reader that goes away mid-stream (API.md "Service: HTTP + SSE"): the server ends
that response promptly and writes nothing to the dead connection. uvicorn on 127.0.0.1:0 in
this process, ``--role all`` on SQLite and on PostgreSQL (both feeds share ``_sse.feed``)."""

from __future__ import annotations

import asyncio
import logging
import socket
import struct
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from steerloop.service import create_app
from steerloop.service._sse import PAGE as _PAGE
from tests.session.backends import POSTGRES_URL, drop_schema, require_postgres

from .profiles import profiles
from .served import WAIT, served, turn_ends, wait_for_log

pytestmark = pytest.mark.timeout(120)

INJECTS = 300  # with the turn that takes them in: ~600 events, more than one page


class Tracked:
    """The app under an ASGI wrapper counting its ``/events`` responses in flight (the
    app's call for the request has not returned yet) and those that ended."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.open = 0
        self.ended = 0

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or not scope["path"].endswith("/events"):
            await self.app(scope, receive, send)
            return
        self.open += 1
        try:
            await self.app(scope, receive, send)
        finally:
            self.open -= 1
            self.ended += 1

    async def settled(self, ended: int) -> None:
        """Wait (bounded) until ``ended`` responses have ended and none is in flight."""
        async with asyncio.timeout(WAIT):
            while self.open or self.ended < ended:
                await asyncio.sleep(0.01)


@pytest.fixture(params=["sqlite", "postgresql"])
async def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'sessions.db'}"
        return
    require_postgres()
    schema = f"steerloop_drop_{uuid.uuid4().hex[:12]}"
    yield f"{POSTGRES_URL}?schema={schema}"
    await drop_schema(schema)


async def long_log(client: httpx.AsyncClient, session_id: str) -> int:
    """A session whose log is longer than one feed page; returns its last seq."""
    answer = await client.post("/v1/sessions", json={"session_id": session_id})
    assert answer.status_code == 201
    path = f"/v1/sessions/{session_id}/messages"
    for start in range(0, INJECTS, 100):
        answers = await asyncio.gather(
            *[
                client.post(path, json={"mode": "inject", "content": f"n{i}"})
                for i in range(start, start + 100)
            ]
        )
        assert [a.status_code for a in answers] == [202] * 100
    answer = await client.post(path, json={"mode": "followup", "content": "take them in"})
    assert answer.status_code == 202
    events = await wait_for_log(client, session_id, lambda ev: turn_ends(ev) == 1)
    assert len(events) > _PAGE
    return len(events)


def reset_after_first_bytes(port: int, path: str) -> bytes:
    """Open ``path`` as SSE on a raw socket, take the first bytes, then drop the connection
    with a reset (``SO_LINGER`` 0) while the server is still writing the backlog. Runs in a
    thread: the server's loop keeps writing meanwhile."""
    with socket.create_connection(("127.0.0.1", port), timeout=WAIT) as sock:
        sock.sendall(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode())
        head = sock.recv(4096)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    return head


async def test_a_reader_that_drops_mid_stream_ends_its_response_with_no_write_after(
    store_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Pins: a reader that resets its connection while the server writes a page of the
    backlog, and one that closes its httpx stream after the first chunk, each end their
    response on the server within a bounded wait; asyncio logs nothing (no
    ``socket.send() raised exception.``, its report of writes to a lost connection, which
    the server made for the rest of a page before the feed yielded to the loop once per
    event); the server goes on serving the feed from the start."""
    caplog.set_level(logging.WARNING, logger="asyncio")
    app = Tracked(create_app(store_url, profiles, max_unconsumed=1000))
    async with served(app) as client:
        last = await long_log(client, "big")
        port = client.base_url.port
        assert port is not None
        path = "/v1/sessions/big/events?after=0"
        for dropped in range(1, 4):
            async with asyncio.timeout(WAIT):
                head = await asyncio.to_thread(reset_after_first_bytes, port, path)
            assert head.startswith(b"HTTP/1.1 200 ")
            await app.settled(dropped)
        async with client.stream("GET", path) as response:
            assert response.status_code == 200
            async for chunk in response.aiter_raw():
                assert chunk.startswith(b"id: 1\n")  # LF-separated
                break
        await app.settled(4)
        assert (app.open, app.ended) == (0, 4)
        lost_writes = [r for r in caplog.records if "socket.send()" in r.getMessage()]
        assert [r.name for r in lost_writes] == []
        # The feed still serves a whole backlog to a reader that stays.
        seen: list[int] = []
        async with client.stream("GET", path) as response, asyncio.timeout(WAIT):
            async for line in response.aiter_lines():
                if line.startswith("id: "):
                    seen.append(int(line[4:]))
                    if seen[-1] == last:
                        break
        assert seen == list(range(1, last + 1))
    await app.settled(5)
