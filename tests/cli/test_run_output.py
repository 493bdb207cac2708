"""``steerloop run --output-schema FILE.json`` as a subprocess: the validated JSON is the
last line of stdout; an invalid answer ends the turn ``error`` (exit 1) and prints none."""

from __future__ import annotations

import json
from pathlib import Path

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

SCHEMA = {
    "title": "Weather",
    "type": "object",
    "properties": {"city": {"type": "string"}, "celsius": {"type": "number"}},
    "required": ["city", "celsius"],
}


async def test_run_prints_the_validated_json(tmp_path: Path, server: SSEServer) -> None:
    schema = tmp_path / "weather.json"
    schema.write_text(json.dumps(SCHEMA))
    env = clean_env(tmp_path, server)
    server.add(
        sse_reply(tool_call_events("r1", "final_result", {"city": "Paris"})),
        sse_reply(tool_call_events("r2", "final_result", {"city": "Paris", "celsius": 21.5})),
    )
    code, out, err = await run_cli(
        "run", "weather in Paris?", "--output-schema", str(schema), "--store", "memory://",
        env=env, cwd=tmp_path,
    )  # fmt: skip
    assert code == 0, err
    assert json.loads(out.splitlines()[-1]) == {"city": "Paris", "celsius": 21.5}
    assert out.strip().count("\n") == 0  # stdout holds the JSON only; the turn is on stderr
    assert "turn 1 completed" in err
    tools = {t["function"]["name"]: t["function"] for t in server.requests[0].json()["tools"]}
    assert tools["final_result"]["parameters"] == SCHEMA  # beside the workspace tools
    retry = server.requests[1].json()["messages"][-1]
    assert retry["role"] == "user" and "'celsius' is a required property" in retry["content"]


async def test_run_without_a_valid_answer_exits_1(tmp_path: Path, server: SSEServer) -> None:
    schema = tmp_path / "weather.json"
    schema.write_text(json.dumps(SCHEMA))
    env = clean_env(tmp_path, server)
    server.add(text_reply("sunny"), text_reply("still sunny"))
    code, out, err = await run_cli(
        "run", "weather?", "--output-schema", str(schema), "--store", "memory://",
        env=env, cwd=tmp_path,
    )  # fmt: skip
    assert code == 1, err
    assert out == ""
    assert len(server.requests) == 2  # one retry (the default), then OUTPUT_INVALID


async def test_a_broken_schema_file_is_a_usage_error(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("{nope")
    code, _out, err = await run_cli(
        "run", "x", "--output-schema", str(bad), "--store", "memory://",
        env=clean_env(tmp_path), cwd=tmp_path,
    )  # fmt: skip
    assert code == 2 and "cannot read the output schema" in err
