"""Resume, restore repair, restore-or-create and fork over a ``memory://`` store (§7.2, §7.10).

Crashed logs are made the way a killed process leaves them: run an agent on a store, take
its stored JSON lines, keep a prefix, and store that prefix under a new id.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

import pytest

from steerloop import (
    AgentOptions,
    CancelCause,
    Runtime,
    SessionConflictError,
    SessionCorruptError,
    SessionPersistenceError,
    SessionPersistenceNotFoundError,
    SessionStorageError,
    user_message,
)
from steerloop.agent._recovery import NOT_STARTED_TEXT, OUTCOME_UNKNOWN_TEXT
from steerloop.session import MemoryStore, SessionEvent
from steerloop.session._codec import event_from_json
from steerloop.testing import HANG, text_response, tool_calls_response, wait_all_tasks_blocked

from ..conftest import Harness, compact, events_of, label, settle, within
from ..logcheck import assert_well_formed
from ..support import Bench, fail_append, on_event

OPTIONS = AgentOptions(provider="mock", model="m")
Cut = Callable[[SessionEvent], bool]


def store_of(rt: Runtime) -> MemoryStore:
    store = rt.sessions.persistence
    assert isinstance(store, MemoryStore)
    return store


def stored(store: MemoryStore, session_id: str) -> list[SessionEvent]:
    return [event_from_json(json.loads(line)) for line in store.raw(session_id)]


def crash_copy(store: MemoryStore, src: str, dst: str, cut: Cut | None = None) -> int:
    """Store under ``dst`` what ``src`` had stored up to and including the first event
    matching ``cut`` (everything when ``cut`` is None), as if the process died right after
    that append. Returns the number of events kept."""
    raw = store.raw(src)
    keep = len(raw)
    if cut is not None:
        keep = next(i for i, e in enumerate(stored(store, src)) if cut(e)) + 1
    store.put_raw(dst, raw[:keep])
    return keep


def is_call(call_id: str) -> Cut:
    return lambda e: e.type == "tool/call" and e.data.call_id == call_id


def is_result(call_id: str) -> Cut:
    return lambda e: e.type == "tool/result" and e.data.message.call_id == call_id


def is_type(type: str) -> Cut:
    return lambda e: e.type == type


async def resume(h: Harness, session_id: str, **kwargs: Any) -> Any:
    handle = await h.rt.agents.resume(resume_session_id=session_id, agent_options=OPTIONS, **kwargs)
    return handle.agent


async def two_call_run(h: Harness) -> Any:
    """A finished turn whose first step asked for two exclusive calls c1, c2."""
    h.rt.tools.register(Bench().tool("t"))
    agent = await h.agent(
        tool_calls_response([("c1", "t", {}), ("c2", "t", {})]), text_response("after")
    )
    agent.followup(user_message("u1"))
    await settle(agent)
    assert compact(agent.session, only=("call", "result", "S", "T")) == [
        "T+1", "S+1.1", "call(c1)", "result(c1)", "call(c2)", "result(c2)", "S-1.1",
        "S+1.2", "S-1.2", "T-1:completed",
    ]  # fmt: skip
    return agent


# --- C7.2-9 / C7.10-8: restore repair --------------------------------------------------------


async def test_repair_after_a_started_call(hs: Harness) -> None:
    """C7.2-9: a log cut right after ``tool/call(c1)`` gets result(c1, TOOL_OUTCOME_UNKNOWN),
    result(c2, TOOL_NOT_STARTED) in model order, then S-1.1, T-1:interrupted, end-seed —
    before anything of the new lifecycle."""
    await two_call_run(hs)
    store = store_of(hs.rt)
    kept = crash_copy(store, "s-1", "crashed", is_call("c1"))
    original = stored(store, "crashed")
    agent = await resume(hs, "crashed", setup=lambda scope: scope.agent.inject(user_message("c")))
    log = compact(agent.session)
    assert log[log.index("call(c1)") :] == [
        "call(c1)", "result(c1,TOOL_OUTCOME_UNKNOWN)", "result(c2,TOOL_NOT_STARTED)",
        "S-1.1", "T-1:interrupted", "session/end-seed", "ins(ns,c)",
    ]  # fmt: skip
    assert list(agent.session.events[:kept]) == original  # inherited events are verbatim
    assert_well_formed(agent.session)
    events = {e.data.message.call_id: e for e in events_of(agent.session, "tool/result")}
    call_c1 = next(e for e in agent.session.events if is_call("c1")(e))
    assistant = events_of(agent.session, "assistant/message")[0]
    assert events["c1"].source_event_seqs == (call_c1.seq,)
    assert events["c2"].source_event_seqs == (assistant.seq,)
    assert events["c1"].data.step == events["c2"].data.step == 1


async def test_repair_when_no_call_started(hs: Harness) -> None:
    """C7.2-9: without any ``tool/call`` every requested call gets TOOL_NOT_STARTED."""
    await two_call_run(hs)
    store = store_of(hs.rt)
    crash_copy(store, "s-1", "crashed", is_type("assistant/message"))
    agent = await resume(hs, "crashed")
    assert compact(agent.session)[-7:] == [
        "ctx", "msg", "result(c1,TOOL_NOT_STARTED)", "result(c2,TOOL_NOT_STARTED)",
        "S-1.1", "T-1:interrupted", "session/end-seed",
    ]  # fmt: skip
    assert_well_formed(agent.session)


async def test_repair_never_changes_committed_results(hs: Harness) -> None:
    """C7.2-9: a recorded result stays as it was; only the missing one is synthesised."""
    await two_call_run(hs)
    store = store_of(hs.rt)
    kept = crash_copy(store, "s-1", "crashed", is_result("c1"))
    before = stored(store, "crashed")
    agent = await resume(hs, "crashed")
    assert compact(agent.session)[-6:] == [
        "call(c1)", "result(c1)", "result(c2,TOOL_NOT_STARTED)", "S-1.1", "T-1:interrupted",
        "session/end-seed",
    ]  # fmt: skip
    assert agent.session.events[kept - 1] == before[-1]
    assert_well_formed(agent.session)


async def test_repair_of_an_open_step_without_output(hs: Harness) -> None:
    """C7.2-9: a step that produced nothing is closed, then its turn."""
    await two_call_run(hs)
    crash_copy(store_of(hs.rt), "s-1", "crashed", is_type("step/start"))
    agent = await resume(hs, "crashed")
    assert compact(agent.session) == [
        "ins(nt,u1)", "T+1", "claim(nt,u1)", "S+1.1", "S-1.1", "T-1:interrupted",
        "session/end-seed",
    ]  # fmt: skip


async def test_repair_of_a_turn_without_a_step(hs: Harness) -> None:
    """C7.2-9, C7.3-13: a turn that never opened a step gets only T-n:interrupted, and the
    next turn is numbered after it."""
    await two_call_run(hs)
    crash_copy(store_of(hs.rt), "s-1", "crashed", is_type("turn/start"))
    hs.adapter.add(text_response("again"), text_response("and again"))
    agent = await resume(hs, "crashed")
    assert compact(agent.session) == ["ins(nt,u1)", "T+1", "T-1:interrupted", "session/end-seed"]
    agent.followup(user_message("u2"))
    await settle(agent)
    # u1 was never claimed before the crash: it is still pending and goes first.
    assert compact(agent.session, only=("T", "claim")) == [
        "T+1", "T-1:interrupted", "T+2", "claim(nt,u1)", "T-2:completed",
        "T+3", "claim(nt,u2)", "T-3:completed",
    ]  # fmt: skip


async def test_balanced_log_gets_no_synthetic_events(hs: Harness) -> None:
    """C7.2-9 counterexample: a log whose turns are balanced only gets session/end-seed."""
    agent = await two_call_run(hs)
    expected = [*compact(agent.session), "session/end-seed"]
    crash_copy(store_of(hs.rt), "s-1", "copy")
    resumed = await resume(hs, "copy")
    assert compact(resumed.session) == expected
    assert resumed.session.events[-1].data.inherited is False


async def test_repair_classifies_like_in_step_recovery(hs: Harness) -> None:
    """C7.10-8: restore repair uses the in-step recovery rule and texts; only the turn end
    differs (``interrupted`` instead of ``error``)."""
    bench = Bench()
    hs.rt.tools.register(bench.tool("t"))
    live = await hs.agent(
        tool_calls_response([("c1", "t", {}), ("c2", "t", {}), ("c3", "t", {})]),
        session_id="live",
    )
    fail_append(live.session, on_event("c2", "tool/result"))
    live.followup(user_message("u1"))
    await settle(live)
    recovered = compact(live.session)
    assert recovered[recovered.index("call(c2)") :] == [
        "call(c2)", "result(c2,TOOL_OUTCOME_UNKNOWN)", "result(c3,TOOL_NOT_STARTED)",
        "S-1.1", "T-1:error",
    ]  # fmt: skip

    store = store_of(hs.rt)
    crash_copy(store, "live", "crashed", is_call("c2"))
    resumed = await resume(hs, "crashed")
    repaired = compact(resumed.session)
    assert repaired[repaired.index("call(c2)") :] == [
        "call(c2)", "result(c2,TOOL_OUTCOME_UNKNOWN)", "result(c3,TOOL_NOT_STARTED)",
        "S-1.1", "T-1:interrupted", "session/end-seed",
    ]  # fmt: skip

    def answers(agent: Any) -> dict[str, Any]:
        return {
            e.data.message.call_id: (
                e.data.error,
                e.data.message.content,
                e.data.message.is_error,
                e.source_event_seqs,
            )
            for e in events_of(agent.session, "tool/result")
            if e.data.message.call_id in ("c2", "c3")
        }

    assert answers(resumed) == answers(live)
    assert answers(resumed)["c2"][1][0].text == OUTCOME_UNKNOWN_TEXT
    assert answers(resumed)["c3"][1][0].text == NOT_STARTED_TEXT


# --- C7.2-11 / C7.2-12 / C7.3-13: what resume restores ------------------------------------------


async def test_resume_continues_numbering_and_writes_a_resume_header(hs: Harness) -> None:
    """C7.2-12, C7.3-13: after resume the first request writes hdr(resume), turns continue
    from the last turn/start, seqs continue without gaps; the request carries the
    repaired history."""
    await two_call_run(hs)
    crash_copy(store_of(hs.rt), "s-1", "crashed", is_call("c1"))
    hs.adapter.add(text_response("resumed"))
    agent = await resume(hs, "crashed")
    agent.followup(user_message("u2"))
    await settle(agent)
    log = compact(agent.session)
    assert log[log.index("session/end-seed") :] == [
        "session/end-seed", "ins(nt,u2)", "T+2", "claim(nt,u2)", "S+2.1", "user(u2)",
        "hdr(resume)", "msg", "S-2.1", "T-2:completed",
    ]  # fmt: skip
    assert [e.seq for e in agent.session.events] == list(range(1, len(agent.session.events) + 1))
    request = hs.adapter.requests[-1]
    assert tuple(request.messages) == tuple(agent.session.derive_messages()[:-1])
    roles = [m.role for m in request.messages]
    assert roles[-4:] == ["assistant", "tool", "tool", "user"]
    assert_well_formed(agent.session)


async def test_repeated_untouched_resume_adds_no_second_seed_marker(hs: Harness) -> None:
    """C7.2-12: resuming and disposing an untouched session repeatedly adds no second
    session/end-seed, and stores nothing else."""
    await two_call_run(hs)
    store = store_of(hs.rt)
    crash_copy(store, "s-1", "copy")
    for _ in range(3):
        handle = await hs.rt.agents.resume(resume_session_id="copy", agent_options=OPTIONS)
        await handle.dispose()
    types = [e.type for e in stored(store, "copy")]
    assert types.count("session/end-seed") == 1
    assert types[-2:] == ["turn/end", "session/end-seed"]


async def test_resume_restores_pending_inbox(hs: Harness) -> None:
    """C7.2-11: messages pending at the last write are pending again, in order, in the same
    queues; resume starts no turn on its own; the next waking send's turn claims them."""
    streaming = asyncio.Event()
    hs.rt.hooks.on(
        "agent/assistant-stream", lambda p: streaming.set() if p.frame.kind == "chunk" else None
    )
    agent = await hs.agent(HANG)
    agent.followup(user_message("u1"))
    await within(streaming.wait())
    agent.followup(user_message("u2"))
    agent.followup(user_message("u3"))
    agent.inject(user_message("c"))
    store = store_of(hs.rt)
    crash_copy(store, "s-1", "crashed")  # the process dies with turn 1 streaming
    hs.adapter.add(text_response("r2"), text_response("r3"), text_response("r4"))
    resumed = await resume(hs, "crashed")
    assert [label(m) for m in resumed.inbox.next_turn] == ["u2", "u3"]
    assert [label(m) for m in resumed.inbox.next_step] == ["c"]
    assert resumed.status == "idle"
    await wait_all_tasks_blocked()
    assert compact(resumed.session)[-6:] == [
        "ins(nt,u2)", "ins(nt,u3)", "ins(ns,c)", "S-1.1", "T-1:interrupted", "session/end-seed",
    ]  # fmt: skip
    resumed.followup(user_message("u4"))
    await settle(resumed)
    log = compact(resumed.session)
    after = log[log.index("session/end-seed") :]
    assert [i for i in after if i.startswith(("T", "claim", "user"))] == [
        "T+2", "claim(ns,c)", "claim(nt,u2)", "user(c)", "user(u2)", "T-2:completed",
        "T+3", "claim(nt,u3)", "user(u3)", "T-3:completed",
        "T+4", "claim(nt,u4)", "user(u4)", "T-4:completed",
    ]  # fmt: skip


