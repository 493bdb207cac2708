"""Durable waits (issue 26's frontend tools, issue 30's stateless inputs): a crash while a
step's calls wait for a client's result or a person's answer does not end the wait. Restore
repair keeps the turn open; the resumed agent re-enters the step, waits again (nothing
appended), commits the answer as that same call's ``tool/result`` in model order, writes
``step/end`` and continues the turn (C7.2-9's exception, ``session/_waits``).

Crashed logs are made as in ``test_resume``: a prefix of a stored log under a new id (the
killed-process tests are ``test_durable_waits_crash.py`` and the service's).
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from steerloop import CancelCause, define_tool, user_message
from steerloop.agent._client_calls import ClientTool
from steerloop.messages import ToolResultMessage
from steerloop.session import pending_inputs
from steerloop.session._deferred import pending_deferred
from steerloop.session._input_events import InputAnswered, InputRequest
from steerloop.session._repair import plan_repair, plan_restore
from steerloop.session._waits import InputWait, waiting_step
from steerloop.session.events import ToolDeferred
from steerloop.testing import text_response, tool_call_response, tool_calls_response
from steerloop.tools import ToolExec, ToolResult
from steerloop.workspace import install_approval

from ..conftest import Harness, compact, settle, within
from ..logcheck import assert_well_formed
from .test_resume import OPTIONS, crash_copy, is_call, is_type, resume, store_of, stored

PICK = ClientTool("pick_color", "Ask the user to pick a color", {"type": "object"})
SCHEMA = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
SEED_END = "session/end-seed"


def plain_tool(name: str) -> Any:
    return define_tool(
        name=name, description=name, parameters={"type": "object"}, execute=lambda a, e: name
    )


def after_seed(agent: Any) -> list[str]:
    """The resumed lifecycle's part of the log, in CONTRACTS.md notation."""
    log = compact(agent.session)
    return log[log.index(SEED_END) :]


def is_deferred(call_id: str) -> Any:
    return lambda e: e.type == "tool/deferred" and e.data.call_id == call_id


async def until(predicate: Any, what: str) -> None:
    for _ in range(2000):
        if predicate():
            return
        await asyncio.sleep(0)
    raise AssertionError(f"never: {what}")


async def client_call_crash(hs: Harness, *script: Any, cut: Any = None) -> int:
    """Run ``s-1`` with the client tool offered until ``c1`` waits for the client, then store
    a crash of it as ``crashed`` (cut at ``c1``'s ``tool/deferred``); returns the events kept."""
    agent = await hs.agent(*script)
    agent.client_calls.offer([PICK])
    agent.followup(user_message("u1"))
    await until(lambda: agent.client_calls.pending, "c1 waits for the client")
    await agent.session.flush()
    return crash_copy(store_of(hs.rt), "s-1", "crashed", cut or is_deferred("c1"))


# --- client calls ----------------------------------------------------------------------------


async def test_a_client_call_waiting_at_a_crash_is_taken_up_and_answered(hs: Harness) -> None:
    """The resumed log gets only ``session/end-seed``: the turn stays open and running, the
    call waits again (its ``tool/deferred`` re-offered, nothing appended); the client's answer
    is committed as ``result(c1)`` — the same call id, citing its ``tool/call`` — then
    ``S-1.1`` and the turn continues (a request is owed) to ``T-1:completed``. The model's
    next request ends with that result."""
    kept = await client_call_crash(
        hs, tool_call_response("c1", "pick_color", {"hint": "warm"}), text_response("red it is")
    )
    original = stored(store_of(hs.rt), "crashed")
    assert pending_deferred(original) and plan_repair(original)  # C7.2-9 would close it
    agent = await resume(hs, "crashed")
    assert list(agent.session.events[:kept]) == original
    assert after_seed(agent) == [SEED_END]
    assert agent.status == "running"
    record = ToolDeferred(
        turn=1, step=1, call_id="c1", name="pick_color", arguments='{"hint": "warm"}'
    )
    assert agent.client_calls.pending == (record,)
    requests = len(hs.adapter.requests)
    agent.client_calls.answer("c1", "red")
    await settle(agent)
    assert after_seed(agent) == [
        SEED_END, "result(c1)", "S-1.1", "S+1.2", "hdr(resume)", "msg", "S-1.2", "T-1:completed",
    ]  # fmt: skip
    call = next(e for e in agent.session.events if is_call("c1")(e))
    result = next(e for e in agent.session.events if e.type == "tool/result")
    assert result.source_event_seqs == (call.seq,) and result.data.step == 1
    assert result.data.message.content[0].text == "red"
    last = hs.adapter.requests[requests].messages[-1]
    assert isinstance(last, ToolResultMessage) and last.call_id == "c1"
    assert last.content[0].text == "red"  # type: ignore[union-attr]
    assert pending_deferred(agent.session.events) == ()
    assert_well_formed(agent.session)


