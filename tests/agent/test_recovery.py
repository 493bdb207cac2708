"""In-step recovery (§7.10): a failed step answers every requested call before step/end."""

from __future__ import annotations

from typing import Any, cast

from steerloop import CancelCause, user_message
from steerloop.messages import AssistantMessage, ToolResultMessage
from steerloop.session import SessionEvent
from steerloop.testing import text_response, tool_calls_response, wait_all_tasks_blocked
from steerloop.tools import ToolExec

from ..conftest import Harness, compact, events_of, label, settle
from ..support import Bench, Fault, fail_append, on_event, results_by_call


def from_call(agent: Any, call_id: str) -> list[str]:
    log = compact(agent.session)
    return log[log.index(f"call({call_id})") :]


def result_of(agent: Any, call_id: str) -> SessionEvent:
    (event,) = results_by_call(agent.session)[call_id]
    return cast(SessionEvent, event)


async def failed_step(h: Harness, *, fault_times: int = 1) -> tuple[Any, Bench, list[Any]]:
    """Three exclusive calls; appending c2's tool/result fails ``fault_times`` times."""
    bench = Bench()
    h.rt.tools.register(bench.tool("t"))
    agent = await h.agent(
        tool_calls_response([("c1", "t", {}), ("c2", "t", {}), ("c3", "t", {})]),
        text_response("after"),
    )
    fail_append(agent.session, on_event("c2", "tool/result"), times=fault_times)
    errors: list[Any] = []
    h.rt.hooks.on("agent/error", lambda p: errors.append(p))
    agent.followup(user_message("u1"))
    await settle(agent)
    return agent, bench, errors


async def test_failed_step_answers_every_requested_call(h: Harness) -> None:
    """C7.10-1: before step/end, one conservative result per unanswered call in model order:
    TOOL_OUTCOME_UNKNOWN (citing its tool/call) or TOOL_NOT_STARTED; then T-1:error."""
    agent, bench, errors = await failed_step(h)
    assert from_call(agent, "c1") == [
        "call(c1)", "result(c1)", "call(c2)",
        "result(c2,TOOL_OUTCOME_UNKNOWN)", "result(c3,TOOL_NOT_STARTED)",
        "S-1.1", "T-1:error",
    ]  # fmt: skip
    call_c2 = next(e for e in events_of(agent.session, "tool/call") if e.data.call_id == "c2")
    assert result_of(agent, "c2").source_event_seqs == (call_c2.seq,)
    assert result_of(agent, "c2").data.message.is_error
    assert result_of(agent, "c3").data.message.is_error
    assert bench.trace == ["begin:c1", "end:c1", "begin:c2", "end:c2"]
    assert [(p.turn, p.step) for p in errors] == [(1, 1)]
    assert isinstance(errors[0].error, Fault)


async def test_committed_results_are_left_alone(h: Harness) -> None:
    """C7.10-2: a result committed before the failure is kept as written; every call ends
    with exactly one result."""
    committed: list[SessionEvent] = []
    bench = Bench()
    h.rt.tools.register(bench.tool("t"))
    agent = await h.agent(tool_calls_response([("c1", "t", {}), ("c2", "t", {}), ("c3", "t", {})]))

    def keep(payload: Any) -> None:
        if payload.event.type == "tool/result":
            committed.append(payload.event)

    h.rt.hooks.on("session/event", keep)
    fail_append(agent.session, on_event("c3", "tool/call"))
    agent.followup(user_message("u1"))
    await settle(agent)
    results = results_by_call(agent.session)
    assert {k: len(v) for k, v in results.items()} == {"c1": 1, "c2": 1, "c3": 1}
    assert results["c1"][0] is committed[0]
    assert label(results["c1"][0].data.message) == "r-c1"
    assert results["c1"][0].data.error is None
    assert from_call(agent, "c1") == [
        "call(c1)", "result(c1)", "call(c2)", "result(c2)", "result(c3,TOOL_NOT_STARTED)",
        "S-1.1", "T-1:error",
    ]  # fmt: skip


async def test_conservative_contents_do_not_claim_an_outcome(h: Harness) -> None:
    """C7.10-3: recovery never re-runs a tool; OUTCOME_UNKNOWN asks to verify before
    retrying, NOT_STARTED says the call never ran."""
    agent, bench, _ = await failed_step(h)
    unknown = label(result_of(agent, "c2").data.message)
    not_started = label(result_of(agent, "c3").data.message)
    assert "may or may not" in unknown
    assert "verify" in unknown
    assert "never started" in not_started
    assert "did not run" in not_started
    assert bench.trace.count("begin:c2") == 1
    assert "begin:c3" not in bench.trace


async def test_next_request_after_recovery_is_provider_valid(h: Harness) -> None:
    """C7.10-4: after recovery every tool call of the failed message has exactly one result."""
    agent, _, _ = await failed_step(h)
    agent.followup(user_message("u2"))
    await settle(agent)
    assert compact(agent.session)[-1] == "T-2:completed"
    messages = h.adapter.requests[-1].messages
    (assistant,) = [m for m in messages if isinstance(m, AssistantMessage) and m.tool_calls]
    index = messages.index(assistant)
    answers = messages[index + 1 : index + 4]
    assert all(isinstance(m, ToolResultMessage) for m in answers)
    assert [m.call_id for m in answers] == [c.id for c in assistant.tool_calls]  # type: ignore[union-attr]
    assert [label(m) for m in messages[index + 4 :]] == ["u2"]