async def test_idle_inject_before_restart_is_claimed_first(hs: Harness) -> None:
    """C7.2-11: an idle inject pending before a restart is claimed by the first turn after
    resume, ahead of the new prompt."""
    agent = await hs.agent()
    agent.inject(user_message("c"))
    crash_copy(store_of(hs.rt), "s-1", "crashed")
    hs.adapter.add(text_response("r"))
    resumed = await resume(hs, "crashed")
    assert compact(resumed.session) == ["ins(ns,c)", "session/end-seed"]
    assert [label(m) for m in resumed.inbox.next_step] == ["c"]
    resumed.followup(user_message("u1"))
    await settle(resumed)
    assert compact(resumed.session, only=("T", "claim", "user")) == [
        "T+1", "claim(ns,c)", "claim(nt,u1)", "user(c)", "user(u1)", "T-1:completed",
    ]  # fmt: skip


async def test_resume_announces_source_resume(hs: Harness) -> None:
    """C7.1-14: ``agent/session-start`` fires with source ``resume`` after agent/created."""
    await two_call_run(hs)
    crash_copy(store_of(hs.rt), "s-1", "copy")
    trace: list[str] = []
    hs.rt.hooks.on("agent/created", lambda p: trace.append("created"))
    hs.rt.hooks.on("agent/session-start", lambda p: trace.append(f"start:{p.source}"))
    await resume(hs, "copy")
    assert trace == ["created", "start:resume"]


