"""Messages, blocks, their JSON form; CancelCause."""

from __future__ import annotations

import json
import math
from dataclasses import FrozenInstanceError
from typing import Any

import pytest

from steerloop import (
    AssistantMessage,
    CancelCause,
    MessageSource,
    ReasoningBlock,
    SystemMessage,
    TextBlock,
    ToolCallBlock,
    ToolResultMessage,
    UserMessage,
    user_message,
)
from steerloop.messages import (
    block_from_json,
    block_to_json,
    check_json,
    message_from_json,
    message_to_json,
)

# --- user_message -------------------------------------------------------------------------


def test_user_message_from_text() -> None:
    """``user_message(str)`` gives one text block, a fresh id and source kind ``user``."""
    a = user_message("hello")
    b = user_message("hello")
    assert isinstance(a, UserMessage)
    assert a.role == "user"
    assert a.content == (TextBlock("hello"),)
    assert a.source.kind == "user"
    assert isinstance(a.id, str) and a.id
    assert a.id != b.id


def test_user_message_from_blocks_and_source_dict() -> None:
    """Blocks are kept in order; a source dict becomes a ``MessageSource``."""
    msg = user_message(
        [TextBlock("a"), ReasoningBlock("r"), TextBlock("b")],
        source={"kind": "plugin", "plugin": "goals"},
    )
    assert msg.content == (TextBlock("a"), ReasoningBlock("r"), TextBlock("b"))
    assert msg.source.kind == "plugin"
    assert msg.source.plugin == "goals"


def test_user_message_source_kinds() -> None:
    """Sources: ``tool`` carries ``call_id``; a ``MessageSource`` is used as is."""
    tool = user_message("ctx", source={"kind": "tool", "call_id": "c1"})
    assert (tool.source.kind, tool.source.call_id) == ("tool", "c1")
    goal_src = MessageSource(kind="goal")
    goal = user_message("g", source=goal_src)
    assert goal.source is goal_src


def test_user_message_with_explicit_id() -> None:
    """An explicit id is used verbatim."""
    assert user_message("x", id="msg-fixed").id == "msg-fixed"


def test_user_message_rejects_non_blocks() -> None:
    """Content that is not a block raises ``ValueError``."""
    with pytest.raises(ValueError):
        user_message(["plain string"])  # type: ignore[list-item]
    with pytest.raises(ValueError):
        user_message([{"type": "text", "text": "x"}])  # type: ignore[list-item]


def test_user_message_rejects_non_string_source_kind() -> None:
    """A source whose kind is not a string raises ``ValueError``."""
    with pytest.raises(ValueError):
        user_message("x", source={"kind": 3})


def test_messages_and_blocks_are_frozen() -> None:
    """Public records are immutable."""
    msg = user_message("x")
    with pytest.raises(FrozenInstanceError):
        msg.id = "other"  # type: ignore[misc]
    with pytest.raises(FrozenInstanceError):
        TextBlock("x").text = "y"  # type: ignore[misc]


def test_roles() -> None:
    """Each message class has its fixed role."""
    assert SystemMessage(id="s", content=()).role == "system"
    assert AssistantMessage(id="a", content=()).role == "assistant"
    assert ToolResultMessage(id="t", call_id="c", content=()).role == "tool"


def test_assistant_tool_calls() -> None:
    """``AssistantMessage.tool_calls`` lists the tool-call blocks in order."""
    c1 = ToolCallBlock("c1", "echo", "{}")
    c2 = ToolCallBlock("c2", "echo", '{"x":1}')
    msg = AssistantMessage(id="a", content=(TextBlock("t"), c1, c2))
    assert msg.tool_calls == (c1, c2)


# --- JSON form ----------------------------------------------------------------------------

BLOCKS = [
    TextBlock("plain"),
    TextBlock(""),
    ReasoningBlock("thinking"),
    ReasoningBlock("thinking", replay_state={"sig": "abc", "n": [1, 2.5, None, True]}),
    ToolCallBlock("c1", "read_file", '{"path": "/x"}'),
    ToolCallBlock("c2", "raw", "not json {"),
    ToolCallBlock("c3", "empty", ""),
]


@pytest.mark.parametrize("block", BLOCKS, ids=repr)
def test_block_json_round_trip(block: Any) -> None:
    """Every block kind survives ``block_to_json`` → JSON text → ``block_from_json``."""
    data = json.loads(json.dumps(block_to_json(block)))
    assert block_from_json(data) == block


MESSAGES = [
    user_message("hi", id="u1"),
    user_message([TextBlock("a"), TextBlock("b")], source={"kind": "plugin", "plugin": "p"}),
    user_message("ctx", source={"kind": "tool", "call_id": "c9"}),
    user_message("goal", source={"kind": "goal", "custom": {"k": [1, 2]}}),
    SystemMessage(id="s1", content=(TextBlock("you are"),)),
    AssistantMessage(
        id="a1",
        content=(ReasoningBlock("r", replay_state="opaque"), TextBlock("t"), BLOCKS[4]),  # type: ignore[arg-type]
        source=MessageSource(kind="model", provider="mock", model="m", replay_state={"x": 1}),
    ),
    AssistantMessage(id="a2", content=()),
    ToolResultMessage(id="t1", call_id="c1", content=(TextBlock("ok"),)),
    ToolResultMessage(id="t2", call_id="c2", content=(TextBlock("bad"),), is_error=True),
]


