"""No API can store a log it cannot serve (issue 23): ``Session.append`` refuses an event
whose text is not Unicode (a lone surrogate) on every store, before anything is written,
so the log stays whole and readable. Memory, a SQLite file and PostgreSQL."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from steerloop import AgentOptions, Runtime, user_message
from steerloop.session._json import dumps_event, loads
from steerloop.testing import ScriptedAdapter, text_response

from .backends import STORE_BACKENDS, Backend


@pytest.fixture(params=sorted(STORE_BACKENDS))
async def backend(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Backend]:
    made = STORE_BACKENDS[request.param](tmp_path)
    try:
        yield made
    finally:
        await made.close()


async def test_an_event_with_a_lone_surrogate_is_refused_and_the_log_stays_servable(
    backend: Backend,
) -> None:
    """A message with ``\\ud800`` (Python API) and a plugin event with one in a key or a
    value raise ``ValueError`` from ``append``; nothing is written, the agent goes on, and
    every stored event encodes as UTF-8 and reads back (the service could serve it)."""
    store = backend.open()
    rt = await Runtime.open(store=store)
    try:
        rt.llm.register_adapter(["mock"], ScriptedAdapter([text_response("ok")]))
        handle = await rt.agents.create(
            session_id="s", agent_options=AgentOptions(provider="mock", model="m")
        )
        session = handle.agent.session
        before = session.next_seq
        with pytest.raises(ValueError, match="not Unicode"):
            handle.agent.followup(user_message("bad \ud800 text"))
        for data in ({"text": "\udfff"}, {"\ud800": 1}, {"nested": ["\ud83d"]}):
            with pytest.raises(ValueError, match="not Unicode"):
                session.append("test/plugin", data, ignorable=True)
        assert session.next_seq == before
        assert not handle.agent.inbox.has_pending
        session.append("test/plugin", {"fine": "ünïcode \U0001f600", "nul": "\x00"}, ignorable=True)
        handle.agent.followup(user_message("fine"))
        await handle.agent.when_idle()
        await session.flush()
        stored = await store.load("s")
        assert [e.seq for e in stored] == list(range(1, len(stored) + 1))
        for event in stored:
            text = dumps_event(event)
            assert loads(text.encode("utf-8")) == event.to_json()
    finally:
        await rt.close()
