"""The execute pipeline: result shapes, post-execute verdicts, deferred context, timeouts."""

from __future__ import annotations

from typing import Any

import pytest

from steerloop import CancelCause, PostExecute, ToolError, ToolResult, define_tool, user_message
from steerloop.messages import TextBlock
from steerloop.testing import text_response, tool_call_response, tool_calls_response
from steerloop.tools import ToolExec

from ..conftest import Harness, compact, events_of, label, settle
from ..support import Bench


async def run_one(h: Harness, body: Any, *, timeout: float | None = None) -> Any:
    """Run one call of a tool with ``body``; returns the tool/result payload."""
    h.rt.tools.register(
        define_tool(name="t", description="t", parameters={}, execute=body, timeout=timeout)
    )
    agent = await h.agent(tool_call_response("c1", "t", {}), text_response("done"))
    agent.followup(user_message("u1"))
    await settle(agent)
    (result,) = events_of(agent.session, "tool/result")
    return result.data


def body_returning(value: Any) -> Any:
    async def body(args: Any, exec: ToolExec) -> Any:
        return value

    return body


async def test_string_result_is_one_text_block(h: Harness) -> None:
    """A str result becomes one text block, not an error."""
    data = await run_one(h, body_returning("plain text"))
    assert data.message.content == (TextBlock("plain text"),)
    assert not data.message.is_error
    assert data.error is None


@pytest.mark.parametrize(
    ("value", "text"),
    [
        ({"a": 1, "b": [True, None]}, '{"a": 1, "b": [true, null]}'),
        ([1, "x"], '[1, "x"]'),
        (42, "42"),
        (None, "null"),
        ({"ü": "é"}, '{"ü": "é"}'),
    ],
)
async def test_json_value_result_is_serialised(h: Harness, value: Any, text: str) -> None:
    """A JSON value result is serialised as JSON text."""
    data = await run_one(h, body_returning(value))
    assert data.message.content == (TextBlock(text),)
    assert not data.message.is_error


async def test_non_json_result_is_a_tool_failure(h: Harness) -> None:
    """A value without a JSON form is a TOOL_FAILED result, not a step failure."""
    data = await run_one(h, body_returning({"when": object()}))
    assert data.message.is_error
    assert data.error.code == "TOOL_FAILED"


async def test_tool_result_is_kept_with_blocks_error_and_meta(h: Harness) -> None:
    """A ToolResult keeps its blocks, its own error code and meta."""
    result = ToolResult(
        content=[TextBlock("part 1"), TextBlock("part 2")],
        is_error=True,
        error=ToolError("RATE_LIMITED", name="QuotaError"),
        meta={"retry_in": 3},
    )
    data = await run_one(h, body_returning(result))
    assert data.message.content == (TextBlock("part 1"), TextBlock("part 2"))
    assert data.message.is_error
    assert (data.error.code, data.error.name) == ("RATE_LIMITED", "QuotaError")
    assert data.meta == {"retry_in": 3}


async def test_concludes_turn_stops_after_the_result(h: Harness) -> None:
    """C7.9-14: concludes_turn=True ends the turn completed without another request."""
    data = await run_one(h, body_returning(ToolResult(content="bye", concludes_turn=True)))
    assert label(data.message) == "bye"
    assert len(h.adapter.requests) == 1


async def test_defer_context_requires_a_user_message(h: Harness) -> None:
    """C7.11-8: defer_context takes a UserMessage; the message joins the next step."""
    errors: list[str] = []

    async def body(args: Any, exec: ToolExec) -> str:
        try:
            exec.defer_context("not a message")  # type: ignore[arg-type]
        except ValueError as exc:
            errors.append(str(exc))
        exec.defer_context(user_message("note"))
        return "ok"

    await run_one(h, body)
    agent = h.rt.agents.get("s-1")
    assert errors and "UserMessage" in errors[0]
    log = compact(agent.session)  # type: ignore[union-attr]
    assert log[log.index("result(c1)") :] == [
        "result(c1)", "ins(ns,note)", "S-1.1", "claim(ns,note)", "S+1.2", "user(note)",
        "msg", "S-1.2", "T-1:completed",
    ]  # fmt: skip
    note = events_of(agent.session, "user/message")[-1].data  # type: ignore[union-attr]
    assert (note.source.kind, note.source.call_id) == ("tool", "c1")


async def test_post_execute_accept_replaces_content(h: Harness) -> None:
    """tools/post-execute accept(content) replaces the content; tools/result sees it."""
    finals: list[Any] = []

    async def post(payload: Any, next_: Any) -> Any:
        assert label_of(payload.result) == "secret=42"
        return PostExecute.accept("secret=[redacted]")

    h.rt.hooks.on("tools/post-execute", post)
    h.rt.hooks.on("tools/result", lambda p: finals.append(p.result))
    data = await run_one(h, body_returning("secret=42"))
    assert data.message.content == (TextBlock("secret=[redacted]"),)
    assert not data.message.is_error
    assert [label_of(r) for r in finals] == ["secret=[redacted]"]


