"""The shared state document: ``agent.state`` folds ``state/changed``; ``agent.update_state``
writes one durable RFC 6902 patch and returns its seq; a patch that fails writes nothing."""

from __future__ import annotations

from typing import Any

import pytest

from steerloop import AgentOptions, define_tool, user_message
from steerloop.session._codec import event_from_json, validate_log
from steerloop.session.events import StateChanged
from steerloop.testing import text_response, tool_call_response
from steerloop.tools import ToolExec

from ..conftest import Harness, compact, events_of, settle

OPTIONS = AgentOptions(provider="mock", model="m")


async def test_update_state_writes_one_event_and_folds(hs: Harness) -> None:
    handle = await hs.rt.agents.create(session_id="s-1", agent_options=OPTIONS)
    agent = handle.agent
    assert dict(agent.state) == {}
    before = agent.session.next_seq
    seq = agent.update_state([{"op": "add", "path": "/todo", "value": ["a"]}])
    assert seq == before and agent.session.events[-1].seq == seq
    assert agent.session.events[-1].data == StateChanged(
        patch=({"op": "add", "path": "/todo", "value": ["a"]},)
    )
    agent.update_state(
        [
            {"op": "add", "path": "/todo/-", "value": "b"},
            {"op": "replace", "path": "/todo/0", "value": "A"},
        ]
    )
    assert dict(agent.state) == {"todo": ["A", "b"]}
    # the JSON form round-trips and a resumed session folds the same document
    for event in events_of(agent.session, "state/changed"):
        assert event_from_json(event.to_json()) == event
    validate_log(agent.session.events)
    await handle.dispose()
    resumed = await hs.rt.agents.resume(resume_session_id=agent.id, agent_options=OPTIONS)
    assert dict(resumed.agent.state) == {"todo": ["A", "b"]}


@pytest.mark.parametrize(
    "patch",
    [
        {"op": "add", "path": "/a", "value": 1},  # not a list
        [{"op": "frobnicate", "path": "/a"}],
        [{"op": "add", "path": "/a"}],  # no value
        [{"op": "add", "path": "/a", "value": 1, "extra": True}],
        [{"op": "remove", "path": "/missing"}],  # does not apply
        [{"op": "add", "path": "/a", "value": 1}, {"op": "test", "path": "/a", "value": 2}],
        [{"op": "replace", "path": "", "value": [1]}],  # the root must stay an object
        [{"op": "add", "path": "a", "value": 1}],  # not a pointer
        [{"op": "add", "path": "/a", "value": {1, 2}}],  # not JSON
    ],
)
async def test_a_bad_patch_writes_nothing(h: Harness, patch: Any) -> None:
    agent = await h.agent()
    agent.update_state([{"op": "add", "path": "/keep", "value": True}])
    before = len(agent.session.events)
    with pytest.raises(ValueError):
        agent.update_state(patch)
    assert len(agent.session.events) == before
    assert dict(agent.state) == {"keep": True}


async def test_state_is_a_read_only_copy(h: Harness) -> None:
    agent = await h.agent()
    agent.update_state([{"op": "add", "path": "/items", "value": [1]}])
    view: Any = agent.state
    with pytest.raises(TypeError):
        view["items"] = []
    view["items"].append(2)  # a copy: the document is unchanged
    assert dict(agent.state) == {"items": [1]}


async def test_tools_read_and_write_the_state(h: Harness) -> None:
    seen: list[Any] = []

    async def note(args: dict[str, Any], exec: ToolExec) -> str:
        seen.append(dict(exec.agent.state))
        exec.agent.update_state([{"op": "add", "path": "/notes/-", "value": args["text"]}])
        return "noted"

    h.rt.tools.register(
        define_tool(
            name="note",
            description="note",
            parameters={"type": "object", "properties": {"text": {"type": "string"}}},
            execute=note,
        )
    )
    agent = await h.agent(tool_call_response("c1", "note", {"text": "hi"}), text_response("ok"))
    agent.update_state([{"op": "add", "path": "/notes", "value": []}])
    agent.followup(user_message("u1"))
    await settle(agent)
    assert seen == [{"notes": []}]
    assert dict(agent.state) == {"notes": ["hi"]}
    assert compact(agent.session, only=("call(", "state/", "result(")) == [
        "state/changed", "call(c1)", "state/changed", "result(c1)",
    ]  # fmt: skip
