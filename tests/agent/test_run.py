"""``agent.run`` and ``agent.stream``: a followup plus a wait for the turn that claims it.

Every test asserts the exact log; composition with steer, queued runs, cancel and a blocked
or error turn (C7.5-18, C7.5-18a, C7.5-20) comes with its counterexample.
"""

from __future__ import annotations

import asyncio
import itertools
from typing import Any

import pytest

from steerloop import (
    AgentOptions,
    CancelCause,
    PreStepDecision,
    SessionEvent,
    TurnResult,
    TurnStream,
    user_message,
)
from steerloop.agent._decisions import StreamFrame
from steerloop.llm import TokenUsage
from steerloop.testing import (
    HANG,
    error_response,
    text_response,
    tool_call_response,
    wait_all_tasks_blocked,
)
from steerloop.tools import define_tool

from ..conftest import Harness, compact, label, settle, u, within
from ..logcheck import assert_well_formed

OPTIONS = AgentOptions(provider="mock", model="m")


def usage(i: int, o: int, cached: int | None = None) -> TokenUsage:
    return TokenUsage(input_tokens=i, output_tokens=o, cache_read_tokens=cached)


async def test_run_returns_the_result_of_the_turn_that_claims_the_message(h: Harness) -> None:
    """Text, turn, usage summed over the turn's requests and the seq range of the turn."""
    agent = await h.agent(
        [
            *tool_call_response("c1", "echo", {"x": 1})[:-1],
            *text_response("", usage=usage(3, 4, 2))[-2:],
        ],
        text_response("done", usage=usage(10, 5)),
    )
    h.rt.tools.register(
        define_tool(
            name="echo",
            description="echo",
            parameters={"type": "object"},
            execute=lambda args, exec: "ok",
        )
    )
    result = await within(agent.run("go"))
    assert compact(agent.session) == [
        "ins(nt,go)", "T+1", "claim(nt,go)", "S+1.1", "sys", "user(go)", "hdr(initial)", "ctx",
        "msg", "call(c1)", "result(c1)", "S-1.1", "S+1.2", "msg", "S-1.2", "T-1:completed",
    ]  # fmt: skip
    events = agent.session.events
    assert result == TurnResult(
        kind="completed",
        text="done",
        turn=1,
        usage=TokenUsage(input_tokens=13, output_tokens=9, cache_read_tokens=2),
        start_seq=2,
        end_seq=len(events),
    )
    assert result.start_seq is not None
    assert events[result.start_seq - 1].type == "turn/start"
    assert events[-1].type == "turn/end"
    assert TurnResult.from_session(agent.session, 1) == result
    assert_well_formed(agent.session)


async def test_run_takes_a_user_message_and_refuses_misuse(h: Harness) -> None:
    """A ``UserMessage`` is sent as is; a non-message is a ``ValueError``; a disposed agent
    raises ``RuntimeError`` like ``send`` and leaves no listener behind."""
    h.adapter.add(text_response("hi"))
    handle = await h.rt.agents.create(session_id="s-1", agent_options=OPTIONS)
    agent = handle.agent
    message = user_message("hello")
    result = await within(agent.run(message))
    assert result.kind == "completed" and result.text == "hi"
    assert agent.session.events[-1].type == "turn/end"
    assert h.adapter.requests[0].messages[-1] == message
    with pytest.raises(ValueError):
        await agent.run(42)  # type: ignore[call-overload]
    with pytest.raises(ValueError, match="output_retries"):
        await agent.run("x", output_type=int, output_retries=-1)
    await within(handle.dispose())
    before = len(agent.session.events)
    with pytest.raises(RuntimeError, match="disposed"):
        await agent.run("again")
    with pytest.raises(RuntimeError, match="disposed"):
        agent.stream("again")
    assert len(agent.session.events) == before
    assert not h.rt.hooks.has("agent/inbox/claimed")
    assert not h.rt.hooks.has("agent/request")