async def test_resume_rollback_leaves_the_artifact_unchanged(hs: Harness) -> None:
    """C7.2-19 for resume: a resume whose setup raises stores neither the repair nor the
    seed marker; a later resume repairs once."""
    await two_call_run(hs)
    store = store_of(hs.rt)
    crash_copy(store, "s-1", "crashed", is_call("c1"))
    before = store.raw("crashed")

    def setup(scope: Any) -> None:
        raise RuntimeError("no")

    with pytest.raises(RuntimeError, match="no"):
        await resume(hs, "crashed", setup=setup)
    assert store.raw("crashed") == before
    agent = await resume(hs, "crashed")
    await agent.session.flush()
    assert [e.type for e in stored(store, "crashed")][-3:] == [
        "step/end", "turn/end", "session/end-seed",
    ]  # fmt: skip
    assert stored(store, "crashed") == list(agent.session.events)


# --- C7.2-5 … C7.2-10: restore or create -----------------------------------------------------


async def test_restore_or_create_restores_a_stored_session(hs: Harness) -> None:
    """C7.2-5: restore_or_create restores when the store holds the session (source resume,
    prior events kept, turn numbering continues)."""
    handle = await hs.rt.agents.create(session_id="s-1", agent_options=OPTIONS)
    hs.adapter.add(text_response("one"), text_response("two"))
    handle.agent.followup(user_message("u1"))
    await settle(handle.agent)
    before = list(handle.agent.session.events)
    await handle.dispose()
    sources: list[str] = []
    hs.rt.hooks.on("agent/session-start", lambda p: sources.append(p.source))
    again = await hs.rt.agents.restore_or_create(session_id="s-1", agent_options=OPTIONS)
    assert sources == ["resume"]
    assert list(again.agent.session.events[: len(before)]) == before
    again.agent.followup(user_message("u2"))
    await settle(again.agent)
    assert compact(again.agent.session, only=("T", "hdr")) == [
        "T+1", "hdr(initial)", "T-1:completed", "T+2", "hdr(resume)", "T-2:completed",
    ]  # fmt: skip


