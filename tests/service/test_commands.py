"""The command union (``service/_commands.py``): a stored row read back as a command, an
unknown kind or a body no API writes refused with the reason, and one ``apply`` for both
hosts."""

from __future__ import annotations

import pytest

from steerloop.service._api import ApiError
from steerloop.service._commands import (
    Answer,
    Cancel,
    ClientResult,
    ClientTools,
    CommandError,
    Decide,
    Followup,
    Inject,
    SetState,
    Steer,
    agui_command,
    parse_command,
)


def test_every_kind_reads_back_from_its_row() -> None:
    """What the API node stores (kind, message id column, body) is the command applied."""
    assert parse_command("followup", "m1", {"content": "hi", "request": "x"}) == Followup(
        content="hi", message_id="m1"
    )
    assert parse_command("steer", None, {"content": "s"}) == Steer(content="s")
    trace = {"traceparent": "00-" + "1" * 32 + "-" + "2" * 16 + "-01"}
    assert parse_command("inject", "m2", {"content": "i", "trace": trace}) == Inject(
        content="i", message_id="m2", trace=trace
    )
    assert parse_command("cancel", None, {"keep_inbox": True}) == Cancel(keep_inbox=True)
    decided = parse_command("approval", None, {"call_id": "c", "decision": "deny", "reason": None})
    assert decided == Decide(call_id="c", decision="deny", reason=None, by="http")
    tools = {"tools": [{"name": "t", "description": "d", "parameters": {"type": "object"}}]}
    offered = parse_command("client_tools", None, tools)
    assert isinstance(offered, ClientTools) and offered.tools[0].name == "t"
    result = parse_command("client_result", None, {"call_id": "c", "content": "r"})
    assert result == ClientResult(call_id="c", content="r", is_error=False)
    assert parse_command("state", None, {"state": {"a": 1}}) == SetState(state={"a": 1})
    answer = {"id": "i1", "action": "accept", "content": {"ok": True}}
    assert parse_command("input", None, answer) == Answer(
        id="i1", action="accept", content={"ok": True}, by="http"
    )


@pytest.mark.parametrize(
    ("kind", "message_id", "body", "error"),
    [
        ("dispose", None, {}, "unknown command kind 'dispose'"),
        ("frobnicate", "m", {"content": "x"}, "unknown command kind 'frobnicate'"),
        ("followup", "m", "just a string", "followup body is not an object"),
        ("steer", "m", {"content": 42}, "steer content: Input should be a valid string"),
        ("approval", None, {"call_id": "c", "decision": "maybe"}, "approval decision: "),
        ("client_tools", None, {"tools": 3}, "client_tools tools: "),
        ("state", None, {"state": [1]}, "state state: "),
        ("input", None, {"id": "i1", "action": "shrug"}, "input action: "),
    ],
)
def test_a_row_that_is_no_command_is_refused_with_its_reason(
    kind: str, message_id: str | None, body: object, error: str
) -> None:
    """Never a silent no-op: the worker records this message on the row."""
    with pytest.raises(CommandError) as raised:
        parse_command(kind, message_id, body)
    assert str(raised.value).startswith(error)


def test_an_agui_body_that_does_not_fit_is_a_422() -> None:
    """Checked where the request arrives (both hosts), before anything is queued."""
    with pytest.raises(ApiError) as raised:
        agui_command("client_result", {"call_id": "c"})
    assert (raised.value.status, raised.value.code) == (422, "invalid_command")
    assert raised.value.message.startswith("client_result content: Field required")


def test_commands_are_frozen() -> None:
    command = Followup(content="x")
    with pytest.raises(ValueError, match="frozen"):
        command.content = "y"


def test_stored_content_parts_read_back_as_blocks() -> None:
    """A message with images or files is stored as its blocks' JSON (bytes by hash); the
    worker reads them back as blocks, and a part that is no block is a ``CommandError``."""
    from steerloop.messages import TextBlock

    parts = [{"type": "text", "text": "look"}]
    command = parse_command("followup", "m1", {"content": parts})
    assert command == Followup(content=(TextBlock("look"),), message_id="m1")
    for bad, error in [
        (["x"], "followup content: a stored content part is not an object"),
        ([{"type": "smell"}], "followup content: unknown block type 'smell'"),
    ]:
        with pytest.raises(CommandError) as raised:
            parse_command("followup", "m1", {"content": bad})
        assert str(raised.value) == error
    with pytest.raises(ValueError, match="content parts must be content blocks"):
        Followup(content=("not a block",))