async def test_a_steer_while_run_waits_lands_in_the_same_turn(h: Harness) -> None:
    """C7.5-13: the steer is claimed by the run's turn, whose result is the steered answer.
    Counterexample: a ``followup`` sent at the same point gets a turn of its own (C7.5-17),
    and the run's result is still its own turn's."""

    def steer(request: Any) -> Any:
        agent.steer(u("also Oslo"))
        return text_response("Paris")

    agent = await h.agent(steer, text_response("Paris and Oslo"))
    result = await within(agent.run("weather?"))
    assert compact(agent.session)[2:] == [
        "claim(nt,weather?)", "S+1.1", "sys", "user(weather?)", "hdr(initial)", "ctx",
        "ins(ns,also Oslo)", "msg", "S-1.1", "claim(ns,also Oslo)", "S+1.2", "user(also Oslo)",
        "msg", "S-1.2", "T-1:completed",
    ]  # fmt: skip
    assert (result.turn, result.text, result.kind) == (1, "Paris and Oslo", "completed")

    def follow(request: Any) -> Any:
        agent.followup(u("and Lima?"))
        return text_response("Rome")

    h.adapter.add(follow, text_response("Lima"))
    result = await within(agent.run("Rome?"))
    await settle(agent)
    assert compact(agent.session, only=["T", "ins", "claim"])[-8:] == [
        "ins(nt,Rome?)", "T+2", "claim(nt,Rome?)", "ins(nt,and Lima?)", "T-2:completed",
        "T+3", "claim(nt,and Lima?)", "T-3:completed",
    ]  # fmt: skip
    assert (result.turn, result.text) == (2, "Rome")


async def test_queued_runs_get_one_turn_each_in_send_order(h: Harness) -> None:
    """C7.5-18: runs sent while a turn is open queue; each result is its own message's turn,
    not the order the awaits happen to resume in. Counterexample: awaiting them in reverse
    gives the same mapping."""
    agent = await h.agent(text_response("one"), text_response("two"), text_response("three"))
    tasks = [asyncio.ensure_future(agent.run(text)) for text in ("a", "b", "c")]
    results = await within(asyncio.gather(*reversed(tasks)))
    assert [(r.turn, r.text) for r in reversed(results)] == [(1, "one"), (2, "two"), (3, "three")]
    assert compact(agent.session, only=["T", "ins", "claim"]) == [
        "ins(nt,a)", "T+1", "claim(nt,a)", "ins(nt,b)", "ins(nt,c)", "T-1:completed",
        "T+2", "claim(nt,b)", "T-2:completed", "T+3", "claim(nt,c)", "T-3:completed",
    ]  # fmt: skip
    ranges = [(r.start_seq, r.end_seq) for r in reversed(results)]
    assert all(a[1] < b[0] for a, b in itertools.pairwise(ranges))


async def test_cancel_resolves_queued_runs_aborted_and_the_running_one_with_its_turn(
    h: Harness,
) -> None:
    """``cancel()`` clears the inbox: runs whose message no turn claimed resolve
    ``aborted`` with ``turn=None``; the running one gets its ``T-1:aborted``.
    Counterexample: ``cancel(keep_inbox=True)`` keeps the queued message; its run waits
    (an aborted turn stops the driver, C7.5-18a) and is served by the next waking send."""
    agent = await h.agent(HANG)
    first = asyncio.ensure_future(agent.run("a"))
    await wait_all_tasks_blocked()
    queued = [asyncio.ensure_future(agent.run(t)) for t in ("b", "c")]
    await wait_all_tasks_blocked()
    agent.cancel(CancelCause.user())
    results = await within(asyncio.gather(first, *queued))
    assert [(r.kind, r.turn) for r in results] == [
        ("aborted", 1),
        ("aborted", None),
        ("aborted", None),
    ]
    assert results[1] == TurnResult(kind="aborted")
    assert compact(agent.session, only=["T", "ins", "claim", "drop"]) == [
        "ins(nt,a)", "T+1", "claim(nt,a)", "ins(nt,b)", "ins(nt,c)", "drop(nt,b)", "drop(nt,c)",
        "T-1:aborted",
    ]  # fmt: skip

    h.adapter.add(HANG, text_response("d done"), text_response("wake done"))
    running = asyncio.ensure_future(agent.run("x"))
    await wait_all_tasks_blocked()
    kept = asyncio.ensure_future(agent.run("d"))
    await wait_all_tasks_blocked()
    agent.cancel(CancelCause.user(), keep_inbox=True)
    assert (await within(running)).kind == "aborted"
    await settle(agent)
    assert not kept.done() and [m.id for m in agent.inbox.next_turn] != []
    wake = await within(agent.run("wake"))
    served = await within(kept)
    assert (served.turn, served.text, wake.turn, wake.text) == (3, "d done", 4, "wake done")
    assert_well_formed(agent.session)


