"""Side effects behind the log, with real SIGKILLs (issue 24; G-1, C7.2-9, C7.10-3).

``_effects_crash_child.py`` forks one process per round; each round's tool acts on the
world and its process is killed with SIGKILL at that very moment. Then, in this process:

* the marker scenario (SQLite and PostgreSQL, 30 kills each): every effect that happened
  has a durable ``tool/call`` in the stored log, and after resume and one more message no
  effect has run twice (before write-ahead intent, a log could end at the inbox splice: the
  resumed turn asked for the effect again);
* reconcile: a ``write_file`` killed after its write resumes as a reconciled success, one
  killed before it as ``TOOL_OUTCOME_UNKNOWN`` (the file still holds the old content).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import signal
import sys
import uuid
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from steerloop import AgentOptions, Runtime, define_tool, user_message
from steerloop.llm._types import GenerateRequest
from steerloop.messages import ToolResultMessage, UserMessage
from steerloop.session import SessionStore
from steerloop.session._postgres import PostgresStore
from steerloop.session._sqlite import SqliteStore
from steerloop.testing import ScriptedAdapter, text_response, tool_call_response
from steerloop.tools import ToolExec
from steerloop.workspace import workspace_tools

from ..logcheck import assert_well_formed
from ..session.backends import POSTGRES_URL, drop_schema, require_postgres
from ._effects_crash_child import CONTENT

CHILD = Path(__file__).with_name("_effects_crash_child.py")
OPTIONS = AgentOptions(provider="mock", model="m")
KILLS = 30
PARALLEL = 2  # children at a time: their fsync waits overlap
DRIVER_TIMEOUT = 300.0


@contextlib.asynccontextmanager
async def store_url(kind: str, tmp_path: Path) -> AsyncIterator[str]:
    """A fresh SQLite file or PostgreSQL schema, as a store URL."""
    if kind == "sqlite":
        yield f"sqlite:///{tmp_path / 'effects.db'}"
        return
    require_postgres()
    schema = f"steerloop_effects_{uuid.uuid4().hex[:12]}"
    try:
        yield f"{POSTGRES_URL}?schema={schema}"
    finally:
        await drop_schema(schema)


def open_store(url: str) -> SessionStore:
    if url.startswith("sqlite:///"):
        return SqliteStore(url.removeprefix("sqlite:///"))
    return PostgresStore(url)


async def dead_holder(store: SessionStore, session_id: str) -> None:
    """The killed process held the session's lease: on PostgreSQL it lives on until its
    TTL, so end it the way an operator who knows the holder is gone does (the flock of a
    SQLite writer died with its process)."""
    if isinstance(store, PostgresStore):
        assert await store.revoke_lease(session_id)


async def kill_rounds(mode: str, url: str, directory: Path, rounds: int) -> None:
    """Run the fork server for ``rounds`` rounds; every round must end in its SIGKILL."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = await asyncio.create_subprocess_exec(
        sys.executable, str(CHILD), mode, url, str(directory), str(rounds), str(PARALLEL),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=env,
    )  # fmt: skip
    try:
        out, err = await asyncio.wait_for(proc.communicate(), DRIVER_TIMEOUT)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    lines = out.decode().splitlines()
    assert proc.returncode == 0 and lines[-1:] == ["done"], err.decode()[-4000:]
    assert lines[:-1] == [f"round {n} killed" for n in range(rounds)], err.decode()[-4000:]


def asks_for_the_effect(request: GenerateRequest) -> Any:
    """The model of the resumed runtime: a request ending with the user's ``do it`` (the
    effect not done yet, as far as it can see) asks for the effect again; anything else is
    answered with text."""
    last = request.messages[-1]
    if isinstance(last, UserMessage) and last.content[0].text == "do it":  # type: ignore[union-attr]
        return tool_call_response(f"again-{uuid.uuid4().hex[:6]}", "effect", {})
    return text_response("ok")