async def test_restore_or_create_creates_when_not_stored(hs: Harness) -> None:
    """C7.2-5: the not-found error makes restore_or_create take the create path."""
    sources: list[str] = []
    hs.rt.hooks.on("agent/session-start", lambda p: sources.append(p.source))
    handle = await hs.rt.agents.restore_or_create(session_id="fresh", agent_options=OPTIONS)
    assert sources == ["startup"]
    assert list(handle.agent.session.events) == []


class FailingStore(MemoryStore):
    """A store whose ``load`` fails with a given persistence error."""

    def __init__(self, error: SessionPersistenceError) -> None:
        super().__init__()
        self.error = error

    async def load(self, session_id: str) -> tuple[SessionEvent, ...]:
        raise self.error


@pytest.mark.parametrize(
    "error",
    [
        SessionCorruptError("seq 3: bad"),
        SessionConflictError("held elsewhere"),
        SessionStorageError("disk on fire"),
    ],
    ids=["corrupt", "conflict", "storage"],
)
async def test_restore_or_create_does_not_fall_back_on_other_errors(
    error: SessionPersistenceError,
) -> None:
    """C7.2-6: corrupt / conflict / storage errors from the resume attempt propagate as
    themselves; nothing is created and the stored artifact is byte-for-byte unchanged."""
    store = FailingStore(error)
    store.put_raw("s-1", ['{"seq":1,"time":1,"type":"turn/start","data":{"turn":1}}'])
    before = store.raw("s-1")
    rt = await Runtime.open(store=store)
    created: list[Any] = []
    rt.hooks.on("agent/created", created.append)
    try:
        with pytest.raises(type(error)) as caught:
            await rt.agents.restore_or_create(session_id="s-1", agent_options=OPTIONS)
        assert caught.value is error
        assert store.raw("s-1") == before
        assert rt.agents.get("s-1") is None
        assert rt.sessions.get("s-1") is None
        assert created == []
    finally:
        await within(rt.close())


