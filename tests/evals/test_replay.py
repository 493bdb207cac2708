"""``replay``: a recorded session run again with scripted models; the log of the replay and
the report are asserted exactly."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Sequence
from typing import Any

import pytest

from steerloop import (
    AgentOptions,
    CancelCause,
    Runtime,
    ToolDecision,
    define_tool,
    tool,
    user_message,
)
from steerloop.evals import TurnRun, replay
from steerloop.llm import GenerateRequest, TokenUsage
from steerloop.llm.chunks import Finish, StreamChunk, UsageChunk
from steerloop.messages import TextBlock
from steerloop.session import Session
from steerloop.testing import (
    ScriptedAdapter,
    text_response,
    tool_call_response,
    tool_calls_response,
)
from steerloop.tools import ToolExec

from ..support import SETTLE_TIMEOUT, Bench, compact, within

REC = AgentOptions(provider="rec", model="old")
NEW = AgentOptions(provider="new", model="candidate")


class Reads:
    """A concurrency-safe ``read_file`` and an exclusive ``write_file`` that count runs."""

    def __init__(self) -> None:
        self.runs: list[str] = []

        @tool(concurrency_safe=True)
        async def read_file(path: str) -> str:
            """Read a file.

            Args:
                path: The file.
            """
            self.runs.append(f"read:{path}")
            return f"contents of {path}"

        @tool
        async def write_file(path: str, text: str) -> str:
            """Write a file.

            Args:
                path: The file.
                text: What to write.
            """
            self.runs.append(f"write:{path}")
            return f"wrote {path}"

        self.read_file, self.write_file = read_file, write_file


@pytest.fixture
async def rt() -> AsyncIterator[Runtime]:
    runtime = await Runtime.open(store="memory://")
    try:
        yield runtime
    finally:
        await asyncio.wait_for(runtime.close(), SETTLE_TIMEOUT)


def scripted(rt: Runtime, provider: str, *script: Any) -> ScriptedAdapter:
    adapter = ScriptedAdapter(list(script))
    rt.llm.register_adapter([provider], adapter)
    return adapter


async def replay_log(rt: Runtime, replay_id: str) -> Session:
    """The stored log of a replay session, as a detached ``Session`` (for ``compact``)."""
    store = rt.sessions.persistence
    assert store is not None
    return Session._create(replay_id, seed=await store.load(replay_id), repair=False)


def with_usage(chunks: list[StreamChunk], **counts: int) -> list[StreamChunk]:
    """``chunks`` with a usage report before their finish."""
    *body, finish = chunks
    assert isinstance(finish, Finish)
    return [*body, UsageChunk(usage=TokenUsage(**counts)), finish]


def last_user_text(request: GenerateRequest) -> str:
    message = request.messages[-1]
    assert message.role == "user"
    block = message.content[0]
    assert isinstance(block, TextBlock)
    return block.text


async def record_reads(rt: Runtime, reads: Reads) -> None:
    """Two turns: read a.txt then answer; then write b.txt and read it in one step."""
    rt.tools.register(reads.read_file)
    rt.tools.register(reads.write_file)
    scripted(
        rt,
        "rec",
        tool_call_response("c1", "read_file", {"path": "a.txt"}),
        text_response("a says hi"),
        tool_calls_response(
            [
                ("c2", "write_file", {"path": "b.txt", "text": "x"}),
                ("c3", "read_file", '{"path":"b.txt"}'),
            ]
        ),
        text_response("b written"),
    )
    handle = await rt.agents.create(session_id="s-1", agent_options=REC)
    assert (await within(handle.agent.run("read a"))).kind == "completed"
    assert (await within(handle.agent.run("write b"))).kind == "completed"
    await handle.dispose()


async def test_identical_replay_answers_every_call_from_the_recording(rt: Runtime) -> None:
    """The same script again: no divergence, every call matched and answered with its
    recorded result, no tool body runs; the replay's log is the recording's, event for event;
    the original is not written."""
    reads = Reads()
    await record_reads(rt, reads)
    assert reads.runs == ["read:a.txt", "write:b.txt", "read:b.txt"]
    store = rt.sessions.persistence
    assert store is not None
    recorded = await store.load("s-1")
    new = scripted(
        rt,
        "new",
        tool_call_response("c1", "read_file", {"path": "a.txt"}),
        text_response("a says hi"),
        # the same calls, the arguments spelled another way (key order, spacing)
        tool_calls_response(
            [
                ("c2", "write_file", '{"text": "x", "path": "b.txt"}'),
                ("c3", "read_file", {"path": "b.txt"}),
            ]
        ),
        text_response("b written"),
    )

    report = await within(replay(rt, "s-1", agent_options=NEW))

    assert reads.runs == ["read:a.txt", "write:b.txt", "read:b.txt"]  # nothing ran again
    assert await store.load("s-1") == recorded
    assert report.diverged_at is None
    assert [(t.turn, t.replay_turn) for t in report.turns] == [(1, 1), (2, 2)]
    assert [[(c.status, c.name, c.answered) for c in t.calls] for t in report.turns] == [
        [("matched", "read_file", "recording")],
        [("matched", "write_file", "recording"), ("matched", "read_file", "recording")],
    ]
    totals = report.totals
    assert (totals.matched, totals.new, totals.missing) == (3, 0, 0)
    assert (totals.tool_executions, totals.not_recorded) == (0, 0)
    assert report.recorded_model == "rec/old"
    assert report.model == "new/candidate"
    # The new model saw the recorded results.
    tool_texts = [
        m.content[0].text  # type: ignore[union-attr]
        for m in new.requests[3].messages
        if m.role == "tool"
    ]
    assert tool_texts == ["contents of a.txt", "wrote b.txt", "contents of b.txt"]
    log = await replay_log(rt, report.replay_session_id)
    original = Session._create("s-1", seed=recorded, repair=False)
    assert compact(log) == compact(original)


async def test_a_different_tool_diverges_and_is_not_recorded(rt: Runtime) -> None:
    """A call the recording lacks is answered ``NOT_RECORDED`` (nothing runs) and the first
    divergence names its turn and step; later turns still run."""
    reads = Reads()
    await record_reads(rt, reads)
    new = scripted(
        rt,
        "new",
        tool_call_response("c1", "read_file", {"path": "a.txt"}),
        text_response("a says hi"),
        tool_call_response("k1", "read_file", {"path": "c.txt"}),
        text_response("no luck"),
    )

    report = await within(replay(rt, "s-1", agent_options=NEW))

    assert reads.runs == ["read:a.txt", "write:b.txt", "read:b.txt"]
    first = report.diverged_at
    assert first is not None
    assert (first.turn, first.step, first.kind) == (2, 1, "tool-calls")
    assert first.detail == (
        'called `read_file({"path":"c.txt"})` (answered NOT_RECORDED), not in the recording; '
        'the recording called `write_file({"path":"b.txt","text":"x"})`, '
        '`read_file({"path":"b.txt"})`'
    )
    assert [d.kind for d in report.turns[1].divergences] == ["tool-calls", "text"]
    assert report.turns[0].divergences == ()
    assert [(c.status, c.answered) for c in report.turns[1].calls] == [
        ("new", "not-recorded"),
        ("missing", None),
        ("missing", None),
    ]
    assert report.totals.not_recorded == 1
    result = new.requests[3].messages[-1]
    assert result.role == "tool" and result.is_error
    assert result.content == (TextBlock("this tool is unavailable during replay"),)
    log = await replay_log(rt, report.replay_session_id)
    assert "result(k1,NOT_RECORDED)" in compact(log)


async def test_live_tools_run_reads_only_unless_side_effects_are_allowed(rt: Runtime) -> None:
    """``tools="live"``: an unrecorded read runs the real tool, an unrecorded write is
    ``NOT_RECORDED``; with ``allow_side_effects`` the write runs too."""
    reads = Reads()
    await record_reads(rt, reads)
    calls = tool_calls_response(
        [("k1", "read_file", {"path": "new.txt"}), ("k2", "write_file", {"path": "z", "text": "y"})]
    )
    script = [text_response("skip"), calls, text_response("done")]
    scripted(rt, "new", *script)
    report = await within(replay(rt, "s-1", agent_options=NEW, tools="live"))
    assert reads.runs[3:] == ["read:new.txt"]
    assert [(c.name, c.status, c.answered) for c in report.turns[1].calls if c.status == "new"] == [
        ("read_file", "new", "live"),
        ("write_file", "new", "not-recorded"),
    ]
    assert (report.totals.tool_executions, report.totals.not_recorded) == (1, 1)

    scripted(rt, "new", *script)
    report = await within(
        replay(rt, "s-1", agent_options=NEW, tools="live", allow_side_effects=True)
    )
    assert reads.runs[4:] == ["read:new.txt", "write:z"]
    assert report.totals.tool_executions == 2


def works(*numbers: int) -> list[list[StreamChunk]]:
    """Answers that call ``work`` once each: call ``c<n>`` with ``{"n": n}``."""
    return [tool_call_response(f"c{n}", "work", {"n": n}) for n in numbers]


async def record_steered(rt: Runtime, bench: Bench) -> None:
    """One turn of four steps: the steer arrives while step 2's tool runs (so step 3 takes
    it), an inject while step 3's tool runs (step 4 takes it)."""
    rt.tools.register(bench.tool("work"))
    scripted(
        rt,
        "rec",
        *works(1, 2, 3),
        text_response("done"),
    )
    handle = await rt.agents.create(session_id="s-1", agent_options=REC)
    agent = handle.agent
    bench.gate("c2", "c3")
    agent.followup(user_message("go"))
    await bench.wait_started("c2")
    agent.steer(user_message("also check x"))
    bench.release("c2")
    await bench.wait_started("c3")
    agent.inject(user_message("fyi: y"))
    bench.release("c3")
    await within(agent.when_idle())
    assert compact(agent.session, only=("S+", "user")) == [
        "S+1.1", "user(go)", "S+1.2", "S+1.3", "user(also check x)", "S+1.4", "user(fyi: y)",
    ]  # fmt: skip
    await handle.dispose()


