"""The 2026-07-28 protocol as steerloop's client speaks it (stateless: ``server/discover``,
then ``_meta`` and ``MCP-Protocol-Version`` on every request), against the conformance
suite's own servers, which check what they receive."""

from __future__ import annotations

from pathlib import Path

import pytest

from steerloop import user_message
from steerloop.mcp import MCPServer, install_mcp
from steerloop.testing import text_response, tool_calls_response

from ..conftest import Harness, compact, events_of, label, settle
from .conformance import check_statuses, scenario_server

pytestmark = pytest.mark.timeout(180)


async def test_a_result_without_result_type_is_complete(h: Harness, tmp_path: Path) -> None:
    """SEP-2322: a client MUST assume ``resultType: complete`` where a result names none (the
    SDK's 2026-07-28 models would refuse the result); such a call is not retried, and an
    unrelated call carries no input responses or request state."""
    async with scenario_server("sep-2322-client-request-state", tmp_path) as url:
        installed = await install_mcp(h.rt, [MCPServer.http("m", url=url)])
        agent = await h.agent(
            tool_calls_response(
                [("c1", "m__test_mrtr_no_result_type", {}), ("c2", "m__test_mrtr_unrelated", {})]
            ),
            text_response("done"),
        )
        agent.followup(user_message("go"))
        await settle(agent)
        await installed.close()
    assert compact(agent.session, only=("result(",)) == ["result(c1)", "result(c2)"]
    results = [label(e.data.message) for e in events_of(agent.session, "tool/result")]
    assert results == ["no-result-type-test-ok", "unrelated-ok"]
    statuses = check_statuses(tmp_path)
    assert statuses["sep-2322-default-result-type-complete"] == {"SUCCESS"}
    assert statuses["sep-2322-client-parallel-isolation"] == {"SUCCESS"}
