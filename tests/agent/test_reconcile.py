"""Unknown outcomes resolved (issue 24): at recovery, a call that would be
``TOOL_OUTCOME_UNKNOWN`` is offered to its tool's ``reconcile``; a ``ToolResult`` it returns
is recorded as the call's ``tool/result`` with ``reconciled: true``; anything else keeps the
conservative answer (C7.2-9, C7.10-1, C7.10-8).

Crashed logs are made as in ``test_resume``: a stored prefix ending right after the call's
``tool/call``.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

from steerloop import ToolResult, user_message
from steerloop.agent._recovery import OUTCOME_UNKNOWN_TEXT
from steerloop.messages import TextBlock, ToolCallBlock
from steerloop.testing import text_response, tool_calls_response
from steerloop.tools import ToolError, ToolExec
from steerloop.tools._define import idempotency_key

from ..conftest import Harness, compact, settle
from ..logcheck import assert_well_formed
from ..support import Bench, fail_append, on_event, results_by_call
from .test_resume import crash_copy, is_call, resume, store_of, two_call_run


class Asked:
    """A ``reconcile`` that records what it was asked and answers ``answer``."""

    def __init__(self, answer: Any) -> None:
        self.answer = answer
        self.calls: list[tuple[ToolCallBlock, ToolExec]] = []
        self.threads: list[str] = []

    def __call__(self, call: ToolCallBlock, exec: ToolExec) -> Any:
        self.calls.append((call, exec))
        self.threads.append(threading.current_thread().name)
        if isinstance(self.answer, BaseException):
            raise self.answer
        return self.answer


async def crashed_after_c1(hs: Harness, reconcile: Any) -> Any:
    """``two_call_run``'s log cut right after ``call(c1)``, resumed with ``t`` reconciling."""
    await two_call_run(hs)
    crash_copy(store_of(hs.rt), "s-1", "crashed", is_call("c1"))
    hs.rt.tools.register(Bench().tool("t", reconcile=reconcile))
    return await resume(hs, "crashed")


def tail(agent: Any) -> list[str]:
    log = compact(agent.session)
    return log[log.index("call(c1)") :]


async def test_a_reconciled_call_is_recorded_as_its_result(hs: Harness) -> None:
    """Restore repair asks ``reconcile`` for the call with a ``tool/call`` and no result;
    its answer is ``result(c1)`` with ``reconciled: true`` (no error), in model order before
    ``result(c2, TOOL_NOT_STARTED)``, citing the ``tool/call``. It was asked in a worker
    thread (a synchronous reconcile), with the call as the model wrote it and an exec whose
    arguments are validated and whose idempotency key is the original call's."""
    asked = Asked(ToolResult(content="it landed", meta={"checked": True}))
    agent = await crashed_after_c1(hs, asked)
    assert tail(agent) == [
        "call(c1)", "result(c1)", "result(c2,TOOL_NOT_STARTED)", "S-1.1", "T-1:interrupted",
        "session/end-seed",
    ]  # fmt: skip
    (result,) = results_by_call(agent.session)["c1"]
    assert result.data.reconciled is True
    assert result.data.message.content == (TextBlock("it landed"),)
    assert result.data.meta == {"checked": True}
    assert result.data.error is None and not result.data.message.is_error
    call_seq = next(e.seq for e in agent.session.events if e.type == "tool/call")
    assert result.source_event_seqs == (call_seq,)
    (call, exec) = asked.calls[0]
    assert call == ToolCallBlock(id="c1", name="t", arguments="{}")
    assert (exec.call_id, exec.name, exec.arguments, exec.turn, exec.step) == ("c1", "t", {}, 1, 1)
    assert exec.idempotency_key == idempotency_key("crashed", 1, 1, "c1")
    assert exec.agent is agent
    assert asked.threads != [threading.main_thread().name]
    assert result.to_json()["data"]["reconciled"] is True
    assert_well_formed(agent.session)
    stored = await store_of(hs.rt).load("crashed")
    assert stored[result.seq - 1].data.reconciled is True  # the codec keeps the mark


async def test_a_reconciled_error_keeps_its_code(hs: Harness) -> None:
    """A reconciled failure is recorded as an error result with the tool's code."""
    answer = ToolResult(content="the write failed", is_error=True, error=ToolError("DISK_FULL"))
    agent = await crashed_after_c1(hs, Asked(answer))
    (result,) = results_by_call(agent.session)["c1"]
    assert result.data.reconciled is True
    assert result.data.error.code == "DISK_FULL" and result.data.message.is_error
    assert tail(agent)[1] == "result(c1,DISK_FULL)"