async def test_steers_reach_the_model_at_their_recorded_step(rt: Runtime) -> None:
    """Each steer or inject is delivered at the step index it had in the recording."""
    bench = Bench()
    await record_steered(rt, bench)
    new = scripted(
        rt,
        "new",
        *works(1, 2, 3),
        text_response("done"),
    )
    report = await within(replay(rt, "s-1", agent_options=NEW))
    assert report.diverged_at is None
    log = await replay_log(rt, report.replay_session_id)
    assert compact(log, only=("S+", "user", "ins", "claim")) == [
        "ins(nt,go)", "claim(nt,go)", "S+1.1", "user(go)",
        # injected as step 2 is entered, so that step 3 claims it
        "ins(ns,also check x)", "S+1.2",
        "claim(ns,also check x)", "ins(ns,fyi: y)", "S+1.3", "user(also check x)",
        "claim(ns,fyi: y)", "S+1.4", "user(fyi: y)",
    ]  # fmt: skip
    assert last_user_text(new.requests[2]) == "also check x"
    assert last_user_text(new.requests[3]) == "fyi: y"
    assert [
        (d.text, d.recorded_step, d.delivered_step, d.moved) for d in report.turns[0].inputs
    ] == [
        ("go", 1, 1, False),
        ("also check x", 3, 3, False),
        ("fyi: y", 4, 4, False),
    ]


