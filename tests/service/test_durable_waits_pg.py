"""A frontend tool's call survives the death of the PostgreSQL worker that owns its session
(issue 26, "another worker resumes the wait"): real worker processes, an API node in this
process, the owner SIGKILLed while the call waits for the client. The worker that takes the
session over takes the turn up (no repair, no takeover message: the call still waits), and
the client's result — sent to the API node as its next AG-UI run — is applied there and
completes that same call; the turn continues on the heir."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from .aguisupport import (
    PICK,
    agui_run,
    assert_client_result_run,
    client_result,
    run_input,
    user,
    wire,
)
from .livesupport import fresh_schema, poll
from .test_pg_failover import WAIT, check_log, cluster, turn_ends

pytestmark = pytest.mark.timeout(180)


@pytest.fixture
async def schema() -> AsyncIterator[str]:
    async for name in fresh_schema():
        yield name


async def test_a_client_call_waiting_on_a_killed_worker_is_completed_by_its_heir(
    tmp_path: Path, schema: str
) -> None:
    """SIGKILL of the owner while ``pick-p1`` waits: the other worker takes the lease (a
    greater token) and the turn up — the stored log goes on from ``tool/deferred`` with only
    ``session/end-seed`` (no repair result, no ``turn/end{interrupted}``, no takeover
    message) and the session is running there. The client's run with the result completes
    ``pick-p1`` on the heir: ``tool/result`` with its id citing its ``tool/call``, the next
    step, ``turn/end{completed}``, one turn in all; the heir's model got the result."""
    async with cluster(tmp_path, schema) as c:
        assert c.client is not None
        workers = [c.start_worker(), c.start_worker()]
        await c.registered(*workers)
        first = await agui_run(c.client, run_input("t1", "r1", user("u1", "pick p1"), tools=[PICK]))
        end = wire(first[-1])
        assert end["outcome"]["type"] == "interrupt", end
        assert [i["id"] for i in end["outcome"]["interrupts"]] == ["pick-p1"]
        owner = await poll(lambda: c.owner_pid("t1"), until=bool, timeout=WAIT)
        (victim,) = [w for w in workers if w.pid == owner]
        (heir,) = [w for w in workers if w is not victim]
        token, _, _ = await c.lease("t1")

        victim.kill()
        await poll(lambda: c.owner_pid("t1"), until=lambda pid: pid == heir.pid, timeout=WAIT)
        events = await c.wait_log("t1", lambda ev: ev[-1].type == "session/end-seed")
        kinds = [e.type for e in events]
        assert kinds[kinds.index("tool/call") :] == [
            "tool/call",
            "tool/deferred",
            "session/end-seed",
        ]
        new_token, _, live = await c.lease("t1")
        assert new_token > token and live
        described = (await c.client.get("/v1/sessions/t1")).json()
        assert described["status"] == "running"
        assert [p["call_id"] for p in described["pending_client_calls"]] == ["pick-p1"]

        done = await agui_run(c.client, client_result("t1", "r2", "pick p1", "pick-p1", "red"))
        assert_client_result_run(done, "pick-p1", "red")
        events = await c.wait_log("t1", lambda ev: turn_ends(ev) == ["completed"])
        kinds = [e.type for e in events]
        assert kinds[kinds.index("tool/deferred") :] == [
            "tool/deferred", "session/end-seed", "tool/result", "step/end", "step/start",
            "request/header", "assistant/message", "step/end", "turn/end",
        ]  # fmt: skip
        call = next(e for e in events if e.type == "tool/call")
        result = next(e for e in events if e.type == "tool/result")
        assert result.data.message.call_id == "pick-p1" and result.data.error is None
        assert result.source_event_seqs == (call.seq,)
        check_log("t1", events)
        asked = [r for r in c.requests(heir.pid) if r["session"] == "t1"]
        assert len(asked) == 1 and not c.requests(victim.pid)[1:]
        last = asked[0]["messages"][-1]
        assert (last["role"], last["call_id"]) == ("tool", "pick-p1")
        assert last["content"] == [{"type": "text", "text": "red"}]
        assert await c.owner_pid("t1") == heir.pid