async def test_post_execute_accept_without_content_keeps_the_result(h: Harness) -> None:
    """accept() with no content keeps the body's result; the default is accept()."""

    async def post(payload: Any, next_: Any) -> Any:
        return PostExecute.accept()

    h.rt.hooks.on("tools/post-execute", post)
    data = await run_one(h, body_returning("unchanged"))
    assert data.message.content == (TextBlock("unchanged"),)
    assert data.error is None


async def test_post_execute_block_turns_the_result_into_feedback(h: Harness) -> None:
    """tools/post-execute block(feedback) makes an error result whose content is the
    feedback; its additional contexts still enter next-step."""

    async def post(payload: Any, next_: Any) -> Any:
        return PostExecute.block("output withheld", additional_contexts=[user_message("why")])

    h.rt.hooks.on("tools/post-execute", post)
    data = await run_one(h, body_returning("leaky"))
    assert data.message.content == (TextBlock("output withheld"),)
    assert data.message.is_error
    assert data.error.code == "DENIED"
    agent = h.rt.agents.get("s-1")
    log = compact(agent.session)  # type: ignore[union-attr]
    assert log[log.index("result(c1,DENIED)") :][:2] == ["result(c1,DENIED)", "ins(ns,why)"]


async def test_post_execute_is_a_waterfall(h: Harness) -> None:
    """The last-registered post-execute runs first; next() gives the rest's verdict."""
    order: list[str] = []

    async def first(payload: Any, next_: Any) -> Any:
        order.append("first")
        return PostExecute.accept("from first")

    async def second(payload: Any, next_: Any) -> Any:
        order.append("second")
        verdict = await next_()
        return PostExecute.accept(f"{verdict.content} via second")

    h.rt.hooks.on("tools/post-execute", first)
    h.rt.hooks.on("tools/post-execute", second)
    data = await run_one(h, body_returning("raw"))
    assert order == ["second", "first"]
    assert label(data.message) == "from first via second"


async def test_timeout_aborts_the_body_signal_and_fails_the_call(h: Harness) -> None:
    """timeout=: the body's signal aborts at the deadline; a body that then returns gives
    TOOL_FAILED naming the timeout."""
    seen: list[Any] = []

    async def body(args: Any, exec: ToolExec) -> str:
        await exec.signal.wait()
        seen.append(exec.signal.reason)
        return "finished late"

    data = await run_one(h, body, timeout=0.01)
    assert isinstance(seen[0], TimeoutError)
    assert data.message.is_error
    assert (data.error.code, data.error.name) == ("TOOL_FAILED", "TimeoutError")
    assert "timed out" in label(data.message)
    assert compact(h.rt.agents.get("s-1").session)[-1] == "T-1:completed"  # type: ignore[union-attr]


async def test_timeout_then_raise_is_a_timeout_failure(h: Harness) -> None:
    """timeout=: a body that raises after the deadline also gives TOOL_FAILED naming it."""

    async def body(args: Any, exec: ToolExec) -> str:
        await exec.signal.wait()
        exec.signal.throw_if_aborted()
        return "unreachable"

    data = await run_one(h, body, timeout=0.01)
    assert (data.error.code, data.error.name) == ("TOOL_FAILED", "TimeoutError")
    assert "timed out" in label(data.message)


async def test_body_finishing_before_the_deadline_is_unaffected(h: Harness) -> None:
    """timeout=: a body that returns in time keeps its result; its signal never aborted."""
    signals: list[Any] = []

    async def body(args: Any, exec: ToolExec) -> str:
        signals.append(exec.signal)
        return "fast"

    data = await run_one(h, body, timeout=30)
    assert label(data.message) == "fast"
    assert not data.message.is_error
    assert not signals[0].aborted


async def test_turn_cancel_reaches_a_body_with_a_timeout(h: Harness) -> None:
    """timeout=: cancelling the turn aborts the body's signal too; the outcome is ABORTED."""
    bench = Bench()
    reasons: list[Any] = []

    async def body(args: Any, exec: ToolExec) -> str:
        await exec.signal.wait()
        reasons.append(exec.signal.reason)
        return "stopped"

    h.rt.tools.register(bench.tool("t", then=body, timeout=30))
    agent = await h.agent(tool_calls_response([("c1", "t", {})]))
    agent.followup(user_message("u1"))
    await bench.wait_started("c1")
    agent.cancel(CancelCause.user())
    await settle(agent)
    assert reasons == [CancelCause.user()]
    assert compact(agent.session, only=("result(",)) == ["result(c1,ABORTED)"]


def label_of(result: ToolResult) -> str:
    content = result.content
    if isinstance(content, str):
        return content
    first = content[0]
    assert isinstance(first, TextBlock)
    return first.text