async def test_a_run_with_fewer_steps_gets_the_steer_at_its_next_step(rt: Runtime) -> None:
    """A new run that stops after step 1 gets the step-3 steer at its next step (2), and the
    step-4 inject one step after that (3); the report says each moved."""
    bench = Bench()
    await record_steered(rt, bench)
    new = scripted(
        rt,
        "new",
        text_response("nothing to do"),
        text_response("ok, x"),
        text_response("ok, y"),
    )
    report = await within(replay(rt, "s-1", agent_options=NEW))
    assert [
        (d.text, d.recorded_step, d.delivered_step, d.moved) for d in report.turns[0].inputs
    ] == [
        ("go", 1, 1, False),
        ("also check x", 3, 2, True),
        ("fyi: y", 4, 3, True),
    ]
    assert last_user_text(new.requests[1]) == "also check x"
    assert last_user_text(new.requests[2]) == "fyi: y"
    first = report.diverged_at
    assert first is not None and (first.turn, first.step, first.kind) == (1, 1, "tool-calls")
    markdown = report.to_markdown()
    assert "steer “also check x”: recorded at step 3, delivered at step 2 (the new run had" in (
        markdown
    )


async def test_a_recorded_cancel_is_replayed_at_its_step(rt: Runtime) -> None:
    """Turn 1 was cancelled by the user while step 2's tool ran; the replay cancels once its
    step 2 has answered (the call never runs) and goes on with turn 2."""
    bench = Bench()
    rt.tools.register(bench.tool("work"))
    scripted(
        rt,
        "rec",
        *works(1, 2),
        text_response("resumed"),
    )
    handle = await rt.agents.create(session_id="s-1", agent_options=REC)
    agent = handle.agent
    bench.gate("c2")
    agent.followup(user_message("go"))
    await bench.wait_started("c2")
    agent.cancel(CancelCause.user())
    bench.release("c2")
    await within(agent.when_idle())
    assert (await within(agent.run("continue"))).kind == "completed"
    await handle.dispose()
    ran = len(bench.trace)

    scripted(
        rt,
        "new",
        *works(1, 2),
        text_response("resumed"),
    )
    report = await within(replay(rt, "s-1", agent_options=NEW))
    assert bench.trace[ran:] == []
    log = await replay_log(rt, report.replay_session_id)
    assert compact(log, only=("S", "call", "result", "T")) == [
        "T+1", "S+1.1", "call(c1)", "result(c1)", "S-1.1", "S+1.2", "call(c2)",
        "result(c2,ABORTED_BEFORE_DISPATCH)", "S-1.2", "T-1:aborted",
        "T+2", "S+2.1", "S-2.1", "T-2:completed",
    ]  # fmt: skip
    end = next(e for e in log.events if e.type == "turn/end").data.reason
    assert end.reason == CancelCause.user()
    cancel = report.turns[0].cancel
    assert cancel is not None and (cancel.recorded_step, cancel.replayed_step) == (2, 2)
    assert report.turns[1].recorded.end == report.turns[1].new.end == "completed"


