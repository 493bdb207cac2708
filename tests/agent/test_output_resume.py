"""Resume after a real crash (SIGKILL of a subprocess on a SQLite file) in a structured turn:
the repaired log keeps the retry message and the recorded ``turn/output``; a fresh
Runtime's ``TurnResult.from_session`` reads the output back; a new structured run on the
resumed agent works, and everything round-trips through the store."""

from __future__ import annotations

from pathlib import Path

import pydantic

from steerloop import AgentOptions, Runtime, TurnResult
from steerloop.session._sqlite import SqliteStore
from steerloop.testing import ScriptedAdapter, tool_call_response

from ..conftest import compact, events_of, within
from ..logcheck import assert_well_formed
from ..support import kill_after_first_line

SCRIPT = Path(__file__).with_name("_output_crash_child.py")
OPTIONS = AgentOptions(provider="mock", model="m")
LINE_TIMEOUT = 20.0
WRONG = (
    "Your final answer is not valid: celsius: Field required. "
    "Call final_result again with corrected arguments."
)


class Weather(pydantic.BaseModel):
    city: str
    celsius: float


async def run_and_kill(path: Path, mode: str) -> int:
    word, count = await kill_after_first_line(SCRIPT, str(path), mode, timeout=LINE_TIMEOUT)
    assert word == "ready"
    return int(count)


async def resume(path: Path) -> tuple[SqliteStore, Runtime, ScriptedAdapter]:
    store = SqliteStore(path)
    rt = await Runtime.open(store=store)
    model = ScriptedAdapter()
    rt.llm.register_adapter(["mock"], model)
    return store, rt, model


async def test_crash_while_retrying_then_a_fresh_runtime_serves_a_structured_run(
    tmp_path: Path,
) -> None:
    path = tmp_path / "crash.db"
    acked = await run_and_kill(path, "retrying")
    store, rt, model = await resume(path)
    try:
        agent = (await rt.agents.resume(resume_session_id="s", agent_options=OPTIONS)).agent
        assert len(agent.session.events) >= acked
        assert compact(agent.session) == [
            "ins(nt,weather?)", "T+1", "claim(nt,weather?)", "S+1.1", "sys", "user(weather?)",
            "hdr(initial)", "ctx", "msg", "call(c1)", "result(c1)", "S-1.1",
            f"ins(ns,{WRONG})", f"claim(ns,{WRONG})", "S+1.2", f"user({WRONG})",
            "S-1.2", "T-1:interrupted", "session/end-seed",
        ]  # fmt: skip
        interrupted = TurnResult.from_session(agent.session, 1, Weather)
        assert (interrupted.kind, interrupted.output) == ("interrupted", None)

        model.add(tool_call_response("c2", "final_result", {"city": "Oslo", "celsius": -3}))
        result = await within(agent.run("and Oslo?", output_type=Weather))
        assert (result.turn, result.output) == (2, Weather(city="Oslo", celsius=-3))
        # The resumed loop's first request offers the tool again (a "resume" header).
        assert [t.name for t in model.requests[0].tools] == ["final_result"]
        assert compact(agent.session, only=["hdr", "turn/output", "T-2"]) == [
            "hdr(initial)", "hdr(resume)", "turn/output", "T-2:completed",
        ]  # fmt: skip
        assert_well_formed(agent.session)
        final = list(agent.session.events)
        await rt.close()
        assert list(await store.load("s")) == final
    finally:
        await rt.close()
        await store.close()


async def test_crash_after_the_output_was_recorded_keeps_the_output(tmp_path: Path) -> None:
    """``turn/output`` was durable, ``turn/end`` never written: repair closes the turn
    ``interrupted`` and the output is still the turn's, read back in a fresh Runtime."""
    path = tmp_path / "crash.db"
    await run_and_kill(path, "recorded")
    store, rt, _model = await resume(path)
    try:
        agent = (await rt.agents.resume(resume_session_id="s", agent_options=OPTIONS)).agent
        assert compact(agent.session)[-6:] == [
            "call(c1)", "result(c1)", "S-1.1", "turn/output", "T-1:interrupted",
            "session/end-seed",
        ]  # fmt: skip
        result = TurnResult.from_session(agent.session, 1, Weather)
        assert result.kind == "interrupted"
        assert result.output == Weather(city="Paris", celsius=21.5)
        (output,) = events_of(agent.session, "turn/output")
        assert output.ignorable and output.data.output == {"city": "Paris", "celsius": 21.5}
        assert TurnResult.from_session(agent.session, 1).output == output.data.output
    finally:
        await rt.close()
        await store.close()
