"""``define_tool``: pydantic and JSON-schema parameters, invalid definitions."""

from __future__ import annotations

import socket
from typing import Any

import pytest
from pydantic import BaseModel

from steerloop import Tool, define_tool, user_message
from steerloop.errors import SteerloopError, ToolDefinitionError
from steerloop.testing import text_response, tool_call_response, tool_calls_response
from steerloop.tools import ToolExec

from ..conftest import Harness, compact, events_of, label, settle


async def noop(args: Any, exec: ToolExec) -> str:
    return "ok"


class ReadArgs(BaseModel):
    path: str
    limit: int = 10


def test_pydantic_parameters_publish_the_model_schema() -> None:
    """define_tool with a pydantic model: the schema sent to the model is its JSON schema."""
    tool = define_tool(name="read_file", description="Read", parameters=ReadArgs, execute=noop)
    assert isinstance(tool, Tool)
    assert tool.name == "read_file"
    assert tool.description == "Read"
    assert dict(tool.parameters) == ReadArgs.model_json_schema()
    assert tool.concurrency_safe is False


def test_json_schema_parameters_are_kept() -> None:
    """define_tool with a JSON-schema dict keeps the schema as given."""
    schema = {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}
    tool = define_tool(name="search", description="Search", parameters=schema, execute=noop)
    assert dict(tool.parameters) == schema


async def test_pydantic_body_receives_a_model_instance(h: Harness) -> None:
    """A pydantic-defined tool's body gets the validated model, defaults applied."""
    received: list[Any] = []

    async def read(args: ReadArgs, exec: ToolExec) -> str:
        received.append(args)
        return f"read {args.path}"

    h.rt.tools.register(
        define_tool(name="read_file", description="Read", parameters=ReadArgs, execute=read)
    )
    agent = await h.agent(
        tool_call_response("c1", "read_file", {"path": "a.txt"}), text_response("ok")
    )
    agent.followup(user_message("u1"))
    await settle(agent)
    assert received == [ReadArgs(path="a.txt", limit=10)]
    assert label(events_of(agent.session, "tool/result")[0].data.message) == "read a.txt"
    schema = h.adapter.requests[0].tools[0]
    assert (schema.name, dict(schema.parameters)) == ("read_file", ReadArgs.model_json_schema())


async def test_json_schema_body_receives_the_parsed_dict(h: Harness) -> None:
    """A JSON-schema tool's body gets the parsed dict; a schema violation is INVALID_ARGS."""
    received: list[Any] = []

    async def search(args: dict[str, Any], exec: ToolExec) -> str:
        received.append(args)
        return "found"

    schema = {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}
    h.rt.tools.register(
        define_tool(name="search", description="Search", parameters=schema, execute=search)
    )
    agent = await h.agent(
        tool_calls_response([("c1", "search", {"q": "x"}), ("c2", "search", {"q": 3})]),
        text_response("ok"),
    )
    agent.followup(user_message("u1"))
    await settle(agent)
    assert received == [{"q": "x"}]
    assert compact(agent.session, only=("result(",)) == ["result(c1)", "result(c2,INVALID_ARGS)"]
    bad = events_of(agent.session, "tool/result")[1].data.message
    assert bad.is_error
    assert "invalid arguments" in label(bad)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"name": "has space"},
        {"name": ""},
        {"name": "x" * 65},
        {"name": 7},
        {"description": None},
        {"execute": "not callable"},
        {"parameters": {"type": 12}},
        {"parameters": {"type": "object", "properties": {"a": {"type": "nope"}}}},
        {"parameters": ["not", "a", "schema"]},
        {"parameters": int},
        {"timeout": 0},
        {"timeout": -1.5},
        {"timeout": "5"},
    ],
)
def test_invalid_definitions_raise(kwargs: dict[str, Any]) -> None:
    """An invalid name, description, body, schema or timeout raises ToolDefinitionError."""
    base: dict[str, Any] = {
        "name": "ok_name",
        "description": "d",
        "parameters": {"type": "object"},
        "execute": noop,
    }
    with pytest.raises(ToolDefinitionError):
        define_tool(**{**base, **kwargs})


def test_tool_definition_error_is_a_steerloop_error() -> None:
    """ToolDefinitionError belongs to the SteerloopError family."""
    assert issubclass(ToolDefinitionError, SteerloopError)


def test_valid_edge_names_and_timeout() -> None:
    """Names of letters, digits, '_' and '-' up to 64 characters and a positive timeout work."""
    tool = define_tool(
        name="a-b_C9" + "x" * 58, description="", parameters={}, execute=noop, timeout=0.5
    )
    assert len(tool.name) == 64
    assert tool.timeout == 0.5


def test_register_requires_a_defined_tool(h: Harness) -> None:
    """rt.tools.register takes a Tool from define_tool; the latest registration wins."""
    with pytest.raises(ValueError):
        h.rt.tools.register({"name": "x"})  # type: ignore[arg-type]
    first = define_tool(name="t", description="one", parameters={}, execute=noop)
    second = define_tool(name="t", description="two", parameters={}, execute=noop)
    h.rt.tools.register(first)
    dispose = h.rt.tools.register(second)
    assert h.rt.tools.get("t") is second
    assert [t.description for t in h.rt.tools.list()] == ["two"]
    dispose()
    dispose()
    assert h.rt.tools.get("t") is first