async def test_a_cancel_after_the_new_turn_ended_is_not_replayed(rt: Runtime) -> None:
    """A new run that finishes before the recorded cancel's step is not cancelled: its turn
    completes, and the report says the cancel was not replayed."""
    bench = Bench()
    rt.tools.register(bench.tool("work"))
    scripted(rt, "rec", tool_call_response("c1", "work", {}), tool_call_response("c2", "work", {}))
    handle = await rt.agents.create(session_id="s-1", agent_options=REC)
    bench.gate("c2")
    handle.agent.followup(user_message("go"))
    await bench.wait_started("c2")
    handle.agent.cancel(CancelCause.user())
    bench.release("c2")
    await within(handle.agent.when_idle())
    await handle.dispose()

    scripted(rt, "new", text_response("done already"))
    report = await within(replay(rt, "s-1", agent_options=NEW))
    turn = report.turns[0]
    assert turn.cancel is not None and (turn.cancel.recorded_step, turn.cancel.replayed_step) == (
        2,
        None,
    )
    assert turn.new is not None and turn.new.end == "completed"
    assert [(d.step, d.kind) for d in turn.divergences] == [
        (1, "tool-calls"),
        (1, "text"),
        (1, "outcome"),
        (2, "steps"),
    ]


def write_both() -> list[list[StreamChunk]]:
    return [
        tool_calls_response(
            [
                ("c1", "write_file", {"path": "a", "text": "1"}),
                ("c2", "write_file", {"path": "b", "text": "2"}),
            ]
        ),
        text_response("one written"),
    ]


def approval_policy(payload: Any) -> ToolDecision | None:
    return ToolDecision.ask("writes need a person") if payload.exec.name == "write_file" else None


async def test_recorded_approvals_are_replayed_as_decided(tmp_path: Any) -> None:
    """Recorded in a runtime that asks before writes (one allowed, one denied), replayed in a
    fresh runtime on the same store that asks nobody: the matched calls are asked again and
    decided as recorded, by the replay; nothing runs."""
    store = f"sqlite:///{tmp_path / 's.db'}"
    reads = Reads()
    async with Runtime.open(store=store) as rt:
        rt.tools.register(reads.write_file)
        rt.hooks.on("tools/pre-execute", approval_policy)

        def decide(payload: Any) -> None:
            exec = payload.exec
            verdict = "allow" if exec.call_id == "c1" else "deny"
            payload.exec.agent.decide_approval(
                exec.call_id, verdict, reason=f"{verdict} it", by="ann"
            )

        rt.hooks.on("tools/approval-requested", decide)
        scripted(
            rt,
            "rec",
            *write_both(),
        )
        handle = await rt.agents.create(session_id="s-1", agent_options=REC)
        await within(handle.agent.run("write both"))
        await handle.dispose()
    assert reads.runs == ["write:a"]

    async with Runtime.open(store=store) as rt:
        scripted(
            rt,
            "new",
            *write_both(),
        )
        report = await within(replay(rt, "s-1", agent_options=NEW))
        log = await replay_log(rt, report.replay_session_id)
        original = await replay_log(rt, "s-1")
    assert reads.runs == ["write:a"]
    assert report.diverged_at is None
    only = ("call", "ask", "decide", "result")
    assert compact(log, only=only) == compact(original, only=only) == [
        "call(c1)", "ask(c1)", "decide(c1,allow)", "result(c1)",
        "call(c2)", "ask(c2)", "decide(c2,deny)", "result(c2,DENIED)",
    ]  # fmt: skip
    decided = [e.data for e in log.events if e.type == "tool/approval-decided"]
    assert [(d.decision, d.reason, d.by) for d in decided] == [
        ("allow", "allow it", "steerloop/replay"),
        ("deny", "deny it", "steerloop/replay"),
    ]
    asked = [e.data.reason for e in log.events if e.type == "tool/approval-requested"]
    assert asked == ["writes need a person", "writes need a person"]
    assert report.totals.approvals_replayed == 2