@pytest.mark.parametrize("kind", ["sqlite", "postgresql"])
async def test_no_effect_without_its_durable_intent_and_none_twice(
    kind: str, tmp_path: Path
) -> None:
    """Write-ahead intent over 30 real kills: each of the 30 effects has its ``tool/call``
    in the stored log (with the assistant message and the turn before it), and resuming
    every session and sending one more message runs no effect a second time: resume
    answers the call ``TOOL_OUTCOME_UNKNOWN`` (C7.2-9) and the next turn's model sees that
    answer instead of an unanswered ``do it``."""
    async with store_url(kind, tmp_path) as url:
        await kill_rounds("marker", url, tmp_path, KILLS)
        effects = (tmp_path / "effects.log").read_text().splitlines()
        assert len(effects) == KILLS
        store = open_store(url)
        rt = await Runtime.open(store=store)
        try:
            adapter = ScriptedAdapter()
            rt.llm.register_adapter(["mock"], adapter)

            async def effect(args: Any, exec: ToolExec) -> str:
                with open(tmp_path / "effects.log", "a") as log:
                    log.write(f"{exec.agent.id} {exec.call_id}\n")
                return "done again"

            rt.tools.register(
                define_tool(name="effect", description="changes the world",
                            parameters={"type": "object"}, execute=effect)
            )  # fmt: skip
            for n in range(KILLS):
                session_id = f"marker-{n}"
                stored = await store.load(session_id)
                types = [e.type for e in stored]
                assert "tool/call" in types, (session_id, types)
                call = stored[types.index("tool/call")]
                assert call.data.call_id == f"e{n}"
                before = types[: types.index("tool/call")]
                assert before[-2:] == ["request/context", "assistant/message"]
                adapter.add(*[asks_for_the_effect] * 3)
                await dead_holder(store, session_id)
                agent = (
                    await rt.agents.resume(resume_session_id=session_id, agent_options=OPTIONS)
                ).agent
                await asyncio.wait_for(agent.when_idle(), 20)
                agent.followup(user_message("did it work?"))
                await asyncio.wait_for(agent.when_idle(), 20)
                results = [e for e in agent.session.events if e.type == "tool/result"]
                assert [r.data.error.code for r in results] == ["TOOL_OUTCOME_UNKNOWN"]
                assert_well_formed(agent.session)
        finally:
            await rt.close()
            await store.close()
        effects = (tmp_path / "effects.log").read_text().splitlines()
        counts = Counter(line.split()[0] for line in effects)
        assert counts == {f"marker-{n}": 1 for n in range(KILLS)}


@pytest.mark.parametrize("kind", ["sqlite", "postgresql"])
async def test_a_killed_write_file_is_reconciled_from_the_file(kind: str, tmp_path: Path) -> None:
    """Reconcile after real kills: ``write_file`` killed before its write resumes as
    ``TOOL_OUTCOME_UNKNOWN`` (the file holds the old content, so nothing vouches for the
    call); killed after it, as its reconciled success (``reconciled: true``), which the
    next request shows the model."""
    rounds = 4
    async with store_url(kind, tmp_path) as url:
        await kill_rounds("write", url, tmp_path, rounds)
        store = open_store(url)
        rt = await Runtime.open(store=store)
        try:
            adapter = ScriptedAdapter()
            rt.llm.register_adapter(["mock"], adapter)
            for n in range(rounds):
                root = tmp_path / f"ws-{n}"
                written = (root / "note.txt").read_text() == CONTENT
                assert written == (n % 2 == 1)
                disposers = [rt.tools.register(t) for t in workspace_tools(root)]
                await dead_holder(store, f"write-{n}")
                agent = (
                    await rt.agents.resume(resume_session_id=f"write-{n}", agent_options=OPTIONS)
                ).agent
                (result,) = [e for e in agent.session.events if e.type == "tool/result"]
                adapter.add(text_response("ok"))
                agent.followup(user_message("status?"))
                await asyncio.wait_for(agent.when_idle(), 20)
                (sent,) = [
                    m for m in adapter.requests[-1].messages if isinstance(m, ToolResultMessage)
                ]
                assert sent == result.data.message
                if written:
                    assert result.data.reconciled is True and result.data.error is None
                    assert sent.content[0].text.startswith("wrote note.txt (16 bytes); confirmed")  # type: ignore[union-attr]
                else:
                    assert result.data.reconciled is None
                    assert result.data.error.code == "TOOL_OUTCOME_UNKNOWN"
                for dispose in disposers:
                    dispose()
        finally:
            await rt.close()
            await store.close()