async def test_a_run_queued_behind_a_blocked_turn_waits_for_the_next_waking_send(
    h: Harness,
) -> None:
    """C7.5-18a: a blocked turn stops the driver; the queued run stays pending and the next
    waking send's turn claims it first. The blocked run itself resolves ``blocked``."""
    agent = await h.agent(text_response("b done"), text_response("wake done"))
    release = asyncio.Event()

    async def gate(payload: Any, next_: Any) -> Any:
        if payload.turn != 1:
            return await next_()
        await release.wait()
        return PreStepDecision.reject()

    h.rt.hooks.on("agent/pre-step", gate)
    first = asyncio.ensure_future(agent.run("a"))
    await wait_all_tasks_blocked()
    queued = asyncio.ensure_future(agent.run("b"))
    await wait_all_tasks_blocked()
    assert [label(m) for m in agent.inbox.next_turn] == ["b"]
    release.set()
    assert (await within(first)).kind == "blocked"
    await settle(agent)
    assert not queued.done()
    wake = await within(agent.run("wake"))
    result = await within(queued)
    assert (result.turn, result.text, wake.turn, wake.text) == (2, "b done", 3, "wake done")


async def test_an_error_turn_resolves_its_run_and_a_queued_run_gets_the_next_turn(
    h: Harness,
) -> None:
    """C7.5-20: the error turn's run gets its failure facts (never an exception). Whether
    the driver serves the queued run at once or only at the next waking send (C7.5-18a),
    the queued run's turn is 2 and the waking send's is 3."""
    agent = await h.agent(
        error_response("BAD_REQUEST", "no such model"),
        text_response("b done"),
        text_response("wake done"),
    )
    first = asyncio.ensure_future(agent.run("a"))
    await asyncio.sleep(0)
    queued = asyncio.ensure_future(agent.run("b"))
    failed = await within(first)
    assert failed.kind == "error" and failed.turn == 1
    assert failed.error is not None and failed.error.code == "BAD_REQUEST"
    wake = await within(agent.run("wake"))
    result = await within(queued)
    assert (result.turn, result.text, wake.turn, wake.text) == (2, "b done", 3, "wake done")
    assert_well_formed(agent.session)


async def test_a_message_removed_from_the_inbox_resolves_its_run_aborted(h: Harness) -> None:
    """``inbox.remove`` of a queued run's message resolves it ``aborted``; ``replace`` keeping
    the id does not (counterexample): the replacement is what the run's turn claims."""
    agent = await h.agent(HANG, text_response("replaced answer"))
    running = asyncio.ensure_future(agent.run("a"))
    await wait_all_tasks_blocked()
    removed_msg, replaced_msg = user_message("b"), user_message("c")
    removed = asyncio.ensure_future(agent.run(removed_msg))
    replaced = asyncio.ensure_future(agent.run(replaced_msg))
    await wait_all_tasks_blocked()
    assert agent.inbox.remove(removed_msg.id)
    assert (await within(removed)) == TurnResult(kind="aborted")
    assert agent.inbox.replace(replaced_msg.id, user_message("c2", id=replaced_msg.id))
    agent.cancel(CancelCause.user(), keep_inbox=True)
    assert (await within(running)).kind == "aborted"
    await settle(agent)
    assert not replaced.done()
    agent.followup(u("wake"))
    h.adapter.add(text_response("wake"))
    result = await within(replaced)
    assert (result.turn, result.text) == (2, "replaced answer")
    assert compact(agent.session, only=["claim"]) == [
        "claim(nt,a)",
        "claim(nt,c2)",
        "claim(nt,wake)",
    ]
    await settle(agent)


# --- stream ------------------------------------------------------------------------------


def kinds(items: list[StreamFrame | SessionEvent]) -> list[str]:
    return [f"frame:{i.kind}" if isinstance(i, StreamFrame) else i.type for i in items]