async def test_a_new_approval_request_is_denied_with_a_reason(rt: Runtime) -> None:
    """In a runtime whose policy asks before writes, a write the recording never made is
    asked about and denied by the replay, with a reason; the body never runs."""
    reads = Reads()
    await record_reads(rt, reads)
    rt.hooks.on("tools/pre-execute", approval_policy)
    scripted(
        rt,
        "new",
        text_response("skip"),
        tool_call_response("k1", "write_file", {"path": "other", "text": "y"}),
        text_response("denied, fine"),
    )
    report = await within(replay(rt, "s-1", agent_options=NEW, tools="live"))
    assert reads.runs[3:] == []
    log = await replay_log(rt, report.replay_session_id)
    decided = [e.data for e in log.events if e.type == "tool/approval-decided"]
    assert [(d.call_id, d.decision, d.by) for d in decided] == [("k1", "deny", "steerloop/replay")]
    assert decided[0].reason == (
        "a new approval request during a replay: no person is asked, so it is denied"
    )
    assert "result(k1,DENIED)" in compact(log)
    assert report.totals.approvals_denied == 1


async def test_usage_and_wall_time_are_reported_per_turn_and_in_total(rt: Runtime) -> None:
    """Usage (input, cached, output, reasoning) of each side, per turn and summed."""
    scripted(
        rt,
        "rec",
        with_usage(text_response("one"), input_tokens=100, output_tokens=10, cache_read_tokens=40),
        with_usage(text_response("two"), input_tokens=120, output_tokens=12, reasoning_tokens=5),
    )
    handle = await rt.agents.create(session_id="s-1", agent_options=REC)
    await within(handle.agent.run("first"))
    await within(handle.agent.run("second"))
    await handle.dispose()
    scripted(
        rt,
        "new",
        with_usage(text_response("one"), input_tokens=90, output_tokens=30, reasoning_tokens=20),
        with_usage(text_response("two"), input_tokens=95, output_tokens=8, cache_read_tokens=60),
    )
    seen: list[tuple[int, int]] = []

    def score(recorded: TurnRun, new: TurnRun) -> float:
        seen.append((recorded.usage.input_tokens, new.usage.input_tokens))
        return 1.0 if recorded.text == new.text else 0.0

    report = await within(replay(rt, "s-1", agent_options=NEW, score=score))
    assert seen == [(100, 90), (120, 95)]
    data = report.to_json()
    assert [t["recorded"]["usage"] for t in data["turns"]] == [
        {"input": 100, "cached": 40, "output": 10, "reasoning": 0},
        {"input": 120, "cached": 0, "output": 12, "reasoning": 5},
    ]
    assert [t["new"]["usage"] for t in data["turns"]] == [
        {"input": 90, "cached": 0, "output": 30, "reasoning": 20},
        {"input": 95, "cached": 60, "output": 8, "reasoning": 0},
    ]
    assert data["totals"]["recorded_usage"] == {
        "input": 220, "cached": 40, "output": 22, "reasoning": 5,
    }  # fmt: skip
    assert data["totals"]["new_usage"] == {
        "input": 185,
        "cached": 60,
        "output": 38,
        "reasoning": 20,
    }
    assert [t.score for t in report.turns] == [1.0, 1.0]
    assert report.totals.score == 1.0
    assert all(t.recorded.wall_ms >= 0 and t.new is not None for t in report.turns)
    assert json.loads(json.dumps(data)) == data
    markdown = report.to_markdown()
    assert "| 1 | 1 → 1 | 0 / 0 / 0 | 100·40·10·0 → 90·0·30·20 |" in markdown
    assert "- input tokens: 220 → 185" in markdown


