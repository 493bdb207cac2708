"""Connections the adapters hold: a keep-alive connection the server closed between
requests is retried visibly, and ``rt.close()`` closes the clients of registered adapters.

The server here keeps connections alive (``sse_server`` closes after every response), as
llama.cpp advertises; it can drop a reused connection as soon as the next request arrives,
before any response byte: the race llama.cpp loses 3-5 % of the time.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import pytest

from steerloop import AgentOptions, Runtime, user_message
from steerloop.llm import GenerateRequest, ModelInfo
from steerloop.llm.openai import OpenAIChatAdapter
from steerloop.llm.retry import install_retry
from steerloop.testing import ScriptedAdapter, text_response

from ..conftest import compact, events_of, settle, within
from .openai_wire import DONE, chunk


def reply(text: str) -> bytes:
    body = b"".join([chunk({"content": text}), chunk({}, "stop"), DONE])
    head = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
    return head + b"content-length: %d\r\n\r\n" % len(body) + body


class KeepAliveServer:
    """Answers every request on a connection kept open; ``drop`` lists the (1-based) request
    numbers whose connection is closed on arrival, without a response byte."""

    def __init__(self, drop: set[int]) -> None:
        self.drop = drop
        self.requests = 0
        self.connections = 0
        self.closed_by_client = asyncio.Event()
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()

    async def start(self) -> str:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return f"http://127.0.0.1:{self._server.sockets[0].getsockname()[1]}"

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            for writer in list(self._writers):
                writer.transport.abort()
            await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        self._writers.add(writer)
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, ConnectionError):
                    self.closed_by_client.set()  # the client hung up an idle connection
                    return
                length = 0
                for line in head.decode("latin-1").split("\r\n"):
                    name, _, value = line.partition(":")
                    if name.strip().lower() == "content-length":
                        length = int(value)
                await reader.readexactly(length)
                self.requests += 1
                if self.requests in self.drop:
                    return  # closes the reused connection: no response byte
                writer.write(reply(f"answer {self.requests}"))
                await writer.drain()
        finally:
            self._writers.discard(writer)
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()


async def test_a_connection_dropped_between_requests_is_retried_visibly() -> None:
    """Turn 2's request goes out on the kept-alive connection, which the server closes
    before answering: the failure is CONNECTION and retryable (nothing was received, so
    resending is safe); install_retry resends on a fresh connection, and the log shows the
    failed attempt before the message."""
    server = KeepAliveServer(drop={2})
    url = await server.start()
    rt = await Runtime.open()
    adapter = OpenAIChatAdapter(base_url=url)
    rt.llm.register_adapter(["local"], adapter)
    slept: list[float] = []

    async def sleep(seconds: float) -> None:
        slept.append(seconds)

    install_retry(rt, sleep=sleep)
    try:
        handle = await rt.agents.create(
            session_id="s-1", agent_options=AgentOptions(provider="local", model="m")
        )
        agent = handle.agent
        for text in ("u1", "u2"):
            agent.followup(user_message(text))
            await settle(agent)
        assert compact(agent.session, only=["attempt", "msg", "T-"]) == [
            "msg", "T-1:completed", "attempt", "msg", "T-2:completed",
        ]  # fmt: skip
        (attempt,) = events_of(agent.session, "assistant/attempt")
        failure = attempt.data.stream[-1].chunk.reason.failure
        assert (failure.code, failure.retryable, failure.status) == ("CONNECTION", True, None)
        assert (server.requests, server.connections, len(slept)) == (3, 2, 1)
    finally:
        await rt.close()
        await server.stop()


async def test_rt_close_closes_the_registered_adapters_clients() -> None:
    """The runtime owns what it registered: ``rt.close()`` closes the adapter's HTTP client,
    so the server sees its idle keep-alive connection go. Failed before the fix: the
    connection stayed open until the process ended."""
    server = KeepAliveServer(drop=set())
    url = await server.start()
    rt = await Runtime.open()
    adapter = OpenAIChatAdapter(base_url=url)
    rt.llm.register_adapter(["local"], adapter)
    request = GenerateRequest(provider="local", model="m", messages=(user_message("hi"),))
    try:
        chunks = [c async for c in adapter.stream(request)]
        assert chunks[-1].kind == "finish" and server.connections == 1
        assert not server.closed_by_client.is_set()
        await rt.close()
        await within(server.closed_by_client.wait())
    finally:
        await rt.close()
        await server.stop()


class Closable(ScriptedAdapter):
    def __init__(self) -> None:
        super().__init__([text_response("x")])
        self.closed = 0

    async def aclose(self) -> None:
        self.closed += 1

    async def resolve_model(self, provider: str, model: str) -> ModelInfo:
        return ModelInfo()


async def test_close_once_each_and_not_what_was_taken_back() -> None:
    """An adapter serving two providers is closed once; one whose registration was disposed
    is the caller's again and stays open; an adapter without aclose() is left alone."""
    rt = await Runtime.open()
    shared, taken_back = Closable(), Closable()
    rt.llm.register_adapter(["a", "b"], shared)
    rt.llm.register_adapter(["c"], taken_back)()
    plain: Any = ScriptedAdapter([])
    rt.llm.register_adapter(["d"], plain)
    await rt.close()
    assert (shared.closed, taken_back.closed) == (1, 0)
    assert rt.llm.adapter_for("a") is None


class _FailingClose(Closable):
    async def aclose(self) -> None:
        self.closed += 1
        raise OSError("pool already gone")


async def test_a_failing_adapter_close_does_not_stop_the_runtime_close(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """One adapter's close raising is logged, not raised; the other adapters still close."""
    rt = await Runtime.open()
    failing, other = _FailingClose(), Closable()
    rt.llm.register_adapter(["a"], failing)
    rt.llm.register_adapter(["b"], other)
    await rt.close()
    assert (failing.closed, other.closed) == (1, 1)
    assert "closing adapter" in caplog.text and "pool already gone" in caplog.text