async def test_stream_yields_the_turns_frames_and_events_in_order(h: Harness) -> None:
    """From ``turn/start`` to ``turn/end``: the splice that sent the message is not part of
    the turn; a live frame's ``end`` follows the event that settled it."""
    agent = await h.agent(text_response("hello"))
    stream = agent.stream("hi")
    assert isinstance(stream, TurnStream)
    items = [item async for item in stream]
    assert kinds(items) == [
        "turn/start", "agent/inbox/spliced", "step/start", "system/message", "user/message",
        "request/header", "request/context", "frame:start", "frame:chunk", "frame:chunk",
        "frame:chunk", "frame:chunk", "assistant/message", "frame:end", "step/end", "turn/end",
    ]  # fmt: skip
    events = [i for i in items if isinstance(i, SessionEvent)]
    assert events == list(agent.session.events[1:])
    result = await within(stream.result())
    assert (result.text, result.start_seq, result.end_seq) == ("hello", 2, 11)


async def test_stream_of_a_queued_message_starts_at_its_own_turn(h: Harness) -> None:
    """Events of the turn running when the message was sent are not yielded (counterexample
    for the claim ordering): the stream begins at the ``turn/start`` of the claiming turn."""
    agent = await h.agent(text_response("one"), text_response("two"))
    first = asyncio.ensure_future(agent.run("a"))
    await asyncio.sleep(0)
    stream = agent.stream("b")
    items = [item async for item in stream]
    events = [i for i in items if isinstance(i, SessionEvent)]
    assert events[0].type == "turn/start" and events[0].data.turn == 2
    assert events[-1].type == "turn/end" and events[-1].data.turn == 2
    assert all(not (isinstance(i, StreamFrame) and i.turn == 1) for i in items)
    assert (await within(first)).turn == 1


async def test_a_slow_stream_consumer_drops_live_frames_never_events(h: Harness) -> None:
    """Nobody reads while the turn runs: the agent finishes anyway (it never waits for the
    consumer), every durable event is kept, and frames past ``max_buffer`` are dropped."""
    chunks = text_response("a long answer")
    agent = await h.agent(chunks, text_response("second"))
    stream = agent.stream("go", max_buffer=3)
    await settle(agent)
    assert agent.session.events[-1].type == "turn/end"
    items = [item async for item in stream]
    events = [i for i in items if isinstance(i, SessionEvent)]
    frames = [i for i in items if isinstance(i, StreamFrame)]
    assert events == list(agent.session.events[1:])
    # turn/start, claim, step/start, system, user, header, context fill the buffer first.
    assert frames == [] and stream.dropped_frames == 6
    # Counterexample: a buffer large enough drops nothing.
    roomy = agent.stream("again", max_buffer=100)
    await settle(agent)
    items = [item async for item in roomy]
    assert roomy.dropped_frames == 0
    assert len([i for i in items if isinstance(i, StreamFrame)]) == 6


async def test_stopping_a_stream_early_does_not_cancel_the_turn(h: Harness) -> None:
    """``aclose()`` after the first item: the turn completes and the result still comes;
    the frame listener goes at once, the others when the turn has ended."""
    release = asyncio.Event()

    async def slow(request: Any) -> Any:
        await release.wait()
        return text_response("finished")

    agent = await h.agent(slow)
    stream = agent.stream("go")
    first = await within(anext(stream))
    assert isinstance(first, SessionEvent) and first.type == "turn/start"
    await stream.aclose()
    release.set()
    assert not h.rt.hooks.has("agent/assistant-stream")
    with pytest.raises(StopAsyncIteration):
        await anext(stream)
    result = await within(stream.result())
    assert (result.kind, result.text) == ("completed", "finished")
    assert not h.rt.hooks.has("session/event")
    await settle(agent)
    assert compact(agent.session)[-3:] == ["msg", "S-1.1", "T-1:completed"]


async def test_stream_of_a_cancelled_message_ends_empty(h: Harness) -> None:
    agent = await h.agent(HANG)
    running = agent.stream("a")
    queued = agent.stream("b")
    agent.cancel(CancelCause.user())
    assert [i async for i in queued] == []
    assert (await within(queued.result())) == TurnResult(kind="aborted")
    assert kinds([i async for i in running])[-1] == "turn/end"
    assert (await within(running.result())).kind == "aborted"
    with pytest.raises(ValueError, match="max_buffer"):
        agent.stream("x", max_buffer=0)


async def test_turn_result_is_frozen_and_read_only_from_closed_turns(h: Harness) -> None:
    agent = await h.agent(text_response("hi"))
    result = await within(agent.run("hello"))
    with pytest.raises(AttributeError):
        result.text = "changed"
    with pytest.raises(ValueError, match="no closed turn 2"):
        TurnResult.from_session(agent.session, 2)
