"""§7.9 one tool call: round trip, argument parsing, unknown tools, pre-execute order and
policies, failures, the exec (C7.9-1 … C7.9-5, C7.9-15 … C7.9-17)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, field_validator

from steerloop import CancelCause, ToolDecision, user_message
from steerloop.messages import AssistantMessage, ToolResultMessage
from steerloop.testing import (
    text_response,
    tool_call_response,
    tool_calls_response,
)
from steerloop.tools import ToolExec

from ..conftest import Harness, compact, events_of, label, settle
from ..support import Bench, yield_loop
from .scheduler_helpers import (
    tool_log,
)

# --- C7.9-1 .. C7.9-3: round trip, argument parsing, unknown tools ---------------------


async def test_canonical_tool_round_trip(h: Harness) -> None:
    """C7.9-1: msg[call c1] · call · result · S-1.1 · S+1.2 · msg · S-1.2 · T-1:completed."""
    bench = Bench()
    h.rt.tools.register(bench.tool("echo"))
    agent = await h.agent(tool_call_response("c1", "echo", {"x": 1}), text_response("done"))
    agent.followup(user_message("u1"))
    await settle(agent)
    assert compact(agent.session) == [
        "ins(nt,u1)", "T+1", "claim(nt,u1)", "S+1.1", "sys", "user(u1)", "hdr(initial)", "ctx",
        "msg", "call(c1)", "result(c1)", "S-1.1", "S+1.2", "msg", "S-1.2", "T-1:completed",
    ]  # fmt: skip
    assert len(h.adapter.requests) == 2
    messages = h.adapter.requests[1].messages
    assert isinstance(messages[-2], AssistantMessage)
    assert [c.id for c in messages[-2].tool_calls] == ["c1"]
    assert isinstance(messages[-1], ToolResultMessage)
    assert messages[-1].call_id == "c1"
    assert label(messages[-1]) == "r-c1"
    assert not messages[-1].is_error
    assert bench.args["c1"] == {"x": 1}


async def test_empty_arguments_parse_as_empty_object(h: Harness) -> None:
    """C7.9-2: raw argument text "" becomes {} for the body; the log keeps ""."""
    bench = Bench()
    h.rt.tools.register(bench.tool("echo"))
    agent = await h.agent(tool_call_response("c1", "echo", ""), text_response("done"))
    agent.followup(user_message("u1"))
    await settle(agent)
    assert tool_log(agent) == ["call(c1)", "result(c1)"]
    assert events_of(agent.session, "tool/call")[0].data.arguments == ""
    assert bench.args["c1"] == {}


async def test_invalid_json_arguments_are_kept_verbatim_and_rejected(h: Harness) -> None:
    """C7.9-2: invalid JSON stays verbatim in tool/call and gives INVALID_ARGS, no body."""
    bench = Bench()
    h.rt.tools.register(bench.tool("echo"))
    agent = await h.agent(tool_call_response("c1", "echo", '{"x": 1'), text_response("done"))
    agent.followup(user_message("u1"))
    await settle(agent)
    assert tool_log(agent) == ["call(c1)", "result(c1,INVALID_ARGS)"]
    assert events_of(agent.session, "tool/call")[0].data.arguments == '{"x": 1'
    result = events_of(agent.session, "tool/result")[0].data
    assert result.message.is_error
    assert bench.trace == []
    assert compact(agent.session)[-1] == "T-1:completed"


async def test_schema_violation_gives_invalid_args(h: Harness) -> None:
    """C7.9-2: arguments that fail the parameter schema give INVALID_ARGS without a body run."""

    class Args(BaseModel):
        x: int

    bench = Bench()
    h.rt.tools.register(bench.tool("typed", parameters=Args))
    agent = await h.agent(
        tool_calls_response([("c1", "typed", {"x": "nope"}), ("c2", "typed", {"x": 2})]),
        text_response("done"),
    )
    agent.followup(user_message("u1"))
    await settle(agent)
    assert tool_log(agent) == ["call(c1)", "result(c1,INVALID_ARGS)", "call(c2)", "result(c2)"]
    assert bench.trace == ["begin:c2", "end:c2"]
    assert bench.args["c2"] == Args(x=2)


async def test_a_validator_that_raises_any_error_gives_invalid_args(h: Harness) -> None:
    """C7.9-2: a validator of the tool's own that raises something other than a validation
    error still answers INVALID_ARGS (not a failed step), and the turn goes on."""

    class Args(BaseModel):
        path: str

        @field_validator("path")
        @classmethod
        def relative(cls, value: str) -> str:
            if value.startswith("/"):
                raise TypeError("absolute paths are not accepted")
            return value

    bench = Bench()
    h.rt.tools.register(bench.tool("read", parameters=Args))
    agent = await h.agent(
        tool_calls_response([("c1", "read", {"path": "/etc"}), ("c2", "read", {"path": "a"})]),
        text_response("done"),
    )
    agent.followup(user_message("u1"))
    await settle(agent)
    assert tool_log(agent) == ["call(c1)", "result(c1,INVALID_ARGS)", "call(c2)", "result(c2)"]
    result = events_of(agent.session, "tool/result")[0].data
    assert "absolute paths are not accepted" in label(result.message)
    assert compact(agent.session)[-1] == "T-1:completed"
    assert bench.trace == ["begin:c2", "end:c2"]


async def test_unknown_tool_does_not_stop_the_other_calls(h: Harness) -> None:
    """C7.9-3: a call to an unknown name gives UNKNOWN_TOOL; the other calls still run."""
    bench = Bench()
    h.rt.tools.register(bench.tool("echo"))
    agent = await h.agent(
        tool_calls_response([("c1", "nope", {}), ("c2", "echo", {})]), text_response("done")
    )
    agent.followup(user_message("u1"))
    await settle(agent)
    assert tool_log(agent) == ["call(c1)", "result(c1,UNKNOWN_TOOL)", "call(c2)", "result(c2)"]
    assert bench.trace == ["begin:c2", "end:c2"]
    assert compact(agent.session)[-1] == "T-1:completed"


async def test_tool_scoped_to_another_agent_is_unknown(h: Harness) -> None:
    """C7.9-3: a tool registered for another agent only is not visible: UNKNOWN_TOOL."""
    bench = Bench()
    h.rt.tools.register(bench.tool("private"), owner="someone-else")
    agent = await h.agent(tool_call_response("c1", "private", {}), text_response("done"))
    agent.followup(user_message("u1"))
    await settle(agent)
    assert tool_log(agent) == ["call(c1)", "result(c1,UNKNOWN_TOOL)"]
    assert bench.trace == []


# --- C7.9-4 / C7.9-5: tool/call before pre-execute; policies serial in model order -----


async def test_tool_call_is_logged_before_pre_execute(h: Harness) -> None:
    """C7.9-4: tool/call is appended when the call starts, before tools/pre-execute runs."""
    bench = Bench()
    h.rt.tools.register(bench.tool("p", safe=True))
    seen: list[tuple[str, str, str]] = []

    async def policy(payload: Any) -> None:
        last = payload.exec.agent.session.events[-1]
        seen.append((payload.exec.call_id, last.type, last.data.call_id))

    h.rt.hooks.on("tools/pre-execute", policy)
    agent = await h.agent(
        tool_calls_response([("c1", "p", {}), ("c2", "p", {}), ("c3", "p", {})]),
        text_response("done"),
    )
    agent.followup(user_message("u1"))
    await settle(agent)
    assert seen == [("c1", "tool/call", "c1"), ("c2", "tool/call", "c2"), ("c3", "tool/call", "c3")]
    assert compact(agent.session, only=("call(",)) == ["call(c1)", "call(c2)", "call(c3)"]


async def test_pre_execute_runs_serially_in_model_order(h: Harness) -> None:
    """C7.9-5: pre-execute never overlaps for two calls of a step; bodies do overlap."""
    bench = Bench()
    h.rt.tools.register(bench.tool("p", safe=True))
    bench.gate("c1", "c2", "c3")

    async def policy(payload: Any) -> None:
        call_id = payload.exec.call_id
        bench.trace.append(f"enter:{call_id}")
        await yield_loop(5)
        bench.trace.append(f"exit:{call_id}")

    h.rt.hooks.on("tools/pre-execute", policy)
    agent = await h.agent(
        tool_calls_response([("c1", "p", {}), ("c2", "p", {}), ("c3", "p", {})]),
        text_response("done"),
    )
    agent.followup(user_message("u1"))
    await bench.wait_started("c1", "c2", "c3")
    # All three bodies are running at once: only the bodies overlap.
    assert [t for t in bench.trace if t.startswith("end:")] == []
    bench.release("c1", "c2", "c3")
    await settle(agent)
    policy_trace = [t for t in bench.trace if t.startswith(("enter:", "exit:"))]
    assert policy_trace == ["enter:c1", "exit:c1", "enter:c2", "exit:c2", "enter:c3", "exit:c3"]


# --- C7.9-15 .. C7.9-17: policies, failures, exec ---------------------------------------


async def test_pre_execute_deny(h: Harness) -> None:
    """C7.9-15: a deny gives DENIED with the reason; no body; post-execute sees the error."""
    bench = Bench()
    h.rt.tools.register(bench.tool("rm"))
    h.rt.tools.register(bench.tool("ls"))
    seen: list[tuple[str, Any]] = []

    async def policy(payload: Any) -> Any:
        if payload.exec.name == "rm":
            return ToolDecision.deny("not allowed to delete")
        return None

    async def post(payload: Any, next_: Any) -> Any:
        result = payload.result
        seen.append((payload.exec.call_id, result.error.code if result.error else None))
        return await next_()

    h.rt.hooks.on("tools/pre-execute", policy)
    h.rt.hooks.on("tools/post-execute", post)
    agent = await h.agent(
        tool_calls_response([("c1", "rm", {}), ("c2", "ls", {})]), text_response("done")
    )
    agent.followup(user_message("u1"))
    await settle(agent)
    assert tool_log(agent) == ["call(c1)", "result(c1,DENIED)", "call(c2)", "result(c2)"]
    denied = events_of(agent.session, "tool/result")[0].data
    assert denied.message.is_error
    assert label(denied.message) == "not allowed to delete"
    assert bench.trace == ["begin:c2", "end:c2"]
    assert seen == [("c1", "DENIED"), ("c2", None)]


async def test_pre_execute_allow_runs_the_body(h: Harness) -> None:
    """C7.9-15: an explicit allow() stops the serial chain and the body runs."""
    bench = Bench()
    h.rt.tools.register(bench.tool("ls"))
    later: list[str] = []

    async def allow(payload: Any) -> Any:
        return ToolDecision.allow()

    async def never(payload: Any) -> Any:
        later.append(payload.exec.call_id)
        return ToolDecision.deny("too late")

    h.rt.hooks.on("tools/pre-execute", allow)
    h.rt.hooks.on("tools/pre-execute", never)
    agent = await h.agent(tool_call_response("c1", "ls", {}), text_response("done"))
    agent.followup(user_message("u1"))
    await settle(agent)
    assert tool_log(agent) == ["call(c1)", "result(c1)"]
    assert later == []


async def test_raising_body_is_a_normal_error_result(h: Harness) -> None:
    """C7.9-16: a raising body gives TOOL_FAILED with the message; the step continues."""

    async def boom(args: Any, exec: ToolExec) -> str:
        raise ValueError("disk on fire")

    bench = Bench()
    h.rt.tools.register(bench.tool("bad", then=boom))
    h.rt.tools.register(bench.tool("good"))
    agent = await h.agent(
        tool_calls_response([("c1", "bad", {}), ("c2", "good", {})]), text_response("done")
    )
    agent.followup(user_message("u1"))
    await settle(agent)
    log = compact(agent.session)
    assert log[log.index("call(c1)") :] == [
        "call(c1)", "result(c1,TOOL_FAILED)", "call(c2)", "result(c2)", "S-1.1", "S+1.2",
        "msg", "S-1.2", "T-1:completed",
    ]  # fmt: skip
    failed = events_of(agent.session, "tool/result")[0].data
    assert failed.message.is_error
    assert failed.error.name == "ValueError"
    assert label(failed.message) == "disk on fire"
    assert h.adapter.requests[1].messages[-2].is_error  # type: ignore[union-attr]


async def test_raising_policies_only_fail_their_call(h: Harness) -> None:
    """C7.9-16: raising pre-/post-execute listeners turn that call's result into
    TOOL_FAILED (pre: the body never runs); the other calls are unaffected."""
    bench = Bench()
    h.rt.tools.register(bench.tool("t"))

    async def pre(payload: Any) -> Any:
        if payload.exec.call_id == "c1":
            raise RuntimeError("policy crashed")
        return None

    async def post(payload: Any, next_: Any) -> Any:
        if payload.exec.call_id == "c2":
            raise RuntimeError("observer crashed")
        return await next_()

    h.rt.hooks.on("tools/pre-execute", pre)
    h.rt.hooks.on("tools/post-execute", post)
    agent = await h.agent(
        tool_calls_response([("c1", "t", {}), ("c2", "t", {}), ("c3", "t", {})]),
        text_response("done"),
    )
    agent.followup(user_message("u1"))
    await settle(agent)
    assert tool_log(agent) == [
        "call(c1)", "result(c1,TOOL_FAILED)", "call(c2)", "result(c2,TOOL_FAILED)",
        "call(c3)", "result(c3)",
    ]  # fmt: skip
    assert bench.trace == ["begin:c2", "end:c2", "begin:c3", "end:c3"]
    results = events_of(agent.session, "tool/result")
    assert "policy crashed" in label(results[0].data.message)
    assert "observer crashed" in label(results[1].data.message)
    assert compact(agent.session)[-1] == "T-1:completed"


async def test_exec_carries_agent_call_id_and_turn_signal(h: Harness) -> None:
    """C7.9-17: exec.agent is the initiator, exec.call_id the model's id, exec.signal
    aborts when the turn is cancelled."""
    seen: dict[str, Any] = {}

    async def inspect_exec(args: Any, exec: ToolExec) -> str:
        seen["initiator"] = h.rt.agents.current_initiator()
        seen["aborted_before"] = exec.signal.aborted
        bench.started["in-body"].set()
        await exec.signal.wait()
        seen["reason"] = exec.signal.reason
        return "stopped"

    bench = Bench()
    h.rt.tools.register(bench.tool("t", then=inspect_exec))
    agent = await h.agent(tool_call_response("call-77", "t", {"q": 1}))
    agent.followup(user_message("u1"))
    await bench.wait_started("in-body")
    exec = bench.execs["call-77"]
    assert exec.agent is agent
    assert seen["initiator"] is agent
    assert exec.call_id == "call-77"
    assert exec.name == "t"
    assert exec.arguments == {"q": 1}
    assert seen["aborted_before"] is False
    agent.cancel(CancelCause.hook("stop"))
    await settle(agent)
    assert seen["reason"] == CancelCause.hook("stop")
    assert tool_log(agent) == ["call(call-77)", "result(call-77,ABORTED)"]