async def test_restore_or_create_refuses_a_corrupt_stored_log(hs: Harness) -> None:
    """C7.2-6 through the real decoder: an unknown required event makes the log corrupt;
    restore_or_create raises it and leaves the artifact unchanged."""
    await two_call_run(hs)
    store = store_of(hs.rt)
    raw = list(store.raw("s-1"))
    raw.insert(3, '{"seq":4,"time":1,"type":"assistant/chunk","data":{}}')
    store.put_raw("bad", raw)
    with pytest.raises(SessionCorruptError, match="seq 4: unknown required event type"):
        await hs.rt.agents.restore_or_create(session_id="bad", agent_options=OPTIONS)
    assert list(store.raw("bad")) == raw
    assert hs.rt.agents.get("bad") is None


async def test_in_memory_runtime_has_nothing_to_resume(h: Harness) -> None:
    """C7.2-7: with no store, resume raises SessionPersistenceNotFoundError saying no store
    is configured, and restore_or_create creates."""
    with pytest.raises(SessionPersistenceNotFoundError, match="no store is configured"):
        await h.rt.agents.resume(resume_session_id="s-1", agent_options=OPTIONS)
    sources: list[str] = []
    h.rt.hooks.on("agent/session-start", lambda p: sources.append(p.source))
    handle = await h.rt.agents.restore_or_create(session_id="s-1", agent_options=OPTIONS)
    assert sources == ["startup"]
    assert handle.agent is h.rt.agents.get("s-1")
    with pytest.raises(RuntimeError, match="fork\\(\\) needs a store"):
        await h.rt.sessions.fork("s-1", 1, "child")


