"""Durable waits across a real crash: a child process on a SQLite file is SIGKILLed while its
call ``c1`` waits (for a client's result; for a person's answer it asked with ``resume``
state), and this process resumes the session: the turn is taken up, not repaired, and the
answer completes ``c1`` itself. The input case is the agent side of issue 30's stateless
inputs (the transport's resumer is a stand-in here: main's MCP client lets the SDK drive
the rounds, so it records no ``resume`` state)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from steerloop import AgentOptions, Runtime
from steerloop.messages import ToolResultMessage
from steerloop.session._input_events import InputAnswered
from steerloop.testing import ScriptedAdapter, text_response
from steerloop.tools import ToolExec, ToolResult

from ..conftest import compact, settle
from ..logcheck import assert_well_formed
from ..support import kill_after_first_line

CHILD = Path(__file__).with_name("_waits_crash_child.py")
OPTIONS = AgentOptions(provider="mock", model="m")


@pytest.mark.parametrize("mode", ["client", "input"])
async def test_a_wait_killed_with_its_process_is_completed_after_resume(
    tmp_path: Path, mode: str
) -> None:
    """The stored log ends with the wait (``defer(c1)`` / ``input/requested``); resume
    appends only ``session/end-seed`` and the agent runs the open turn; the answer gives
    ``result(c1)`` (citing its ``tool/call``), ``S-1.1``, the next step, ``T-1:completed``;
    the model's request ends with that result."""
    path = tmp_path / "crash.db"
    words = await kill_after_first_line(CHILD, str(path), mode)
    assert words[0] == "waiting"
    rt = await Runtime.open(store=f"sqlite:///{path}")
    try:
        model = ScriptedAdapter([text_response("thanks")])
        rt.llm.register_adapter(["mock"], model)
        finished: list[tuple[Any, InputAnswered]] = []

        async def resume_call(request: Any, answer: InputAnswered, exec: ToolExec) -> ToolResult:
            finished.append((request.resume, answer))
            return ToolResult(content=f"{answer.content['n']} of them")  # type: ignore[index]

        rt.loop_services.resumers.register("srv", resume_call)
        store = rt.sessions.persistence
        assert store is not None
        stored = await store.load("s")
        assert len(stored) == int(words[1])
        assert stored[-1].type == ("tool/deferred" if mode == "client" else "input/requested")
        agent = (await rt.agents.resume(resume_session_id="s", agent_options=OPTIONS)).agent
        assert agent.status == "running"
        assert compact(agent.session)[len(stored) :] == ["session/end-seed"]
        if mode == "client":
            agent.client_calls.answer("c1", "3 of them")
        else:
            (request,) = agent.pending_inputs
            agent.answer_input(request.id, "accept", {"n": 3}, by="me")
        await settle(agent)
        tail = compact(agent.session)[len(stored) :]
        answered = ["input/answered"] if mode == "input" else []
        assert tail == [
            "session/end-seed", *answered, "result(c1)", "S-1.1", "S+1.2", "hdr(resume)", "msg",
            "S-1.2", "T-1:completed",
        ]  # fmt: skip
        call = next(e for e in agent.session.events if e.type == "tool/call")
        result = next(e for e in agent.session.events if e.type == "tool/result")
        assert result.source_event_seqs == (call.seq,)
        last = model.requests[0].messages[-1]
        assert isinstance(last, ToolResultMessage) and last.call_id == "c1"
        assert last.content[0].text == "3 of them"  # type: ignore[union-attr]
        if mode == "input":
            assert finished == [
                (
                    {"request_state": "rs-1"},
                    InputAnswered(id="in-c1", action="accept", content={"n": 3}, by="me"),
                )
            ]
        assert_well_formed(agent.session)
    finally:
        await rt.close()