async def test_answered_calls_stay_and_calls_never_started_start_after_the_wait(
    hs: Harness,
) -> None:
    """Model order across the crash: ``a`` committed before it, ``c1`` waits, ``b`` never
    started. Resumed: ``a`` is not touched, ``c1`` commits first, then ``b`` starts
    (``call(b)`` after ``result(c1)``, as behind an exclusive call) and commits."""
    hs.rt.tools.register(plain_tool("echo"))
    await client_call_crash(
        hs,
        tool_calls_response([("a", "echo", {}), ("c1", "pick_color", {}), ("b", "echo", {})]),
        text_response("done"),
    )
    step = waiting_step(stored(store_of(hs.rt), "crashed"))
    assert step is not None and (step.committed, [w.call.call_id for w in step.waits]) == (
        1,
        ["c1"],
    )
    agent = await resume(hs, "crashed")
    agent.client_calls.answer("c1", "red")
    await settle(agent)
    assert compact(agent.session, only=("call(", "defer(", "result(", "S-", "T-", SEED_END)) == [
        "call(a)", "result(a)", "call(c1)", "defer(c1)", SEED_END,
        "result(c1)", "call(b)", "result(b)", "S-1.1", "S-1.2", "T-1:completed",
    ]  # fmt: skip
    assert [m.call_id for m in hs.adapter.requests[-1].messages if m.role == "tool"] == [
        "a",
        "c1",
        "b",
    ]
    assert_well_formed(agent.session)


async def test_a_cancel_answers_a_taken_up_wait_and_the_calls_never_started(hs: Harness) -> None:
    """C7.8-12 after a crash: the re-entered wait ends ``ABORTED`` (its body had started),
    the call never started gets ``call`` + ``ABORTED_BEFORE_DISPATCH``, then ``S-1.1`` and
    ``T-1:aborted``; the answer that comes later is refused."""
    await client_call_crash(
        hs, tool_calls_response([("c1", "pick_color", {}), ("c2", "pick_color", {})])
    )
    agent = await resume(hs, "crashed")
    agent.cancel(CancelCause.user())
    await settle(agent)
    assert after_seed(agent) == [
        SEED_END, "result(c1,ABORTED)", "call(c2)", "result(c2,ABORTED_BEFORE_DISPATCH)",
        "S-1.1", "T-1:aborted",
    ]  # fmt: skip
    assert agent.client_calls.pending == ()
    with pytest.raises(ValueError, match="does not wait"):
        agent.client_calls.answer("c1", "late")
    assert_well_formed(agent.session)


async def test_an_answer_before_the_driver_runs_is_kept(hs: Harness) -> None:
    """The waits are armed when ``resume`` returns: an answer given at once, before the
    driver's task ever ran, is committed."""
    await client_call_crash(hs, tool_call_response("c1", "pick_color", {}), text_response("ok"))
    handle = await hs.rt.agents.resume(resume_session_id="crashed", agent_options=OPTIONS)
    handle.agent.client_calls.answer("c1", "now")
    await settle(handle.agent)
    assert after_seed(handle.agent)[:3] == [SEED_END, "result(c1)", "S-1.1"]


async def test_disposing_a_taken_up_turn_aborts_it_disposed(hs: Harness) -> None:
    await client_call_crash(hs, tool_call_response("c1", "pick_color", {}))
    handle = await hs.rt.agents.resume(resume_session_id="crashed", agent_options=OPTIONS)
    await within(handle.dispose())
    assert after_seed(handle.agent) == [SEED_END, "result(c1,ABORTED)", "S-1.1", "T-1:aborted"]
    assert handle.agent.session.events[-1].data.reason.reason.kind == "disposed"


async def test_a_send_while_a_turn_is_taken_up_waits_for_the_next_turn(hs: Harness) -> None:
    """A followup during the re-entered turn does not open a turn inside it: it is claimed
    by turn 2, after ``T-1``; a steer joins turn 1's next step."""
    await client_call_crash(
        hs, tool_call_response("c1", "pick_color", {}), text_response("one"), text_response("two")
    )
    agent = await resume(hs, "crashed")
    agent.followup(user_message("later"))
    agent.steer(user_message("also"))
    agent.client_calls.answer("c1", "red")
    await settle(agent)
    assert after_seed(agent) == [
        SEED_END, "ins(nt,later)", "ins(ns,also)", "result(c1)", "S-1.1", "claim(ns,also)",
        "S+1.2", "user(also)", "hdr(resume)", "msg", "S-1.2", "T-1:completed",
        "T+2", "claim(nt,later)", "S+2.1", "user(later)", "msg", "S-2.1", "T-2:completed",
    ]  # fmt: skip
    assert_well_formed(agent.session)


