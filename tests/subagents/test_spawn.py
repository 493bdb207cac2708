"""Sub-agents: the child's answer as the tool result, cancellation with cause ``parent``,
the delegation depth limit, and disposal order. The parent talks to provider ``mock`` and
children to provider ``child`` (each with its own scripted adapter)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from steerloop import AgentOptions, CancelCause
from steerloop.subagents import (
    DelegationDepthError,
    delegation_depth,
    install_subagents,
    spawn,
)
from steerloop.testing import HANG, ScriptedAdapter, text_response, tool_call_response

from ..conftest import Harness, compact, events_of, u, within

CHILD = AgentOptions(provider="child", model="c")


def child_adapter(h: Harness, *script: Any) -> ScriptedAdapter:
    adapter = ScriptedAdapter(list(script))
    h.rt.llm.register_adapter(["child"], adapter)
    return adapter


def created(h: Harness) -> list[Any]:
    agents: list[Any] = []
    h.rt.hooks.on("agent/created", lambda p: agents.append(p.agent))
    return agents


async def test_the_childs_final_answer_is_the_tool_result(h: Harness) -> None:
    install_subagents(h.rt, agent_options=CHILD)
    child_adapter(h, text_response("4"))
    children = created(h)
    agent = await h.agent(
        tool_call_response("c1", "spawn_agent", {"task": "what is 2+2?"}),
        text_response("the child says 4"),
    )
    agent.followup(u("delegate"))
    await within(agent.when_idle())
    assert compact(agent.session) == [
        "ins(nt,delegate)", "T+1", "claim(nt,delegate)", "S+1.1", "sys", "user(delegate)",
        "hdr(initial)", "ctx", "msg", "call(c1)", "result(c1)", "S-1.1", "S+1.2", "msg",
        "S-1.2", "T-1:completed",
    ]  # fmt: skip
    result = events_of(agent.session, "tool/result")[0].data
    call_seq = events_of(agent.session, "tool/call")[0].seq
    assert result.message.content[0].text == "4"
    assert result.meta == {"session_id": f"s-1/sub-{call_seq}", "end": "completed"}
    # The second parent request sees the child's answer as the tool result.
    assert h.adapter.requests[1].messages[-1].content[0].text == "4"  # type: ignore[union-attr]
    child = children[1]
    assert child.id == f"s-1/sub-{call_seq}" and child.parent is agent
    assert compact(child.session) == [
        "ins(nt,what is 2+2?)", "T+1", "claim(nt,what is 2+2?)", "S+1.1", "sys",
        "user(what is 2+2?)", "hdr(initial)", "ctx", "msg", "S-1.1", "T-1:completed",
    ]  # fmt: skip
    assert child.session.header == {
        "parent_session": "s-1",
        "delegation_depth": 1,
        "origin": {"kind": "tool", "tool": "spawn_agent", "call_id": "c1"},
    }
    task = events_of(child.session, "user/message")[0].data
    assert task.source.kind == "user" and dict(task.source.extra or {}) == {"delegated_by": "s-1"}
    # Disposed once it answered: no longer live, no longer a child.
    assert h.rt.agents.get(child.id) is None and h.rt.agents.children(agent) == ()


async def test_cancelling_the_parent_turn_cancels_the_child_with_cause_parent(
    h: Harness,
) -> None:
    install_subagents(h.rt, agent_options=CHILD)
    streaming = asyncio.Event()

    def hang(request: Any) -> Any:
        streaming.set()
        return HANG

    child_adapter(h, hang)
    children = created(h)
    agent = await h.agent(tool_call_response("c1", "spawn_agent", {"task": "long job"}))
    agent.followup(u("delegate"))
    await within(streaming.wait())
    child = children[1]
    assert h.rt.agents.children(agent) == (child,)
    agent.cancel(CancelCause.user())
    await within(agent.when_idle())
    assert compact(child.session) == [
        "ins(nt,long job)", "T+1", "claim(nt,long job)", "S+1.1", "sys", "user(long job)",
        "hdr(initial)", "ctx", "msg(interrupted)", "S-1.1", "T-1:aborted",
    ]  # fmt: skip
    child_end = events_of(child.session, "turn/end")[0].data.reason
    assert child_end.reason is not None and child_end.reason.kind == "parent"
    assert compact(agent.session)[-4:] == ["call(c1)", "result(c1,ABORTED)", "S-1.1",
                                           "T-1:aborted"]  # fmt: skip
    parent_end = events_of(agent.session, "turn/end")[0].data.reason
    assert parent_end.reason is not None and parent_end.reason.kind == "user"
    assert h.rt.agents.get(child.id) is None


async def test_the_delegation_depth_limit_gives_a_clear_tool_error(h: Harness) -> None:
    install_subagents(h.rt, agent_options=CHILD, max_depth=1)
    child_adapter(
        h,
        tool_call_response("k1", "spawn_agent", {"task": "go deeper"}),
        text_response("could not delegate"),
    )
    children = created(h)
    agent = await h.agent(
        tool_call_response("c1", "spawn_agent", {"task": "delegate further"}),
        text_response("done"),
    )
    agent.followup(u("delegate"))
    await within(agent.when_idle())
    assert len(children) == 2  # the parent and one child; no grandchild was created
    child = children[1]
    refused = events_of(child.session, "tool/result")[0].data
    assert refused.error is not None and refused.error.code == "DELEGATION_DEPTH_EXCEEDED"
    assert refused.message.content[0].text == (
        f"delegation depth limit reached: agent {child.id!r} is at depth 1 and the limit is 1, "
        "so it cannot spawn another agent"
    )
    result = events_of(agent.session, "tool/result")[0].data
    assert result.error is None and result.message.content[0].text == "could not delegate"


async def test_the_library_call_and_disposal_order(h: Harness) -> None:
    """``spawn(..., keep=True)`` leaves the child live; disposing the parent disposes the
    child first. Depth is refused before anything is created."""
    child_adapter(h, text_response("child answer"))
    disposed: list[str] = []
    h.rt.hooks.on("agent/disposed", lambda p: disposed.append(p.agent.id))
    handle = await h.rt.agents.create(
        session_id="p", agent_options=AgentOptions(provider="mock", model="m")
    )
    result = await within(
        spawn(h.rt, handle.agent, "a task", session_id="p/kid", agent_options=CHILD, keep=True)
    )
    assert (result.answer, result.session_id, result.end.kind) == ("child answer", "p/kid",
                                                                   "completed")  # fmt: skip
    kid = h.rt.agents.get("p/kid")
    assert kid is not None and h.rt.agents.children(handle.agent) == (kid,)
    assert delegation_depth(kid) == 1 and delegation_depth(handle.agent) == 0
    with pytest.raises(DelegationDepthError, match="limit is 1"):
        await spawn(h.rt, kid, "deeper", agent_options=CHILD, max_depth=1)
    assert h.rt.agents.children(kid) == ()
    await handle.dispose()
    assert disposed == ["p/kid", "p"]


async def test_an_aborted_signal_raises_and_a_failed_child_is_an_error_result(
    h: Harness,
) -> None:
    from steerloop import AbortController, AbortedError
    from steerloop.testing import error_response

    install_subagents(h.rt, agent_options=CHILD)
    child_adapter(h, error_response("overloaded", "try later"))
    agent = await h.agent(
        tool_call_response("c1", "spawn_agent", {"task": "t"}), text_response("ok")
    )
    ctrl = AbortController()
    ctrl.abort(CancelCause.user())
    with pytest.raises(AbortedError):
        await spawn(h.rt, agent, "t", agent_options=CHILD, signal=ctrl.signal)
    assert h.rt.agents.children(agent) == ()
    agent.followup(u("delegate"))
    await within(agent.when_idle())
    result = events_of(agent.session, "tool/result")[0].data
    assert result.error is not None and result.error.code == "SUBAGENT_FAILED"
    assert "try later" in result.message.content[0].text


async def test_a_resumed_child_keeps_its_depth_and_parent_link(hs: Harness) -> None:
    """The depth a child was created at is stored in its header and comes back with a
    resume, even with no live parent: the limit still holds for it."""
    child_adapter(hs, text_response("child answer"))
    handle = await hs.rt.agents.create(
        session_id="p", agent_options=AgentOptions(provider="mock", model="m")
    )
    await within(spawn(hs.rt, handle.agent, "a task", session_id="p/kid", agent_options=CHILD))
    await handle.dispose()
    assert hs.rt.agents.get("p/kid") is None

    kid = (await hs.rt.agents.resume(resume_session_id="p/kid", agent_options=CHILD)).agent
    assert kid.parent is None
    assert kid.session.header["parent_session"] == "p"
    assert delegation_depth(kid) == 1
    with pytest.raises(DelegationDepthError, match="at depth 1 and the limit is 1"):
        await spawn(hs.rt, kid, "deeper", agent_options=CHILD, max_depth=1)