@pytest.mark.parametrize("message", MESSAGES, ids=lambda m: f"{m.role}:{m.id}")
def test_message_json_round_trip(message: Any) -> None:
    """Every message kind survives ``message_to_json`` → JSON text → ``message_from_json``."""
    data = message_to_json(message)
    check_json(data, "message")
    back = message_from_json(json.loads(json.dumps(data)))
    assert back == message
    assert type(back) is type(message)


def test_message_from_json_rejects_unknown_role_and_block() -> None:
    """Unknown roles and block types raise ``ValueError``."""
    with pytest.raises(ValueError):
        message_from_json({"id": "x", "role": "robot", "content": []})
    with pytest.raises(ValueError):
        block_from_json({"type": "image"})
    with pytest.raises(ValueError):
        block_from_json({"type": "text", "text": 3})


@pytest.mark.parametrize(
    "value",
    [
        {"a": math.nan},
        {"a": math.inf},
        [-math.inf],
        {"a": {1, 2}},
        {"a": b"bytes"},
        {"a": object()},
        {(1, 2): "tuple key"},
        {1: "int key"},
        {None: "none key"},
        {"nested": [{"deep": complex(1, 2)}]},
    ],
    ids=repr,
)
def test_check_json_rejects_non_json(value: Any) -> None:
    """``check_json`` raises ``ValueError`` for content without a strict, lossless JSON form."""
    with pytest.raises(ValueError):
        check_json(value, "payload")


@pytest.mark.parametrize(
    "value",
    [None, True, 0, -1.5, "s", [], {}, {"a": [1, "b", None, {"c": False}]}, (1, 2)],
    ids=repr,
)
def test_check_json_accepts_json(value: Any) -> None:
    """``check_json`` accepts JSON values (tuples serialise as arrays)."""
    check_json(value, "payload")


def test_check_json_names_what_failed() -> None:
    """The error message names the value's role."""
    with pytest.raises(ValueError, match="tool result"):
        check_json({"x": math.nan}, "tool result")


# --- CancelCause --------------------------------------------------------------------------


def test_cancel_cause_has_exactly_four_kinds() -> None:
    """C7.8-18: ``CancelCause`` has exactly four kinds."""
    causes = [
        CancelCause.user(),
        CancelCause.parent(),
        CancelCause.hook("budget"),
        CancelCause.disposed(),
    ]
    assert [c.kind for c in causes] == ["user", "parent", "hook", "disposed"]
    assert causes[2].reason == "budget"
    with pytest.raises(ValueError):
        CancelCause("timeout")  # type: ignore[arg-type]


@pytest.mark.parametrize("reason", [None, 3, b"bytes", {"r": 1}], ids=repr)
def test_cancel_cause_hook_requires_str_reason(reason: Any) -> None:
    """C7.8-18: ``CancelCause.hook()`` requires a ``str`` reason (``ValueError`` otherwise)."""
    with pytest.raises(ValueError):
        CancelCause.hook(reason)


def test_cancel_cause_non_hook_kinds_take_no_reason() -> None:
    """C7.8-6: only the hook cause carries a reason."""
    with pytest.raises(ValueError):
        CancelCause("user", "why")


def test_cancel_cause_json_and_equality() -> None:
    """C7.8-6: the JSON form holds only ``kind`` (and ``reason`` for hook); it round-trips."""
    assert CancelCause.user().to_json() == {"kind": "user"}
    assert CancelCause.hook("budget").to_json() == {"kind": "hook", "reason": "budget"}
    for cause in (CancelCause.parent(), CancelCause.disposed(), CancelCause.hook("x")):
        assert CancelCause.from_json(json.loads(json.dumps(cause.to_json()))) == cause
    with pytest.raises(FrozenInstanceError):
        CancelCause.user().kind = "parent"  # type: ignore[misc]


# --- ids ----------------------------------------------------------------------------------


def test_counting_ids_are_reproducible_and_restorable() -> None:
    """``counting_ids()`` numbers ids per factory; ``set_id_factory`` returns a restorer."""
    from steerloop._ids import counting_ids, new_id, set_id_factory

    restore = set_id_factory(counting_ids())
    try:
        assert [new_id("msg"), new_id("call"), user_message("x").id] == [
            "msg_1",
            "call_2",
            "msg_3",
        ]
    finally:
        restore()
    assert new_id("msg") != "msg_4"
    assert new_id("msg").startswith("msg_")


async def test_runtimes_closed_out_of_order_leave_the_latest_live_factory() -> None:
    """Each ``Runtime.open(ids=...)`` installs its factory; closing one (in any order) never
    leaves a closed runtime's factory in force nor removes a live one's."""
    from steerloop import Runtime
    from steerloop._ids import counting_ids, new_id

    def prefixed(tag: str) -> Any:
        counter = counting_ids()
        return lambda prefix: f"{tag}-{counter(prefix)}"

    r1 = await Runtime.open(ids=prefixed("r1"))
    assert new_id("msg") == "r1-msg_1"
    r2 = await Runtime.open(ids=prefixed("r2"))
    assert new_id("msg") == "r2-msg_1"
    await r1.close()
    assert new_id("msg") == "r2-msg_2"  # r2 still live: its factory stays
    await r2.close()
    assert not new_id("msg").startswith(("r1-", "r2-"))  # nothing of a closed runtime
    await r2.close()  # closing twice uninstalls nothing more