# --- what restore repair still closes (C7.2-9 as before) ------------------------------------


async def test_a_started_call_that_is_no_wait_closes_the_turn_as_before(hs: Harness) -> None:
    """Counterexample: ``c0`` started (no result, no wait) before the crash, so nothing says
    how its result could come: the turn is repaired as C7.2-9 says, the wait with it."""
    await client_call_crash(
        hs,
        tool_calls_response([("c0", "echo", {}), ("c1", "pick_color", {})]),
        cut=is_call("c0"),
    )
    crashed = stored(store_of(hs.rt), "crashed")
    assert waiting_step(crashed) is None
    agent = await resume(hs, "crashed")
    assert after_seed(agent)[0] == SEED_END
    assert compact(agent.session)[-5:] == [
        "result(c0,TOOL_OUTCOME_UNKNOWN)", "result(c1,TOOL_NOT_STARTED)", "S-1.1",
        "T-1:interrupted", SEED_END,
    ]  # fmt: skip
    assert agent.status == "idle"


async def test_an_approval_held_at_the_crash_is_repaired_not_started(hs: Harness) -> None:
    """EVENTS.md §2.4a stays: a call held for a decision is not a durable wait, so the turn
    is closed (``TOOL_NOT_STARTED``) even with nothing else open."""
    hs.rt.tools.register(plain_tool("write"))
    install_approval(hs.rt, "ask")
    agent = await hs.agent(tool_call_response("c1", "write", {}))
    agent.followup(user_message("u1"))
    await until(lambda: agent.pending_approvals, "c1 is held")
    await agent.session.flush()
    crash_copy(store_of(hs.rt), "s-1", "crashed", is_type("tool/approval-requested"))
    resumed = await resume(hs, "crashed")
    assert compact(resumed.session)[-4:] == [
        "result(c1,TOOL_NOT_STARTED)", "S-1.1", "T-1:interrupted", SEED_END,
    ]  # fmt: skip


async def test_a_fork_child_never_inherits_a_wait(hs: Harness) -> None:
    """C7.10-9: the waiting tail is the parent's; a child seeded with it repairs it."""
    await client_call_crash(hs, tool_call_response("c1", "pick_color", {}))
    crashed = stored(store_of(hs.rt), "crashed")
    fixes, step = plan_restore(crashed)
    assert fixes == [] and step is not None
    assert [f.type for f in plan_repair(crashed)] == ["tool/result", "step/end", "turn/end"]


# --- input waits (the agent side of issue 30's stateless inputs) -----------------------------


class Transport:
    """A tool standing in for a transport that drives the 2026-07-28 input rounds itself:
    its body asks a person with ``resume`` state; after a restart, ``resume`` finishes the
    call with the answer (what the transport would send the server)."""

    def __init__(self, hs: Harness) -> None:
        self.resumed: list[tuple[Any, InputAnswered]] = []

        async def ask(args: Any, exec: ToolExec) -> str:
            request = InputRequest(
                id=f"in-{exec.call_id}",
                server="srv",
                message="how many?",
                schema=SCHEMA,
                call_id=exec.call_id,
                turn=exec.turn,
                resume={"request_state": "rs-1", "tool": "ask"},
            )
            answer = await live(exec.agent).inputs.wait(request, exec.signal)
            return f"live {answer.content}"

        hs.rt.tools.register(
            define_tool(name="ask", description="asks", parameters={"type": "object"}, execute=ask)
        )

    def install(self, hs: Harness) -> None:
        async def resume_call(request: Any, answer: InputAnswered, exec: ToolExec) -> ToolResult:
            self.resumed.append((request.resume, answer))
            return ToolResult(content=f"finished {exec.call_id} with {answer.content}")

        hs.rt.loop_services.resumers.register("srv", resume_call)


def live(agent: Any) -> Any:
    from steerloop.agent._agent import live_agent

    return live_agent(agent)


async def input_crash(hs: Harness, cut: str = "input/requested") -> Transport:
    transport = Transport(hs)
    agent = await hs.agent(tool_call_response("c1", "ask", {}), text_response("thanks"))
    agent.followup(user_message("u1"))
    await until(lambda: agent.pending_inputs, "c1 asks")
    if cut == "input/answered":
        agent.answer_input("in-c1", "accept", {"n": 4}, by="me")
    await agent.session.flush()
    crash_copy(store_of(hs.rt), "s-1", "crashed", is_type(cut))
    return transport


