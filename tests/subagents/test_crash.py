"""Both logs survive a real crash (SIGKILL of a subprocess on a SQLite file) while a
sub-agent runs, and both resume: the parent's open ``spawn_agent`` call is answered
``TOOL_OUTCOME_UNKNOWN`` and its turn closed ``interrupted``; the child's header still
links it to the parent; the child, resumed under its parent, closes its own open turn and
then serves a new one."""

from __future__ import annotations

from pathlib import Path

from steerloop import AgentOptions, Runtime, user_message
from steerloop.session._sqlite import SqliteStore
from steerloop.subagents import install_subagents
from steerloop.testing import ScriptedAdapter, text_response

from ..conftest import compact, within
from ..logcheck import assert_well_formed
from ..support import kill_after_first_line

SCRIPT = Path(__file__).with_name("_crash_child.py")
OPTIONS = AgentOptions(provider="mock", model="m")
CHILD = AgentOptions(provider="child", model="c")
LINE_TIMEOUT = 20.0


async def run_and_kill(path: Path) -> tuple[str, int, int]:
    word, child_id, parent_n, child_n = await kill_after_first_line(
        SCRIPT, str(path), timeout=LINE_TIMEOUT
    )
    assert word == "child-streaming"
    return child_id, int(parent_n), int(child_n)


async def test_parent_and_child_logs_survive_a_kill_and_resume(tmp_path: Path) -> None:
    path = tmp_path / "crash.db"
    child_id, parent_acked, child_acked = await run_and_kill(path)
    store = SqliteStore(path)
    try:
        parent_stored = await store.load("parent")
        child_stored = await store.load(child_id)
        assert len(parent_stored) >= parent_acked and len(child_stored) >= child_acked
        header = await store.load_header(child_id)
        assert header["parent_session"] == "parent" and header["delegation_depth"] == 1
        assert header["origin"] == {"kind": "tool", "tool": "spawn_agent", "call_id": "c1"}
        call = next(e for e in parent_stored if e.type == "tool/call")
        assert child_id == f"parent/sub-{call.seq}"

        async with await Runtime.open(store=store) as rt:  # closed before the store
            parent_model, child_model = ScriptedAdapter(), ScriptedAdapter()
            rt.llm.register_adapter(["mock"], parent_model)
            rt.llm.register_adapter(["child"], child_model)
            install_subagents(rt, agent_options=CHILD)
            parent = (
                await rt.agents.resume(resume_session_id="parent", agent_options=OPTIONS)
            ).agent
            child = (
                await rt.agents.resume(
                    resume_session_id=child_id, agent_options=CHILD, parent=parent
                )
            ).agent
            assert rt.agents.children(parent) == (child,)
            assert list(parent.session.events[: len(parent_stored)]) == list(parent_stored)
            assert list(child.session.events[: len(child_stored)]) == list(child_stored)
            assert compact(parent.session)[-5:] == [
                "call(c1)", "result(c1,TOOL_OUTCOME_UNKNOWN)", "S-2.1", "T-2:interrupted",
                "session/end-seed",
            ]  # fmt: skip
            assert compact(child.session) == [
                "ins(nt,long job)", "T+1", "claim(nt,long job)", "S+1.1", "sys", "user(long job)",
                "hdr(initial)", "ctx", "S-1.1", "T-1:interrupted", "session/end-seed",
            ]  # fmt: skip

            child_model.add(text_response("child resumed"))
            child.followup(user_message("go on"))
            await within(child.when_idle())
            parent_model.add(text_response("parent resumed"))
            parent.followup(user_message("go on"))
            await within(parent.when_idle())
            assert compact(parent.session)[-1] == "T-3:completed"
            assert compact(child.session)[-1] == "T-2:completed"
            assert_well_formed(parent.session)
            assert_well_formed(child.session)
            finals = {"parent": list(parent.session.events), child_id: list(child.session.events)}
        for session_id, events in finals.items():
            assert list(await store.load(session_id)) == events
    finally:
        await store.close()