async def test_calls_recorded_by_any_writer_during_the_step_count(h: Harness) -> None:
    """C7.10-5: a tool/call recorded by another writer during the step counts
    (OUTCOME_UNKNOWN); one recorded before the step does not (NOT_STARTED)."""
    from steerloop.session._events import ToolCallEvent

    bench = Bench()

    async def record_c3(args: Any, exec: ToolExec) -> str:
        exec.agent.session.append(
            ToolCallEvent(turn=exec.turn, step=exec.step, call_id="c3", name="t", arguments="{}"),
        )
        return "ok"

    h.rt.tools.register(bench.tool("t"))
    h.rt.tools.register(bench.tool("writer", then=record_c3))
    agent = await h.agent(
        tool_calls_response(
            [("c1", "writer", {}), ("c2", "t", {}), ("c3", "t", {}), ("c4", "t", {})]
        )
    )
    # Before the step: a stray tool/call for c4 that the step must not count.
    agent.session.append(ToolCallEvent(turn=0, step=0, call_id="c4", name="t", arguments="{}"))
    fail_append(agent.session, on_event("c2", "tool/call"))
    agent.followup(user_message("u1"))
    await settle(agent)
    assert from_call(agent, "c1") == [
        "call(c1)", "call(c3)", "result(c1)",
        "result(c2,TOOL_NOT_STARTED)", "result(c3,TOOL_OUTCOME_UNKNOWN)",
        "result(c4,TOOL_NOT_STARTED)", "S-1.1", "T-1:error",
    ]  # fmt: skip


async def test_nothing_is_tracked_after_step_end(h: Harness) -> None:
    """C7.10-5: a later failed step only answers its own message's calls."""
    bench = Bench()
    h.rt.tools.register(bench.tool("t"))
    agent = await h.agent(
        tool_calls_response([("a1", "t", {}), ("a2", "t", {})]),
        tool_calls_response([("b1", "t", {})]),
    )
    fail_append(agent.session, on_event("a2", "tool/call"))
    agent.followup(user_message("u1"))
    await settle(agent)
    fail_append(agent.session, on_event("b1", "tool/result"))
    agent.followup(user_message("u2"))
    await settle(agent)
    results = results_by_call(agent.session)
    assert {
        k: [e.data.error.code if e.data.error else None for e in v] for k, v in results.items()
    } == {
        "a1": [None],
        "a2": ["TOOL_NOT_STARTED"],
        "b1": ["TOOL_OUTCOME_UNKNOWN"],
    }
    log = compact(agent.session)
    assert log[log.index("T+2") :][-4:] == [
        "call(b1)", "result(b1,TOOL_OUTCOME_UNKNOWN)", "S-2.1", "T-2:error",
    ]  # fmt: skip


async def test_failing_recovery_groups_errors_original_first(h: Harness) -> None:
    """C7.10-6: if appending a recovery result fails too, the step's error is an
    ExceptionGroup with the original first; step/end is still written and turn/end
    describes the original failure."""
    agent, _, errors = await failed_step(h, fault_times=2)
    assert len(errors) == 1
    error = errors[0].error
    assert isinstance(error, ExceptionGroup)
    assert isinstance(error.exceptions[0], Fault)
    assert "tool/result for c2" in str(error.exceptions[0])
    assert isinstance(error.exceptions[1], Fault)
    assert error.exceptions[0] is not error.exceptions[1]
    assert from_call(agent, "c1")[-3:] == ["call(c2)", "S-1.1", "T-1:error"]
    reason = events_of(agent.session, "turn/end")[0].data.reason
    assert reason.kind == "error"
    assert "injected failure appending tool/result for c2" in reason.error.message


async def test_cancellation_never_gives_outcome_unknown(h: Harness) -> None:
    """C7.10-7: an abort drains started calls and answers the rest with
    ABORTED_BEFORE_DISPATCH, never TOOL_OUTCOME_UNKNOWN. Counterexample: a scheduler
    failure with a body still unrecorded does (see C7.9-20)."""

    async def until_abort(args: Any, exec: ToolExec) -> str:
        await exec.signal.wait()
        return "done"

    bench = Bench()
    h.rt.tools.register(bench.tool("p", safe=True, then=until_abort))
    h.rt.tools.register(bench.tool("e"))
    agent = await h.agent(tool_calls_response([("c1", "p", {}), ("c2", "p", {}), ("c3", "e", {})]))
    agent.followup(user_message("u1"))
    await bench.wait_started("c1", "c2")
    agent.cancel(CancelCause.user())
    await settle(agent)
    codes = [e.data.error.code for e in events_of(agent.session, "tool/result")]
    assert codes == ["ABORTED", "ABORTED", "ABORTED_BEFORE_DISPATCH"]
    assert compact(agent.session)[-2:] == ["S-1.1", "T-1:aborted"]


async def test_scheduler_failure_with_unrecorded_body_gives_outcome_unknown(h: Harness) -> None:
    """C7.10-7 (counterexample): a scheduler failure while a started body has no result
    leads to TOOL_OUTCOME_UNKNOWN for it."""
    bench = Bench()
    h.rt.tools.register(bench.tool("p", safe=True))
    bench.gate("c2")
    agent = await h.agent(tool_calls_response([("c1", "p", {}), ("c2", "p", {})]))
    fail_append(agent.session, on_event("c1", "tool/result"))
    agent.followup(user_message("u1"))
    await bench.wait_started("c2")
    await wait_all_tasks_blocked()
    bench.release("c2")
    await settle(agent)
    codes = [e.data.error.code for e in events_of(agent.session, "tool/result")]
    assert codes == ["TOOL_OUTCOME_UNKNOWN", "TOOL_OUTCOME_UNKNOWN"]
    assert compact(agent.session)[-2:] == ["S-1.1", "T-1:error"]
