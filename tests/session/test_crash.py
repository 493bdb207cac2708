"""Crash tests that really kill (G-1, G-2, C7.2-9): a child process runs a scripted agent on
a SQLite file (``_crash_child.py``) and gets SIGKILL; this process then loads and resumes.

After every kill: the stored log decodes and validates (no torn event, no gap), starts with
every event the child acknowledged (same digest), resume repair closes what was in flight,
the kernel's lease died with the child (no conflict), and the next turn completes.
"""

from __future__ import annotations

import asyncio
import random
import signal
import sys
from pathlib import Path
from typing import Any

from steerloop import AgentOptions, Runtime, user_message
from steerloop.session._repair import plan_repair
from steerloop.session._sqlite import SqliteStore
from steerloop.testing import text_response

from ..conftest import Harness, compact, settle
from ..logcheck import assert_well_formed
from ._crash_child import SESSION, digest

CHILD = Path(__file__).with_name("_crash_child.py")
OPTIONS = AgentOptions(provider="mock", model="m")
LINE_TIMEOUT = 20.0


class Child:
    """The child process and the reports it printed (``word n seq digest``)."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc
        self.reports: list[tuple[str, int, int, str]] = []

    @classmethod
    async def start(cls, mode: str, path: Path) -> Child:
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            str(CHILD),
            mode,
            str(path),
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        return cls(proc)

    async def until(self, word: str, n: int = 0) -> None:
        """Read reports until ``word n`` arrived."""
        assert self.proc.stdout is not None
        while True:
            line = await asyncio.wait_for(self.proc.stdout.readline(), LINE_TIMEOUT)
            if not line:
                await self.proc.wait()
                assert self.proc.stderr is not None
                error = (await self.proc.stderr.read()).decode()
                raise AssertionError(f"the child exited ({self.proc.returncode}):\n{error}")
            self.read(line)
            if self.reports[-1][:2] == (word, n):
                return

    def read(self, line: bytes) -> None:
        word, n, seq, hexdigest = line.decode().split()
        self.reports.append((word, int(n), int(seq), hexdigest))

    async def kill(self) -> None:
        """SIGKILL, then collect what the child printed before it died."""
        self.proc.send_signal(signal.SIGKILL)
        assert self.proc.stdout is not None
        rest = await asyncio.wait_for(self.proc.stdout.read(), LINE_TIMEOUT)
        await self.proc.wait()
        assert self.proc.returncode == -signal.SIGKILL
        for line in rest.splitlines():
            self.read(line)


async def recover(path: Path, child: Child) -> Any:
    """Load and resume the killed child's session; check G-1 and the repair. Returns the
    resumed agent's session after one more completed turn."""
    store = SqliteStore(path)
    try:
        stored = list(await store.load(SESSION))  # decode + validate: no torn event, no gap
        _, _, acked, acked_digest = child.reports[-1]
        assert len(stored) >= acked, f"lost acknowledged events: {len(stored)} < {acked}"
        assert digest(stored[:acked]) == acked_digest
        expected = [fix.type for fix in plan_repair(stored)] + ["session/end-seed"]
        async with await Runtime.open(store=store) as rt:  # closed before the store
            h = Harness(rt)
            h.adapter.add(text_response("after the crash"))
            handle = await rt.agents.resume(resume_session_id=SESSION, agent_options=OPTIONS)
            session = handle.agent.session
            assert list(session.events[: len(stored)]) == stored
            assert [e.type for e in session.events[len(stored) :]] == expected
            if expected[0] != "session/end-seed":
                assert session.events[-2].data.reason.kind == "interrupted"
            handle.agent.followup(user_message("go on"))
            await settle(handle.agent)
            assert session.events[-1].type == "turn/end"
            assert session.events[-1].data.reason.kind == "completed"
            assert_well_formed(session)
            final = list(session.events)
        assert list(await store.load(SESSION)) == final
        return session
    finally:
        await store.close()


async def test_kill_while_a_tool_runs(tmp_path: Path) -> None:
    """G-1, C7.2-9, C7.10-8: killed while the body of c1 runs, c1 (with a recorded
    ``tool/call``) is answered TOOL_OUTCOME_UNKNOWN, c2 TOOL_NOT_STARTED, then the step and
    the turn are closed (``interrupted``); the next turn completes."""
    path = tmp_path / "crash.db"
    child = await Child.start("tool", path)
    await child.until("tool-running")
    await child.kill()
    session = await recover(path, child)
    log = compact(session)
    start = log.index("call(c1)")
    assert log[start : start + 6] == [
        "call(c1)", "result(c1,TOOL_OUTCOME_UNKNOWN)", "result(c2,TOOL_NOT_STARTED)",
        "S-2.1", "T-2:interrupted", "session/end-seed",
    ]  # fmt: skip


async def test_kill_mid_stream(tmp_path: Path) -> None:
    """G-1, C7.2-9: killed while the model stream hangs after a few chunks, the stored log
    ends inside the step (no assistant output); repair closes the step and the turn."""
    path = tmp_path / "crash.db"
    child = await Child.start("stream", path)
    await child.until("streaming")
    await child.kill()
    session = await recover(path, child)
    log = compact(session)
    start = log.index("T+2")
    tail = log[start:]
    assert "msg" not in tail[: tail.index("T-2:interrupted")]
    assert tail[tail.index("T-2:interrupted") - 1] == "S-2.1"
    assert tail[tail.index("T-2:interrupted") + 1] == "session/end-seed"


async def test_kill_at_random_points_after_acknowledged_turns(tmp_path: Path) -> None:
    """G-1, G-2: killed at seeded random moments after N acknowledged turns, the store
    always holds every acknowledged event (same digest) as a valid prefix, the dead
    child's lease is gone, repair closes whatever was in flight, and work goes on."""
    rng = random.Random(20240611)
    for round in range(12):
        path = tmp_path / f"crash-{round}.db"
        child = await Child.start("turns", path)
        await child.until("flushed", rng.randint(1, 6))
        await asyncio.sleep(rng.uniform(0, 0.03))  # only picks the kill point, never asserted
        await child.kill()
        await recover(path, child)  # a resume: the dead child's lease died with it
