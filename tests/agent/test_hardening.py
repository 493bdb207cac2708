"""Every exit path closes its turn (issue 11, items 1 and 2): tools and adapters that raise
what is not an ``Exception``, adapters that yield what is not a chunk, and a systematic
injection of every kind of ``BaseException`` at every await point of a turn (C7.5-20)."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from steerloop import AgentOptions, Runtime, ToolExec, define_tool, user_message
from steerloop.errors import SessionStorageError
from steerloop.llm import GenerateRequest
from steerloop.session._events import AssistantAttempt, StreamRecord
from steerloop.testing import (
    ScriptedAdapter,
    raise_after,
    text_response,
    tool_calls_response,
)

from ..conftest import Harness, compact, events_of, settle
from ..logcheck import assert_well_formed, log_problems


def turn_ends(agent: Any) -> list[Any]:
    return [e.data.reason for e in events_of(agent.session, "turn/end")]


def register(h: Harness, name: str, body: Callable[[], Any], safe: bool = False) -> None:
    async def execute(args: Any, exec: ToolExec) -> Any:
        return await body()

    h.rt.tools.register(
        define_tool(
            name=name,
            description=name,
            parameters={"type": "object"},
            execute=execute,
            concurrency_safe=safe,
        )
    )


async def test_foreign_cancelled_error_from_a_tool_is_a_tool_failure(h: Harness) -> None:
    """A tool awaiting a task someone else cancelled raises ``CancelledError``; that is the
    tool's failure (``TOOL_FAILED``), not the turn's cancellation, and the turn goes on."""

    async def body() -> str:
        inner = asyncio.ensure_future(asyncio.sleep(10))
        await asyncio.sleep(0)
        inner.cancel()
        await inner
        return "unreachable"

    register(h, "victim", body)
    agent = await h.agent(tool_calls_response([("c1", "victim", {})]), text_response("done"))
    agent.followup(user_message("u1"))
    await settle(agent)
    [result] = events_of(agent.session, "tool/result")
    assert result.data.error.code == "TOOL_FAILED" and result.data.error.name == "CancelledError"
    assert [r.kind for r in turn_ends(agent)] == ["completed"]
    assert len(h.adapter.requests) == 2
    assert_well_formed(agent.session)


async def test_generator_exit_from_an_adapter_stream_is_an_attempt_failure(h: Harness) -> None:
    """``GeneratorExit`` raised by an adapter stream fails that attempt: `attempt`, then one
    `turn/end{error}` naming it; the agent keeps working."""

    agent = await h.agent(raise_after([], GeneratorExit("adapter gave up")), text_response("2"))
    agent.followup(user_message("u1"))
    await settle(agent)
    assert compact(agent.session, only=["attempt", "S-", "T-"]) == [
        "attempt", "S-1.1", "T-1:error",
    ]  # fmt: skip
    [reason] = turn_ends(agent)
    assert "GeneratorExit" in reason.error.message and "adapter gave up" in reason.error.message
    agent.followup(user_message("u2"))
    await settle(agent)
    assert [r.kind for r in turn_ends(agent)] == ["error", "completed"]
    assert_well_formed(agent.session)


async def test_a_non_chunk_from_the_adapter_fails_the_attempt(tmp_path: Path) -> None:
    """A value that is not a stream chunk is an adapter failure of that attempt
    (`assistant/attempt` + `turn/end{error BAD_RESPONSE}` naming it) and the stored session
    keeps working: before, the writer had advanced past an event it could not encode and
    refused every later append."""
    rt = await Runtime.open(store=f"sqlite:///{tmp_path / 's.db'}")
    try:
        adapter = ScriptedAdapter([[{"kind": "nonsense"}], text_response("fine")])
        rt.llm.register_adapter(["mock"], adapter)
        handle = await rt.agents.create(
            session_id="s", agent_options=AgentOptions(provider="mock", model="m")
        )
        agent = handle.agent
        agent.followup(user_message("u1"))
        await settle(agent)
        [reason] = turn_ends(agent)
        assert reason.kind == "error" and reason.error.code == "BAD_RESPONSE"
        assert "dict" in reason.error.message and "nonsense" in reason.error.message
        [attempt] = events_of(agent.session, "assistant/attempt")
        assert attempt.data.stream == ()
        agent.followup(user_message("u2"))
        await settle(agent)
        assert [r.kind for r in turn_ends(agent)] == ["error", "completed"]
        await handle.dispose()
        stored = await rt.store.load("s")  # type: ignore[union-attr]
        assert [e.type for e in stored] == [e.type for e in agent.session.events]
    finally:
        await rt.close()


async def test_an_event_that_cannot_encode_does_not_desynchronise_the_writer(
    tmp_path: Path,
) -> None:
    """An append whose payload cannot encode is refused whole; the next append takes its seq
    and the stored log stays contiguous."""
    rt = await Runtime.open(store=f"sqlite:///{tmp_path / 's.db'}")
    try:
        rt.llm.register_adapter(["mock"], ScriptedAdapter())
        handle = await rt.agents.create(
            session_id="s", agent_options=AgentOptions(provider="mock", model="m")
        )
        session = handle.agent.session
        before = len(session.events)
        bad = AssistantAttempt(turn=1, step=1, stream=(StreamRecord(0.0, object()),))  # type: ignore[arg-type]
        with pytest.raises(Exception) as raised:
            session.append(bad)
        assert not isinstance(raised.value, SessionStorageError)
        assert len(session.events) == before
        handle.agent.inject(user_message("after"))  # appends at the refused seq
        await session.flush()
        stored = await rt.store.load("s")  # type: ignore[union-attr]
        assert [e.seq for e in stored] == list(range(1, len(session.events) + 1))
        await handle.dispose()
    finally:
        await rt.close()


# --- injecting every kind of BaseException at every await point ---------------------------


class _Custom(BaseException):
    pass


def _foreign_cancel() -> BaseException:
    return asyncio.CancelledError("someone else's cancellation")


KINDS: dict[str, Callable[[], BaseException]] = {
    "runtime-error": lambda: RuntimeError("injected"),
    "foreign-cancel": _foreign_cancel,
    "keyboard-interrupt": KeyboardInterrupt,
    "system-exit": lambda: SystemExit(3),
    "generator-exit": GeneratorExit,
    "custom-base": lambda: _Custom("injected"),
    "cancel-own-task": lambda: _OwnCancel(),
}


class _OwnCancel(Exception):
    """Marker: cancel the task running the checkpoint instead of raising."""


class _Injector:
    def __init__(self, at: int, kind: str) -> None:
        self.at = at
        self.kind = kind
        self.count = 0
        self.points: list[str] = []

    async def point(self, name: str) -> None:
        """One await point: raise (or cancel the running task) when it is the chosen one."""
        index = self.count
        self.count += 1
        self.points.append(name)
        if index == self.at:
            exc = KINDS[self.kind]()
            if isinstance(exc, _OwnCancel):
                task = asyncio.current_task()
                assert task is not None
                task.cancel()
            else:
                raise exc
        await asyncio.sleep(0)


class _InjectingAdapter(ScriptedAdapter):
    """Two requests: two parallel tool calls, then text; an await point before each chunk."""

    def __init__(self, inject: _Injector) -> None:
        super().__init__()
        self.inject = inject

    async def stream(self, request: GenerateRequest) -> AsyncIterator[Any]:
        self.requests.append(request)
        await self.inject.point("adapter")
        chunks = (
            tool_calls_response([("c1", "a", {}), ("c2", "b", {})])
            if len(self.requests) == 1
            else text_response("done")
        )
        for chunk in chunks:
            await self.inject.point("chunk")
            yield chunk


async def _scenario(inject: _Injector, sessions: list[Any]) -> None:
    rt = await Runtime.open()
    try:
        h = Harness(rt)
        h.adapter = _InjectingAdapter(inject)
        rt.llm.register_adapter(["mock"], h.adapter)

        async def pre_step(payload: Any, next: Any) -> Any:
            await inject.point("pre-step")
            return await next()

        async def request(payload: Any, next: Any) -> Any:
            await inject.point("request")
            return await next()

        async def pre_execute(payload: Any) -> None:
            await inject.point("pre-execute")

        async def post_execute(payload: Any, next: Any) -> Any:
            await inject.point("post-execute")
            return await next()

        async def stopping(payload: Any) -> None:
            await inject.point("turn-stopping")

        for name, listener in (
            ("agent/pre-step", pre_step),
            ("agent/request", request),
            ("tools/pre-execute", pre_execute),
            ("tools/post-execute", post_execute),
            ("agent/turn-stopping", stopping),
        ):
            rt.hooks.on(name, listener)

        async def body() -> str:
            await inject.point("tool")
            await inject.point("tool")
            return "ok"

        register(h, "a", body, safe=True)
        register(h, "b", body, safe=True)
        agent = await h.agent()
        sessions.append(agent.session)
        agent.followup(user_message("u1"))
        await settle(agent)
    finally:
        await asyncio.wait_for(rt.close(), 5.0)


def _run(at: int, kind: str) -> tuple[_Injector, Any, list[Any]]:
    inject = _Injector(at, kind)
    sessions: list[Any] = []
    problems: list[Any] = []
    runner = asyncio.Runner()
    runner.get_loop().set_exception_handler(lambda loop, context: problems.append(context))
    try:
        runner.run(asyncio.wait_for(_scenario(inject, sessions), 10.0))
    except (KeyboardInterrupt, SystemExit, asyncio.CancelledError):
        pass  # the host's exceptions reach the host; the log must be closed anyway
    except BaseException as exc:
        problems.append({"message": f"scenario raised {exc!r}"})
    finally:
        runner.close()
    gc.collect()
    return inject, sessions[0] if sessions else None, problems


# ~200 fresh event loops: bounded by its own, larger timeout on a loaded machine.
@pytest.mark.timeout(600)
def test_every_await_point_closes_the_turn() -> None:
    """C7.5-20: every kind of ``BaseException`` at every await point of a tool turn (two
    parallel tools, two requests, every hook) leaves a well-formed log: one `turn/end` per
    `turn/start`, every step closed, every tool call answered; no task exception is left
    unretrieved."""
    baseline, session, problems = _run(-1, "runtime-error")
    assert session is not None and not problems and not log_problems(session)
    assert [e.data.reason.kind for e in events_of(session, "turn/end")] == ["completed"]
    total = baseline.count
    assert total >= 20, baseline.points
    failures: list[str] = []
    for kind in KINDS:
        for at in range(total):
            inject, session, problems = _run(at, kind)
            where = f"{kind} at {at} ({inject.points[at] if at < len(inject.points) else '?'})"
            if session is None:
                failures.append(f"{where}: no session")
                continue
            ends = events_of(session, "turn/end")
            if len(ends) != 1:
                failures.append(f"{where}: {len(ends)} turn/end")
            failures += [f"{where}: {p}" for p in log_problems(session)]
            failures += [f"{where}: {p.get('message')} {p.get('exception')!r}" for p in problems]
    assert not failures, "\n".join(failures[:40])
