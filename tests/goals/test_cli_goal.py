"""``steerloop run --goal TEXT`` as a subprocess against a local OpenAI-compatible server."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.cli.helpers import (
    clean_env,
    run_cli,
    text_reply,
)
from tests.llm.openai_wire import (
    tool_call_events,
)
from tests.llm.sse_server import SSEServer, sse_reply

pytestmark = pytest.mark.timeout(120)


def goal_changes(out: str) -> list[tuple[str, dict[str, Any]]]:
    events = [json.loads(line) for line in out.splitlines() if line.strip()]
    return [(e["data"]["action"], e["data"]["goal"]) for e in events if e["type"] == "goal/change"]


async def test_run_goal_pursues_the_goal_until_the_model_completes_it(
    tmp_path: Path, server: SSEServer
) -> None:
    env = clean_env(tmp_path, server)
    server.add(
        text_reply("started on it"),
        sse_reply(tool_call_events("g1", "complete_goal", {"revision": 1, "evidence": "done"})),
        text_reply("the goal is complete"),
    )
    code, out, err = await run_cli(
        "run", "--goal", "write the summary", "--json", "--store", "memory://",
        env=env, cwd=tmp_path,
    )  # fmt: skip
    assert code == 0, err
    changes = goal_changes(out)
    assert [action for action, _ in changes] == ["create", "round", "round", "complete"]
    assert changes[-1][1]["evidence"] == "done" and changes[-1][1]["rounds_started"] == 2
    first = json.dumps(server.requests[0].json()["messages"])
    assert "goal round 1/10: write the summary" in first
    assert len(server.requests) == 3


async def test_run_without_prompt_or_goal_is_a_usage_error(tmp_path: Path) -> None:
    code, out, err = await run_cli("run", env=clean_env(tmp_path), cwd=tmp_path)
    assert code == 2
    assert "--goal" in out + err
