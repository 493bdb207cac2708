"""The 2026-07-28 protocol as steerloop's client speaks it (stateless: ``server/discover``,
then ``_meta`` and ``MCP-Protocol-Version`` on every request), against the conformance
suite's own servers, which check what they receive."""

from __future__ import annotations

from pathlib import Path

import pytest

from steerloop import user_message
from steerloop.mcp import MCPServer, install_mcp
from steerloop.mcp._limits import ERROR_CHARS, ERROR_DATA_BYTES, bound_error
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


async def test_an_unsupported_version_is_retried_at_one_the_server_names(
    h: Harness, tmp_path: Path
) -> None:
    """The server refuses the first request with -32022 naming the versions it speaks: the
    client retries ``server/discover`` at one of them (the error's ``data`` survives the
    bounds) and every request carries the version header and ``_meta``; it never falls
    back to the ``initialize`` handshake."""
    async with scenario_server("request-metadata", tmp_path) as url:
        installed = await install_mcp(h.rt, [MCPServer.http("v", url=url)])
        assert installed.tools("v") == ()
        await installed.close()
    statuses = check_statuses(tmp_path)
    for check in (
        "sep-2575-client-retry-supported-version",
        "sep-2575-http-client-sends-version-header",
        "sep-2575-client-populates-meta",
        "sep-2575-http-version-header-matches-meta",
    ):
        assert statuses[check] == {"SUCCESS"}, check


def test_an_error_keeps_its_data_only_when_it_is_small() -> None:
    """Small ``data`` (a -32022's supported versions) is kept; large data is dropped and a
    long message cut."""
    small = {"code": -32022, "message": "no", "data": {"supported": ["2026-07-28"]}}
    assert bound_error(small) == small
    large = {"code": -32000, "message": "x" * (ERROR_CHARS + 10), "data": ["y" * ERROR_DATA_BYTES]}
    bounded = bound_error(large)
    assert "data" not in bounded
    assert bounded["message"].startswith("x" * ERROR_CHARS + " [… 10 chars cut]")