async def test_replay_from_a_later_turn_forks_and_keeps_the_history(rt: Runtime) -> None:
    """``from_turn=2``: the new session inherits turn 1 as recorded (its parent is the
    original), only turn 2 runs; the model sees turn 1 in its history."""
    reads = Reads()
    await record_reads(rt, reads)
    new = scripted(
        rt,
        "new",
        tool_calls_response(
            [
                ("c2", "write_file", {"path": "b.txt", "text": "x"}),
                ("c3", "read_file", {"path": "b.txt"}),
            ]
        ),
        text_response("b written"),
    )
    report = await within(replay(rt, "s-1", agent_options=NEW, from_turn=2))
    assert [t.turn for t in report.turns] == [2]
    assert report.diverged_at is None
    store = rt.sessions.persistence
    assert store is not None
    header = await store.load_header(report.replay_session_id)
    assert header["parent_session"] == "s-1"
    history = [m.role for m in new.requests[0].messages]  # no persona: no system message
    assert history == ["user", "assistant", "tool", "assistant", "user"]


async def test_the_recorded_system_prompt_is_kept_or_replaced(rt: Runtime) -> None:
    """Recorded under a persona, replayed in a runtime without one: the model gets the
    recorded prompt; ``system_prompt=`` replaces it."""
    async with Runtime.open(store=rt.sessions.persistence, persona="You are terse.") as other:
        scripted(other, "rec", text_response("ok"))
        handle = await other.agents.create(session_id="s-1", agent_options=REC)
        await within(handle.agent.run("hi"))
        await handle.dispose()
    new = scripted(rt, "new", text_response("ok"), text_response("ok"))
    await within(replay(rt, "s-1", agent_options=NEW))
    assert new.requests[0].messages[0].content == (TextBlock("You are terse."),)
    report = await within(replay(rt, "s-1", agent_options=NEW, system_prompt="Be verbose."))
    assert new.requests[1].messages[0].content == (TextBlock("Be verbose."),)
    assert report.system_prompt == "Be verbose."
    assert "| system prompt | recorded | replaced (11 characters) |" in report.to_markdown()


async def test_arguments_are_refused_before_anything_runs(rt: Runtime) -> None:
    """Bad arguments raise ``ValueError``; an unknown session the store's not-found error;
    a turn the session does not have names the turns it has."""
    reads = Reads()
    await record_reads(rt, reads)
    with pytest.raises(ValueError, match="from_turn must be an integer >= 1"):
        await replay(rt, "s-1", agent_options=NEW, from_turn=0)
    with pytest.raises(ValueError, match="tools must be 'recorded' or 'live'"):
        await replay(rt, "s-1", agent_options=NEW, tools="all")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"has no closed turn 3 \(its turns: 1..2\)"):
        await replay(rt, "s-1", agent_options=NEW, from_turn=3)
    from steerloop import SessionPersistenceNotFoundError

    with pytest.raises(SessionPersistenceNotFoundError):
        await replay(rt, "nope", agent_options=NEW)
    assert await rt.sessions.persistence.list() == ("s-1",)  # type: ignore[union-attr]


def _names(calls: Sequence[Any]) -> list[str]:
    return [c.name for c in calls]


async def test_tool_context_deferred_by_a_recorded_call_comes_again(rt: Runtime) -> None:
    """A call answered from the recording brings the context its tool deferred, so the next
    step sees what it saw."""

    async def note(args: Any, exec: ToolExec) -> str:
        exec.defer_context(user_message("the file changed on disk"))
        return "noted"

    rt.tools.register(
        define_tool(name="note", description="n", parameters={"type": "object"}, execute=note)
    )
    scripted(rt, "rec", tool_call_response("c1", "note", {}), text_response("seen"))
    handle = await rt.agents.create(session_id="s-1", agent_options=REC)
    await within(handle.agent.run("go"))
    await handle.dispose()
    new = scripted(rt, "new", tool_call_response("c1", "note", {}), text_response("seen"))
    report = await within(replay(rt, "s-1", agent_options=NEW))
    assert report.diverged_at is None
    assert last_user_text(new.requests[1]) == "the file changed on disk"