STOP_CHILD = Path(__file__).with_name("_effects_stop_child.py")
STOP_SESSIONS = 3
STOP_WAIT = 30.0


def starts_of(path: Path) -> list[tuple[float, str, str]]:
    """``(time, session, call id)`` of every tool start the stopped child recorded."""
    if not path.exists():
        return []
    text = path.read_text()
    lines = text.splitlines()[: text.count("\n")]  # whole lines only (a write may be under way)
    rows = [line.split() for line in lines]
    return [(float(t), session, call) for t, session, call in rows]


async def until(predicate: Any, what: str, timeout: float = STOP_WAIT) -> Any:
    """Poll ``predicate()`` (sync or async) until it is truthy (bounded)."""
    async with asyncio.timeout(timeout):
        while True:
            value = predicate()
            if asyncio.iscoroutine(value):
                value = await value
            if value:
                return value
            await asyncio.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")  # pragma: no cover


async def test_a_worker_stopped_past_its_lease_starts_no_tool_after_it(tmp_path: Path) -> None:
    """Fenced dispatch (PostgreSQL, lease TTL 1 s): a process running three agents that call
    an exclusive tool step after step is SIGSTOPped at a random moment, stays stopped until
    every lease expired, and the sessions are taken over (new writers, new tokens). After
    SIGCONT it wakes up to passed lease deadlines: no tool starts after its lease's expiry
    (0 of all recorded starts), its agents stop, and every start it made before has its
    ``tool/call`` in the stored log."""
    async with store_url("postgresql", tmp_path) as url:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
        proc = await asyncio.create_subprocess_exec(
            sys.executable, str(STOP_CHILD), f"{url}&lease_ttl=1", str(tmp_path),
            str(STOP_SESSIONS),
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=env,
        )  # fmt: skip
        log = tmp_path / "starts.log"
        sessions = [f"stop-{n}" for n in range(STOP_SESSIONS)]
        store = PostgresStore(url)
        writers = []
        try:
            await until(
                lambda: all(sum(1 for s in starts_of(log) if s[1] == sid) >= 5 for sid in sessions),
                "the agents to act",
            )
            await asyncio.sleep(random.uniform(0, 0.05))  # a random moment of its work
            os.kill(proc.pid, signal.SIGSTOP)
            try:
                leases = await until(
                    lambda: expired_leases(store, sessions), "the stopped leases to expire"
                )
                expiry = {info.session_id: info.expires_at.timestamp() for info in leases}
                writers = [await store.open_writer(sid) for sid in sessions]  # the takeover
            finally:
                os.kill(proc.pid, signal.SIGCONT)
            assert proc.stdout is not None
            line = await asyncio.wait_for(proc.stdout.readline(), STOP_WAIT)
            assert line == b"idle\n", line
            starts = starts_of(log)
            late = [s for s in starts if s[0] > expiry[s[1]]]
            assert late == []
            for sid in sessions:
                stored = {e.data.call_id for e in await store.load(sid) if e.type == "tool/call"}
                assert {call for _, s, call in starts if s == sid} <= stored
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
            for writer in writers:
                await writer.discard()
            await store.close()


async def expired_leases(store: PostgresStore, sessions: list[str]) -> list[Any] | None:
    """The leases of ``sessions`` once none is live any more (``None`` before)."""
    infos = [await store.lease(sid) for sid in sessions]
    if all(info is not None and not info.live for info in infos):
        return infos
    return None