@pytest.mark.parametrize(
    "answer",
    [None, RuntimeError("cannot tell"), "landed", ToolResult(content="x", meta={1, 2})],
    ids=["none", "raises", "not-a-result", "unstorable-meta"],
)
async def test_what_reconcile_cannot_vouch_for_stays_unknown(hs: Harness, answer: Any) -> None:
    """``None``, an exception, a value that is not a ``ToolResult`` and a result the log
    cannot store all leave ``TOOL_OUTCOME_UNKNOWN`` with its conservative text."""
    asked = Asked(answer)
    agent = await crashed_after_c1(hs, asked)
    assert len(asked.calls) == 1
    assert tail(agent)[:3] == [
        "call(c1)", "result(c1,TOOL_OUTCOME_UNKNOWN)", "result(c2,TOOL_NOT_STARTED)",
    ]  # fmt: skip
    (result,) = results_by_call(agent.session)["c1"]
    assert result.data.reconciled is None
    assert result.data.message.content == (TextBlock(OUTCOME_UNKNOWN_TEXT),)
    assert "reconciled" not in result.to_json()["data"]


async def test_a_reconcile_that_never_answers_is_bounded(hs: Harness) -> None:
    """An async ``reconcile`` that waits past ``limits.reconcile_timeout`` leaves the call
    unknown; its signal was aborted at the deadline."""
    hs.rt.loop_services.limits.reconcile_timeout = 0.05
    seen: list[ToolExec] = []

    async def never(call: ToolCallBlock, exec: ToolExec) -> ToolResult:
        seen.append(exec)
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    agent = await crashed_after_c1(hs, never)
    assert tail(agent)[1] == "result(c1,TOOL_OUTCOME_UNKNOWN)"
    assert seen[0].signal.aborted
    assert isinstance(seen[0].signal.reason, TimeoutError)


async def test_an_async_reconcile_is_awaited(hs: Harness) -> None:
    """``reconcile`` may be a coroutine function."""

    async def check(call: ToolCallBlock, exec: ToolExec) -> ToolResult:
        await asyncio.sleep(0)
        return ToolResult(content=f"checked {exec.idempotency_key[:8]}")

    agent = await crashed_after_c1(hs, check)
    (result,) = results_by_call(agent.session)["c1"]
    assert result.data.reconciled is True
    assert result.data.message.content[0].text.startswith("checked ")


async def test_only_unknown_calls_are_asked(hs: Harness) -> None:
    """A call without a ``tool/call`` (``TOOL_NOT_STARTED``) is not asked: its body cannot
    have run; a balanced log asks nothing."""
    asked = Asked(ToolResult(content="landed"))
    await two_call_run(hs)
    crash_copy(store_of(hs.rt), "s-1", "before", lambda e: e.type == "assistant/message")
    crash_copy(store_of(hs.rt), "s-1", "balanced")
    hs.rt.tools.register(Bench().tool("t", reconcile=asked))
    before = await resume(hs, "before")
    balanced = await resume(hs, "balanced")
    assert "result(c1,TOOL_NOT_STARTED)" in compact(before.session)
    assert compact(balanced.session)[-2:] == ["T-1:completed", "session/end-seed"]
    assert asked.calls == []


async def test_in_step_recovery_reconciles_too(h: Harness) -> None:
    """C7.10-1 with reconcile: a step failing after ``c2``'s body ran (its result could not
    be appended) asks ``c2``'s tool; the reconciled result replaces TOOL_OUTCOME_UNKNOWN,
    ``c3`` (never started) stays TOOL_NOT_STARTED, and the turn still ends in error."""
    bench = Bench()
    asked = Asked(ToolResult(content="c2 landed"))
    h.rt.tools.register(bench.tool("t", reconcile=asked))
    agent = await h.agent(
        tool_calls_response([("c1", "t", {}), ("c2", "t", {}), ("c3", "t", {})]),
        text_response("after"),
    )
    fail_append(agent.session, on_event("c2", "tool/result"))
    agent.followup(user_message("u1"))
    await settle(agent)
    log = compact(agent.session)
    assert log[log.index("call(c1)") :] == [
        "call(c1)", "result(c1)", "call(c2)", "result(c2)", "result(c3,TOOL_NOT_STARTED)",
        "S-1.1", "T-1:error",
    ]  # fmt: skip
    (result,) = results_by_call(agent.session)["c2"]
    assert result.data.reconciled is True
    assert [c.id for c, _ in asked.calls] == ["c2"]
    assert asked.calls[0][1].idempotency_key == bench.execs["c2"].idempotency_key
