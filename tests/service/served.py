"""Helpers: an in-process uvicorn on 127.0.0.1:0, a JSON client, an SSE reader."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import httpx
import uvicorn
from httpx_sse import aconnect_sse

WAIT = 15.0


@contextlib.asynccontextmanager
async def served(app: Any, port: int = 0) -> AsyncIterator[httpx.AsyncClient]:
    """Run ``app`` under uvicorn on loopback ``port`` (0: a free one); yield a client bound
    to it."""
    config = uvicorn.Config(
        app,
        host="127.0.0.1",
        port=port,
        log_level="warning",
        lifespan="on",
        timeout_graceful_shutdown=2,
    )
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve())
    try:
        async with asyncio.timeout(WAIT):
            while not server.started:
                if task.done():
                    task.result()
                    raise RuntimeError("uvicorn stopped during startup")
                await asyncio.sleep(0.01)
        port = server.servers[0].sockets[0].getsockname()[1]
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=WAIT) as client:
            yield client
    finally:
        server.should_exit = True
        with contextlib.suppress(Exception):
            await asyncio.wait_for(task, WAIT)


async def read_sse(
    client: httpx.AsyncClient,
    path: str,
    until: Any,
    headers: dict[str, str] | None = None,
) -> list[Any]:
    """SSE events of ``path`` until ``until(event)`` is true (inclusive); bounded."""
    seen: list[Any] = []
    async with asyncio.timeout(WAIT):
        async with aconnect_sse(client, "GET", path, headers=headers or {}) as source:
            async for event in source.aiter_sse():
                seen.append(event)
                if until(event):
                    return seen
    raise AssertionError(f"the feed ended before the awaited event: {seen}")


async def wait_for_log(
    client: httpx.AsyncClient, session_id: str, predicate: Any
) -> list[dict[str, Any]]:
    """Poll the log endpoint (bounded) until ``predicate(events)`` holds."""
    async with asyncio.timeout(WAIT):
        while True:
            answer = await client.get(f"/v1/sessions/{session_id}/log?limit=5000")
            events = answer.json()["events"]
            if predicate(events):
                return list(events)
            await asyncio.sleep(0.02)


def types(events: list[dict[str, Any]]) -> list[str]:
    return [e["type"] for e in events]


def turn_ends(events: list[dict[str, Any]]) -> int:
    return types(events).count("turn/end")
