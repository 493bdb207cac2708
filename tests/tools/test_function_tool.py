"""``@tool``: a tool from a plain function (issue 12 item 8; API.md "Tools from plain
functions")."""

from __future__ import annotations

import threading
from typing import Any, Literal

import pydantic
import pytest

from steerloop import Tool, ToolExec, tool, user_message
from steerloop.errors import ToolDefinitionError
from steerloop.testing import text_response, tool_call_response, tool_calls_response

from ..conftest import Harness, compact, events_of, label, settle


@tool
async def read_file(path: str, limit: int = 200, *, exec: ToolExec) -> str:
    """Read a UTF-8 file.

    Args:
        path: Path relative to the workspace root.
        limit: Most lines
            to return.
    """
    return f"{path}:{limit}:{exec.call_id}"


def test_schema_and_descriptions_come_from_hints_and_a_google_docstring() -> None:
    assert isinstance(read_file, Tool)
    assert read_file.name == "read_file"
    assert read_file.description == "Read a UTF-8 file."
    schema = dict(read_file.parameters)
    assert schema["properties"] == {
        "path": {
            "description": "Path relative to the workspace root.",
            "title": "Path",
            "type": "string",
        },
        "limit": {
            "default": 200,
            "description": "Most lines\nto return.",
            "title": "Limit",
            "type": "integer",
        },
    }
    assert schema["required"] == ["path"]
    assert schema["additionalProperties"] is False  # the ToolExec parameter is not in it
    assert read_file.concurrency_safe is False
    assert read_file.timeout is None


def test_numpy_docstring_and_options() -> None:
    @tool(name="find", description="Find things.", concurrency_safe=True, timeout=5)
    def search(query: str, mode: Literal["exact", "fuzzy"] = "exact") -> list[str]:
        """Search.

        Parameters
        ----------
        query : str
            What to look for.
        mode : str
            How to match.
        """
        return [query]

    assert search.name == "find"
    assert search.description == "Find things."
    assert search.concurrency_safe is True
    assert search.timeout == 5
    props = dict(search.parameters)["properties"]
    assert props["query"]["description"] == "What to look for."
    assert props["mode"]["enum"] == ["exact", "fuzzy"]
    assert props["mode"]["description"] == "How to match."


def test_arguments_are_validated_by_pydantic() -> None:
    assert read_file.validate({"path": "a", "limit": "3"}).limit == 3  # type: ignore[attr-defined]
    for bad in ({}, {"path": "a", "limit": "many"}, {"path": "a", "other": 1}):
        with pytest.raises(pydantic.ValidationError):
            read_file.validate(bad)


@pytest.mark.parametrize(
    "fn",
    [
        lambda *args: None,
        lambda **kwargs: None,
        lambda x, /: None,
    ],
    ids=["var-positional", "var-keyword", "positional-only"],
)
def test_undescribable_functions_are_refused(fn: Any) -> None:
    with pytest.raises(ToolDefinitionError):
        tool(name="f")(fn)


def test_two_tool_exec_parameters_are_refused() -> None:
    def twice(a: ToolExec, b: ToolExec) -> str:
        return ""

    with pytest.raises(ToolDefinitionError, match="more than one ToolExec"):
        tool(twice)


async def test_a_function_tool_runs_in_the_loop(h: Harness) -> None:
    """The model's call reaches the function with validated keyword arguments and the call
    context; a sync function runs in a worker thread; a bad argument is INVALID_ARGS."""
    threads: list[str] = []

    @tool
    def add(a: int, b: int = 1) -> dict[str, int]:
        """Add two numbers."""
        threads.append(threading.current_thread().name)
        return {"sum": a + b}

    h.rt.tools.register(read_file)
    h.rt.tools.register(add)
    agent = await h.agent(
        tool_calls_response(
            [
                ("c1", "read_file", {"path": "x.txt"}),
                ("c2", "add", {"a": 2, "b": 3}),
                ("c3", "add", {"a": "two"}),
            ]
        ),
        text_response("done"),
    )
    agent.followup(user_message("u1"))
    await settle(agent)
    results = [e.data.message for e in events_of(agent.session, "tool/result")]
    assert [label(m) for m in results[:2]] == ["x.txt:200:c1", '{"sum": 5}']
    assert compact(agent.session, only=("result(",)) == [
        "result(c1)",
        "result(c2)",
        "result(c3,INVALID_ARGS)",
    ]
    assert threads and threads[0] != threading.main_thread().name
    request_tools = {t.name: t for t in h.adapter.requests[0].tools}
    assert request_tools["add"].description == "Add two numbers."
    assert set(request_tools["add"].parameters["properties"]) == {"a", "b"}


async def test_single_call(h: Harness) -> None:
    h.rt.tools.register(read_file)
    agent = await h.agent(
        tool_call_response("c9", "read_file", {"path": "p", "limit": 2}), text_response("ok")
    )
    agent.followup(user_message("go"))
    await settle(agent)
    assert label(events_of(agent.session, "tool/result")[0].data.message) == "p:2:c9"
