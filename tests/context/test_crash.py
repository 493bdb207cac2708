"""A SIGKILL in the middle of a summary leaves a loadable log (a real child process on a
SQLite file)."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path

from steerloop import AgentOptions, Runtime, user_message
from steerloop.context import COMPACTION_PLUGIN, install_compaction
from steerloop.testing import ScriptedAdapter

from ..conftest import settle
from ..logcheck import assert_well_formed, derived_problems
from ._model import fetch_tool, make_model
from ._summary_crash_child import SESSION, digest

CHILD = Path(__file__).with_name("_summary_crash_child.py")
LINE_TIMEOUT = 30.0


async def test_kill_during_a_summary_leaves_a_loadable_log(tmp_path: Path) -> None:
    """C7.2-9: killed while the summary request streams, the stored log holds every event the
    child flushed, no ``context/compacted`` (the summary is not a session event), and the turn
    that was compacting is closed ``interrupted`` by repair; the resumed agent compacts at its
    next step and completes the turn with a provider-valid request."""
    path = tmp_path / "crash.db"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = await asyncio.create_subprocess_exec(
        sys.executable, str(CHILD), str(path),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=env,
    )  # fmt: skip
    assert proc.stdout is not None and proc.stderr is not None
    line = await asyncio.wait_for(proc.stdout.readline(), LINE_TIMEOUT)
    if not line.startswith(b"summarizing"):
        proc.kill()
        await proc.wait()
        raise AssertionError(line + await proc.stderr.read())
    _, acked, acked_digest = line.decode().split()
    proc.send_signal(signal.SIGKILL)
    await asyncio.wait_for(proc.wait(), LINE_TIMEOUT)
    assert proc.returncode == -signal.SIGKILL

    rt = await Runtime.open(store=f"sqlite:///{path}", persona="be brief")
    try:
        stored = await rt.sessions.persistence.load(SESSION)  # type: ignore[union-attr]
        assert len(stored) >= int(acked) and digest(stored[: int(acked)]) == acked_digest
        assert not [e for e in stored if e.type == "context/compacted"]
        # Killed at a pre-step boundary: the turn is open, no step is.
        types = [e.type for e in stored]
        last_turn = len(types) - types[::-1].index("turn/start")
        assert "turn/end" not in types[last_turn:]
        assert types.count("step/start") == types.count("step/end")
        rt.llm.register_adapter("mock", ScriptedAdapter([make_model("r")] * 10))
        rt.tools.register(fetch_tool())
        install_compaction(rt, max_context_tokens=1_500, keep_recent_tokens=700,
                           strategy="summarize")  # fmt: skip
        handle = await rt.agents.resume(
            resume_session_id=SESSION, agent_options=AgentOptions(provider="mock", model="m")
        )
        session = handle.agent.session
        repaired = [e.type for e in session.events[len(stored) :]]
        assert repaired == ["turn/end", "session/end-seed"]
        assert session.events[len(stored)].data.reason.kind == "interrupted"
        handle.agent.followup(user_message("after the crash"))
        await settle(handle.agent)
        assert session.events[-1].data.reason.kind == "completed"
        compacted = [e for e in session.events if e.type == "context/compacted"]
        assert len(compacted) == 1 and compacted[0].data.usage is not None
        derived = session.derive_messages()
        assert derived[1].source.plugin == COMPACTION_PLUGIN  # type: ignore[union-attr]
        assert derived_problems(derived) == []
        assert_well_formed(session)
    finally:
        await rt.close()
