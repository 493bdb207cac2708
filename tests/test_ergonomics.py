"""Public API ergonomics (issue 12 item 8): ``async with Runtime.open()``, a provider name
as a string, ``Literal`` kinds, public ``__module__``s, runtime-owned classes."""

from __future__ import annotations

import pickle
import typing

import pytest

import steerloop
from steerloop import (
    Agent,
    AgentOptions,
    Inbox,
    PostExecute,
    Runtime,
    Session,
    ToolDecision,
    user_message,
)
from steerloop.testing import ScriptedAdapter, text_response

from .conftest import settle


async def test_open_is_an_async_context_manager_without_await() -> None:
    """``async with Runtime.open() as rt`` opens the runtime and closes it on exit."""
    async with Runtime.open() as rt:
        assert isinstance(rt, Runtime)
        rt.llm.register_adapter("mock", ScriptedAdapter([text_response("hi")]))
        handle = await rt.agents.create(
            session_id="s-1", agent_options=AgentOptions(provider="mock", model="m")
        )
        handle.agent.followup(user_message("hello"))
        await settle(handle.agent)
        assert [e.type for e in handle.agent.session.events][-1] == "turn/end"
    assert rt.agents.list() == ()  # closed: every agent disposed


async def test_open_is_still_awaitable_and_its_context_manager_too() -> None:
    rt = await Runtime.open()
    async with rt as same:
        assert same is rt
    async with await Runtime.open() as other:
        assert isinstance(other, Runtime)


async def test_open_validates_when_used() -> None:
    """Options are checked when the opening is awaited or entered (as before)."""
    with pytest.raises(ValueError):
        await Runtime.open(max_parallel_tool_calls=0)
    with pytest.raises(ValueError):
        async with Runtime.open(max_parallel_tool_calls=0):
            raise AssertionError("not entered")


async def test_register_adapter_takes_one_name_or_a_list(rt: Runtime) -> None:
    one = ScriptedAdapter([text_response("a")])
    many = ScriptedAdapter([text_response("b")])
    dispose = rt.llm.register_adapter("solo", one)
    rt.llm.register_adapter(["x", "y"], many)
    assert rt.llm.adapter_for("solo") is one
    assert rt.llm.adapter_for("x") is many and rt.llm.adapter_for("y") is many
    dispose()
    assert rt.llm.adapter_for("solo") is None
    for bad in ("", [], [""], 3):
        with pytest.raises(ValueError):
            rt.llm.register_adapter(bad, one)  # type: ignore[arg-type]


async def test_a_single_provider_name_drives_an_agent(rt: Runtime) -> None:
    rt.llm.register_adapter("mock", ScriptedAdapter([text_response("ok")]))
    handle = await rt.agents.create(
        session_id="s-1", agent_options=AgentOptions(provider="mock", model="m")
    )
    handle.agent.followup(user_message("u"))
    await settle(handle.agent)
    assert [e.type for e in handle.agent.session.events][-1] == "turn/end"


def test_decision_kinds_are_literals() -> None:
    hints = typing.get_type_hints(ToolDecision)
    assert typing.get_args(hints["kind"]) == ("allow", "deny", "ask")
    assert typing.get_args(typing.get_type_hints(PostExecute)["kind"]) == ("accept", "block")


def test_exported_names_live_in_steerloop() -> None:
    """Reprs and tracebacks name ``steerloop.X``; annotations and pickling still resolve."""
    for name in steerloop.__all__:
        obj = getattr(steerloop, name)
        if isinstance(obj, type) or (callable(obj) and hasattr(obj, "__code__")):
            assert obj.__module__ == "steerloop", name
            if isinstance(obj, type):
                typing.get_type_hints(obj)
    assert repr(ToolDecision.allow()).startswith("ToolDecision(")
    assert str(steerloop.Tool) == "<class 'steerloop.Tool'>"
    message = user_message("hi")
    assert pickle.loads(pickle.dumps(message)) == message


@pytest.mark.parametrize(
    ("cls", "hint"),
    [(Agent, "rt.agents.create"), (Session, "agent.session"), (Inbox, "agent.inbox")],
)
def test_runtime_owned_objects_are_not_constructible(cls: type, hint: str) -> None:
    with pytest.raises(TypeError, match="created by the runtime") as info:
        cls("s-1")
    assert hint in str(info.value)