async def test_restore_or_create_waits_for_a_teardown(hs: Harness) -> None:
    """C7.2-8: with the old lifecycle still tearing down, restore_or_create waits, then
    restores the log it flushed, including its final turn/end."""
    hs.adapter.add(HANG)
    handle = await hs.rt.agents.create(session_id="s-1", agent_options=OPTIONS)
    handle.agent.followup(user_message("u1"))
    disposing = asyncio.ensure_future(handle.dispose())
    await asyncio.sleep(0)
    again = await within(hs.rt.agents.restore_or_create(session_id="s-1", agent_options=OPTIONS))
    assert disposing.done()
    assert again.agent is not handle.agent
    log = compact(again.agent.session)
    assert log[-2:] == ["T-1:aborted", "session/end-seed"]
    assert again.agent.session.events[-2].data.reason.reason == CancelCause.disposed()


async def test_restore_or_create_of_a_live_agent_raises(hs: Harness) -> None:
    """C7.2-8 counterexample / C7.1-2: a live agent that is not being disposed makes
    restore_or_create raise RuntimeError at once, changing nothing."""
    hs.adapter.add(HANG)
    agent = await hs.agent()
    agent.followup(user_message("u1"))
    before = list(agent.session.events)
    with pytest.raises(RuntimeError, match="live"):
        await hs.rt.agents.restore_or_create(session_id="s-1", agent_options=OPTIONS)
    assert list(agent.session.events) == before


async def test_live_session_cannot_be_resumed(hs: Harness) -> None:
    """C7.2-10: resume of a session live in this runtime raises RuntimeError and appends
    no repair to the live (mid-turn) log."""
    hs.adapter.add(HANG)
    agent = await hs.agent()
    agent.followup(user_message("u1"))
    before = list(agent.session.events)
    with pytest.raises(RuntimeError, match="live"):
        await resume(hs, "s-1")
    assert list(agent.session.events) == before
    assert "turn/end" not in [e.type for e in agent.session.events]


async def test_session_held_by_another_process_conflicts() -> None:
    """C7.2-10: when another runtime (process) holds the write ownership, resume raises
    SessionConflictError; neither the owner's log nor the stored artifact changes."""
    shared = MemoryStore()
    owner = await Runtime.open(store=shared)
    other = await Runtime.open(store=shared)
    try:
        h = Harness(owner)
        agent = await h.agent(HANG)
        agent.followup(user_message("u1"))
        before_live = list(agent.session.events)
        before_raw = shared.raw("s-1")
        with pytest.raises(SessionConflictError):
            await other.agents.resume(resume_session_id="s-1", agent_options=OPTIONS)
        with pytest.raises(SessionConflictError):
            await other.agents.restore_or_create(session_id="s-1", agent_options=OPTIONS)
        assert other.agents.get("s-1") is None
        assert list(agent.session.events) == before_live
        assert shared.raw("s-1") == before_raw
    finally:
        await within(other.close())
        await within(owner.close())


async def test_impossible_splices_refuse_the_log(hs: Harness) -> None:
    """C7.4-20: a log whose splices remove past the queue, or make a pending id appear
    twice, raises SessionCorruptError on resume; no agent is published."""
    agent = await hs.agent()
    agent.inject(user_message("c"))
    store = store_of(hs.rt)
    raw = list(store.raw("s-1"))
    inserted = json.loads(raw[0])["data"]["inserted"]
    too_far = {
        "seq": 2,
        "time": 1,
        "type": "agent/inbox/spliced",
        "data": {"target": "next-step", "start": 0, "removed_count": 2, "inserted": []},
    }
    twice = {
        "seq": 2,
        "time": 1,
        "type": "agent/inbox/spliced",
        "data": {"target": "next-turn", "start": 0, "removed_count": 0, "inserted": inserted},
    }
    created: list[Any] = []
    hs.rt.hooks.on("agent/created", created.append)
    for name, bad in (("too-far", too_far), ("twice", twice)):
        store.put_raw(name, [raw[0], json.dumps(bad)])
        with pytest.raises(SessionCorruptError, match="seq 2: "):
            await resume(hs, name)
        with pytest.raises(SessionCorruptError, match="seq 2: "):
            await hs.rt.agents.restore_or_create(session_id=name, agent_options=OPTIONS)
        assert hs.rt.agents.get(name) is None
        assert hs.rt.sessions.get(name) is None
    assert created == []


# --- C7.10-9: fork ---------------------------------------------------------------------------