def test_bool_timeout_is_refused() -> None:
    """``timeout=True`` is not a number of seconds: ``ToolDefinitionError``."""
    with pytest.raises(ToolDefinitionError):
        define_tool(
            name="t",
            description="",
            parameters={"type": "object"},
            execute=lambda a, e: "x",
            timeout=True,
        )


async def test_sync_body_runs_and_its_value_is_the_result(h: Harness) -> None:
    """A synchronous ``execute`` is called and its return value becomes the result."""
    h.rt.tools.register(
        define_tool(
            name="sync",
            description="",
            parameters={"type": "object"},
            execute=lambda args, exec: f"sync {exec.call_id}",
        )
    )
    agent = await h.agent(tool_call_response("c1", "sync", {}), text_response("ok"))
    agent.followup(user_message("go"))
    await settle(agent)
    (result,) = events_of(agent.session, "tool/result")
    assert result.data.error is None
    assert label(result.data.message) == "sync c1"


@pytest.mark.parametrize("depth", [300, 1_025, 200_000])
async def test_deeply_nested_arguments_are_invalid_args(h: Harness, depth: int) -> None:
    """Issue 11 item 6: arguments nested past the bound (>1,024 deep raised RecursionError
    out of the scheduler before) answer INVALID_ARGS; the body never runs, the turn goes on."""
    ran: list[Any] = []

    async def take(args: dict[str, Any], exec: ToolExec) -> str:
        ran.append(args)
        return "ran"

    schema = {"type": "object"}
    h.rt.tools.register(define_tool(name="take", description="d", parameters=schema, execute=take))
    raw = '{"a": ' + "[" * depth + "]" * depth + "}"
    agent = await h.agent(tool_call_response("c1", "take", raw), text_response("done"))
    agent.followup(user_message("u1"))
    await settle(agent)
    assert ran == []
    assert compact(agent.session, only=("result(", "T-")) == [
        "result(c1,INVALID_ARGS)",
        "T-1:completed",
    ]
    bad = events_of(agent.session, "tool/result")[0].data.message
    assert "nested deeper than" in label(bad)


async def test_arguments_nested_within_the_bound_still_run(h: Harness) -> None:
    """Nesting at the bound (``MAX_ARGUMENT_DEPTH``) is accepted."""
    from steerloop.tools._runtime import MAX_ARGUMENT_DEPTH

    ran: list[Any] = []

    async def take(args: dict[str, Any], exec: ToolExec) -> str:
        ran.append(args)
        return "ran"

    h.rt.tools.register(
        define_tool(name="take", description="d", parameters={"type": "object"}, execute=take)
    )
    inner = MAX_ARGUMENT_DEPTH - 1
    raw = '{"a": ' + "[" * inner + "]" * inner + "}"
    agent = await h.agent(tool_call_response("c1", "take", raw), text_response("done"))
    agent.followup(user_message("u1"))
    await settle(agent)
    assert len(ran) == 1
    assert compact(agent.session, only=("result(",)) == ["result(c1)"]


async def test_a_network_ref_in_a_schema_is_never_fetched(h: Harness) -> None:
    """SEP-2106: a ``$ref`` to a network URI (a schema from an MCP server may carry one) is
    never retrieved while arguments are validated: a call that reaches it is INVALID_ARGS and
    nothing connects to the URI; same-document references still resolve."""
    ran: list[Any] = []

    async def lookup(args: dict[str, Any], exec: ToolExec) -> str:
        ran.append(args)
        return "found"

    with socket.create_server(("127.0.0.1", 0)) as canary:
        canary.setblocking(False)
        port = canary.getsockname()[1]
        schema = {
            "type": "object",
            "$defs": {"id": {"type": "string", "pattern": "^[a-z0-9-]+$"}},
            "properties": {
                "id": {"$ref": "#/$defs/id"},
                "profile": {"$ref": f"http://127.0.0.1:{port}/profile.json"},
            },
            "required": ["id"],
        }
        h.rt.tools.register(
            define_tool(name="lookup", description="d", parameters=schema, execute=lookup)
        )
        agent = await h.agent(
            tool_calls_response(
                [
                    ("c1", "lookup", {"id": "ada"}),
                    ("c2", "lookup", {"id": "Ada!"}),
                    ("c3", "lookup", {"id": "ada", "profile": {"name": "Ada"}}),
                ]
            ),
            text_response("done"),
        )
        agent.followup(user_message("u1"))
        await settle(agent)
        with pytest.raises(BlockingIOError):
            canary.accept()
    assert ran == [{"id": "ada"}]
    assert compact(agent.session, only=("result(",)) == [
        "result(c1)",
        "result(c2,INVALID_ARGS)",
        "result(c3,INVALID_ARGS)",
    ]
    unresolved = events_of(agent.session, "tool/result")[2].data.message
    assert f"http://127.0.0.1:{port}/profile.json" in label(unresolved)
