"""A pending approval whose process dies (SIGKILL of a real child on a SQLite file) is
repaired to ``TOOL_NOT_STARTED`` on resume (EVENTS.md §2.4a, C7.2-9, C7.10-8)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
from pathlib import Path

from steerloop import AgentOptions, Runtime, user_message
from steerloop.messages import ToolResultMessage
from steerloop.session import pending_approvals
from steerloop.session.events import ApprovalRequested
from steerloop.testing import ScriptedAdapter, text_response

from ..conftest import compact, label, within
from ..logcheck import assert_well_formed

CHILD = Path(__file__).with_name("_approval_crash_child.py")
LINE_TIMEOUT = 30.0


async def kill_while_pending(path: Path) -> int:
    """Run the child until its approval is durable, SIGKILL it; the events it acked."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = await asyncio.create_subprocess_exec(
        sys.executable, str(CHILD), str(path),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=env,
    )  # fmt: skip
    try:
        assert proc.stdout is not None and proc.stderr is not None
        line = await asyncio.wait_for(proc.stdout.readline(), LINE_TIMEOUT)
        if not line.startswith(b"pending "):
            proc.kill()
            raise AssertionError(line + await proc.stderr.read())
        proc.send_signal(signal.SIGKILL)
        await asyncio.wait_for(proc.wait(), LINE_TIMEOUT)
        assert proc.returncode == -signal.SIGKILL
        assert await proc.stdout.read() == b""  # the body never ran
        return int(line.split()[1])
    finally:
        if proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await proc.wait()


async def test_a_pending_approval_killed_with_its_process_is_repaired_not_started(
    tmp_path: Path,
) -> None:
    """The stored log ends ``call(c1) · ask(c1)`` and lists c1 as pending; resume appends
    exactly ``result(c1, TOOL_NOT_STARTED)`` (citing the tool/call) · ``S-1.1`` ·
    ``T-1:interrupted`` · ``session/end-seed``; nothing is pending after it, and the next
    turn's request carries the not-started result."""
    path = tmp_path / "crash.db"
    acked = await kill_while_pending(path)
    rt = await Runtime.open(store=f"sqlite:///{path}")
    try:
        store = rt.sessions.persistence
        assert store is not None
        stored = await store.load("s")
        assert len(stored) == acked
        assert [e.type for e in stored[-2:]] == ["tool/call", "tool/approval-requested"]
        assert pending_approvals(stored) == (
            ApprovalRequested(
                turn=1,
                step=1,
                call_id="c1",
                name="write",
                arguments="{}",
                reason="'write' may change the workspace",
            ),
        )
        model = ScriptedAdapter([text_response("ok")])
        rt.llm.register_adapter(["mock"], model)
        handle = await rt.agents.resume(
            resume_session_id="s", agent_options=AgentOptions(provider="mock", model="m")
        )
        agent = handle.agent
        session = agent.session
        repaired = session.events[acked:]
        assert [(e.type, e.source_event_seqs) for e in repaired] == [
            ("tool/result", (acked - 1,)),  # cites the tool/call
            ("step/end", None),
            ("turn/end", None),
            ("session/end-seed", None),
        ]
        result = repaired[0].data
        assert (result.message.call_id, result.error.code, result.message.is_error) == (
            "c1", "TOOL_NOT_STARTED", True,
        )  # fmt: skip
        assert repaired[2].data.reason.kind == "interrupted"
        assert compact(session)[-7:] == [
            "msg", "call(c1)", "ask(c1)", "result(c1,TOOL_NOT_STARTED)", "S-1.1",
            "T-1:interrupted", "session/end-seed",
        ]  # fmt: skip
        assert agent.pending_approvals == ()
        assert pending_approvals(session.events) == ()
        agent.followup(user_message("again"))
        await within(agent.when_idle())
        sent = model.requests[0].messages
        not_started = [m for m in sent if isinstance(m, ToolResultMessage)]
        assert [m.call_id for m in not_started] == ["c1"]
        assert "never started" in label(not_started[0])
        assert_well_formed(session)
    finally:
        await rt.close()