async def test_fork_repairs_the_child_only(hs: Harness) -> None:
    """C7.10-9: a fork cut inside a turn seeds the child with the parent's prefix, repairs
    the child's tail with the restore algorithm and ends with end-seed{inherited} at the
    cut; the parent's log (live and stored) never changes; the child's turns continue."""
    parent = await two_call_run(hs)
    store = store_of(hs.rt)
    parent_events = list(parent.session.events)
    parent_raw = store.raw("s-1")
    at = next(e.seq for e in parent_events if is_call("c1")(e))
    child = await hs.rt.sessions.fork("s-1", at, "child")
    assert list(child.events[:at]) == parent_events[:at]
    tail = [e.type for e in child.events[at:]]
    assert tail == ["tool/result", "tool/result", "step/end", "turn/end", "session/end-seed"]
    assert compact(child)[-5:] == [
        "result(c1,TOOL_OUTCOME_UNKNOWN)", "result(c2,TOOL_NOT_STARTED)", "S-1.1",
        "T-1:interrupted", "session/end-seed",
    ]  # fmt: skip
    assert child.events[-1].data.inherited is True
    assert_well_formed(child)
    assert list(parent.session.events) == parent_events
    assert store.raw("s-1") == parent_raw
    assert stored(store, "child") == list(child.events)

    hs.adapter.add(text_response("child turn"))
    resumed = await resume(hs, "child")
    resumed.followup(user_message("u2"))
    await settle(resumed)
    assert compact(resumed.session, only=("T", "hdr", "session/")) == [
        "T+1", "hdr(initial)", "T-1:interrupted", "session/end-seed", "T+2", "hdr(resume)",
        "T-2:completed",
    ]  # fmt: skip


async def test_fork_at_a_balanced_cut_marks_the_exact_cut(hs: Harness) -> None:
    """C7.10-9: a balanced prefix gets no synthetic events; end-seed{inherited} directly
    follows the inherited cut. Works on a stored (not live) parent."""
    handle = await hs.rt.agents.create(session_id="s-1", agent_options=OPTIONS)
    hs.adapter.add(text_response("r1"), text_response("r2"))
    for text in ("u1", "u2"):
        handle.agent.followup(user_message(text))
        await settle(handle.agent)
    events = list(handle.agent.session.events)
    await handle.dispose()
    at = next(e.seq for e in events if e.type == "turn/end")
    child = await hs.rt.sessions.fork("s-1", at, "child")
    assert len(child.events) == at + 1
    assert list(child.events[:at]) == events[:at]
    assert child.events[at].type == "session/end-seed"
    assert child.events[at].data.inherited is True
    assert child.header["parent_session"] == "s-1"


async def test_fork_at_a_plain_seed_marker_adds_an_inherited_one(hs: Harness) -> None:
    """C7.10-9: a cut on a resume's plain marker still gets the inherited marker."""
    await two_call_run(hs)
    crash_copy(store_of(hs.rt), "s-1", "copy")
    resumed = await resume(hs, "copy")
    at = len(resumed.session.events)
    assert resumed.session.events[-1].type == "session/end-seed"
    child = await hs.rt.sessions.fork("copy", at, "child")
    assert [(e.type, e.data.inherited) for e in child.events[at - 1 :]] == [
        ("session/end-seed", False),
        ("session/end-seed", True),
    ]


async def test_fork_argument_errors(hs: Harness) -> None:
    """fork() refuses a cut outside the parent, an unknown parent, and a taken id."""
    agent = await two_call_run(hs)
    n = len(agent.session.events)
    with pytest.raises(ValueError, match="outside"):
        await hs.rt.sessions.fork("s-1", n + 1, "child")
    with pytest.raises(ValueError, match="outside"):
        await hs.rt.sessions.fork("s-1", 0, "child")
    with pytest.raises(SessionPersistenceNotFoundError):
        await hs.rt.sessions.fork("nobody", 1, "child")
    with pytest.raises(RuntimeError, match="live"):
        await hs.rt.sessions.fork("s-1", 1, "s-1")
    await hs.rt.sessions.fork("s-1", 2, "child")
    with pytest.raises(SessionConflictError):
        await hs.rt.sessions.fork("s-1", 3, "child")
    assert not await store_of(hs.rt).exists("nobody")