async def test_an_input_wait_is_taken_up_and_its_transport_finishes_the_call(
    hs: Harness,
) -> None:
    """The request is pending again (``agent.pending_inputs``, nothing appended); the answer
    is written (``input/answered``) and handed with the request's ``resume`` state to the
    server's resumer, whose result is ``c1``'s; the turn continues."""
    transport = await input_crash(hs)
    transport.install(hs)
    agent = await resume(hs, "crashed")
    (request,) = agent.pending_inputs
    assert isinstance(waiting_step(agent.session.events).waits[0], InputWait)  # type: ignore[union-attr]
    assert pending_inputs(agent.session.events) == (request,)
    assert after_seed(agent) == [SEED_END]
    agent.answer_input("in-c1", "accept", {"n": 3}, by="me")
    await settle(agent)
    assert after_seed(agent) == [
        SEED_END, "input/answered", "result(c1)", "S-1.1", "S+1.2", "hdr(resume)", "msg",
        "S-1.2", "T-1:completed",
    ]  # fmt: skip
    assert transport.resumed == [
        (
            {"request_state": "rs-1", "tool": "ask"},
            InputAnswered(id="in-c1", action="accept", content={"n": 3}, by="me"),
        )
    ]
    last = hs.adapter.requests[-1].messages[-1]
    assert isinstance(last, ToolResultMessage) and last.call_id == "c1"
    assert last.content[0].text == "finished c1 with {'n': 3}"  # type: ignore[union-attr]
    assert_well_formed(agent.session)


async def test_an_answer_logged_before_the_crash_finishes_the_call_at_once(hs: Harness) -> None:
    """``input/answered`` was durable, the call's finishing was not: the resumer gets the
    logged answer right away; nothing is asked again."""
    transport = await input_crash(hs, cut="input/answered")
    transport.install(hs)
    agent = await resume(hs, "crashed")
    assert agent.pending_inputs == ()
    await settle(agent)
    assert after_seed(agent)[:3] == [SEED_END, "result(c1)", "S-1.1"]
    assert transport.resumed[0][1].content == {"n": 4}


async def test_a_cancel_answers_a_taken_up_input_cancel(hs: Harness) -> None:
    transport = await input_crash(hs)
    transport.install(hs)
    agent = await resume(hs, "crashed")
    agent.cancel(CancelCause.user())
    await settle(agent)
    assert after_seed(agent) == [
        SEED_END, "input/answered", "result(c1,ABORTED)", "S-1.1", "T-1:aborted",
    ]  # fmt: skip
    answered = agent.session.events[-4].data
    assert answered == InputAnswered(id="in-c1", action="cancel")
    assert transport.resumed == []


async def test_an_input_wait_no_transport_here_can_finish_is_answered_unknown(
    hs: Harness,
) -> None:
    """Lost: the log says the wait is resumable, but this process has no resumer for its
    server. The call is answered as recovery answers a started call (TOOL_OUTCOME_UNKNOWN)
    and the turn goes on: the model is told, not the turn ended."""
    await input_crash(hs)
    agent = await resume(hs, "crashed")
    await settle(agent)
    assert after_seed(agent) == [
        SEED_END, "result(c1,TOOL_OUTCOME_UNKNOWN)", "S-1.1", "S+1.2", "hdr(resume)", "msg",
        "S-1.2", "T-1:completed",
    ]  # fmt: skip
    assert pending_inputs(agent.session.events) == ()
    assert_well_formed(agent.session)


async def test_an_input_without_resume_state_is_repaired_as_before(hs: Harness) -> None:
    """Counterexample: a request a transport cannot finish after a restart (no ``resume``:
    the SDK drives the rounds) is no durable wait; C7.2-9 closes the turn."""
    transport = await input_crash(hs)
    crashed = stored(store_of(hs.rt), "crashed")
    step = waiting_step(crashed)
    assert step is not None and isinstance(step.waits[0], InputWait)
    lines = list(store_of(hs.rt).raw("crashed"))
    last = lines[-1].replace('"resume":{"request_state":"rs-1","tool":"ask"}', '"resume":null')
    assert last != lines[-1]
    store_of(hs.rt).put_raw("plain", [*lines[:-1], last])
    assert waiting_step(stored(store_of(hs.rt), "plain")) is None
    transport.install(hs)
    agent = await resume(hs, "plain")
    assert compact(agent.session)[-4:] == [
        "result(c1,TOOL_OUTCOME_UNKNOWN)", "S-1.1", "T-1:interrupted", SEED_END,
    ]  # fmt: skip
