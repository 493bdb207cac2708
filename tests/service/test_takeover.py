"""The continue-after-takeover message (design/SERVICE.md §3.4 step 5) from the real repair
output of a crashed session: a child process runs a scripted agent on a SQLite file and gets
SIGKILL (``tests/session/_crash_child.py``); this process resumes it and builds the message."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from steerloop import AgentOptions, Runtime, user_message
from steerloop.messages import (
    MessageSource,
    TextBlock,
    UserMessage,
    message_from_json,
    message_to_json,
)
from steerloop.service._takeover import TAKEOVER_PLUGIN, takeover_message
from steerloop.session import SessionEvent
from steerloop.session._events import (
    AssistantMessageEvent,
    ToolErrorInfo,
    ToolResultEvent,
    TurnEnd,
    TurnEndReason,
)
from steerloop.session._sqlite import SqliteStore
from steerloop.testing import text_response

from ..conftest import Harness, settle
from ..session._crash_child import SESSION
from ..session.test_crash import Child

OPTIONS = AgentOptions(provider="mock", model="m")


async def crash_and_resume(tmp_path: Path, mode: str) -> tuple[Any, Harness, int]:
    """Kill a child in ``mode`` and resume its session here; returns the resumed agent, its
    harness and the repair's first seq (stored length + 1)."""
    path = tmp_path / "crash.db"
    child = await Child.start(mode, path)
    try:
        await child.until("tool-running" if mode == "tool" else "streaming")
    finally:
        await child.kill()
    # By URL: the runtime owns (and its close closes) the store and its writer thread; a
    # SqliteStore object handed to it was never closed by the callers, who close h.rt.
    rt = await Runtime.open(store=f"sqlite:///{path}")
    store = rt.sessions.persistence
    assert store is not None
    stored = await store.load(SESSION)
    h = Harness(rt)
    handle = await rt.agents.resume(resume_session_id=SESSION, agent_options=OPTIONS)
    return handle.agent, h, len(stored) + 1


def text(message: UserMessage) -> str:
    assert len(message.content) == 1 and isinstance(message.content[0], TextBlock)
    return message.content[0].text


async def test_turn_killed_mid_tool_names_each_call(tmp_path: Path) -> None:
    """C7.2-9, C7.10-8: killed while c1's body runs (c2 queued behind it): the message is
    plugin-sourced and names ``slow`` (call c1) as of unknown outcome and ``slow`` (call c2) as not
    started, in the repair's order; sent as a followup, it is the last message of the next request.
    """
    agent, h, first = await crash_and_resume(tmp_path, "tool")
    try:
        message = takeover_message(agent.session.events, first)
        assert message is not None
        assert message.source == MessageSource(
            kind="plugin", plugin=TAKEOVER_PLUGIN, extra={"turn": 2}
        )
        assert text(message) == (
            "The previous turn was interrupted by a runtime failure: the worker running this "
            "session stopped and another worker has taken the session over.\n"
            '- tool "slow" (call c1): its outcome is unknown. It was started but its result '
            "was never recorded, so its effects may or may not have happened; check the "
            "current state before relying on it or running it again.\n"
            '- tool "slow" (call c2): not started. It did not run and had no effect.\n'
            "Continue the task from where it stopped."
        )
        assert message_from_json(message_to_json(message)) == message  # survives the log
        h.adapter.add(text_response("checked and continued"))
        agent.followup(message)
        await settle(agent)
        request = h.adapter.requests[-1]
        assert request.messages[-1] == message
        assert [m.call_id for m in request.messages if m.role == "tool"] == ["c1", "c2"]
        assert agent.session.events[-1].data.reason.kind == "completed"
    finally:
        await h.rt.close()


async def test_turn_killed_mid_stream_has_no_calls_to_name(tmp_path: Path) -> None:
    """Killed while the model streamed (no tool call yet): the message says the turn was
    interrupted and names no call."""
    agent, h, first = await crash_and_resume(tmp_path, "stream")
    try:
        message = takeover_message(agent.session.events, first)
        assert message is not None
        assert text(message) == (
            "The previous turn was interrupted by a runtime failure: the worker running this "
            "session stopped and another worker has taken the session over.\n"
            "Continue the task from where it stopped."
        )
    finally:
        await h.rt.close()


async def test_no_interrupted_turn_gives_none(tmp_path: Path) -> None:
    """A session whose turns were closed resumes without repair: no message. Nor is a turn
    repaired by an earlier lifecycle (before ``from_seq``) this takeover's concern."""
    agent, h, first = await crash_and_resume(tmp_path, "tool")
    try:
        h.adapter.add(text_response("fine"))
        agent.followup(user_message("go on"))
        await settle(agent)
    finally:
        await h.rt.close()
    store = SqliteStore(tmp_path / "crash.db")
    try:
        rt = await Runtime.open(store=store)
        try:
            Harness(rt)
            before = await store.load(SESSION)
            handle = await rt.agents.resume(resume_session_id=SESSION, agent_options=OPTIONS)
            events = handle.agent.session.events
            assert [e.type for e in events[len(before) :]] == ["session/end-seed"]
            assert takeover_message(events, len(before) + 1) is None
            assert takeover_message(events, first) is not None  # the first takeover's repair
        finally:
            await rt.close()
    finally:
        await store.close()  # a store the runtime was given is not the runtime's to close


def _event(seq: int, data: Any, type: str) -> SessionEvent:
    return SessionEvent(seq=seq, time=1, type=type, data=data)


class _Approval:
    """A stand-in payload for ``tool/approval-requested`` (only ``turn`` and ``call_id`` are
    read, by duck typing, so this module works whether or not approvals are installed)."""

    def __init__(self, turn: int, call_id: str) -> None:
        self.turn = turn
        self.call_id = call_id


def test_hostile_names_and_unknown_calls_are_rendered_safely() -> None:
    """Tool names come from the model: control characters and quotes are neutralised and long
    names shortened; a call whose request is not in the log is named by id only; a call held
    for an undecided approval says so."""
    from steerloop.messages import AssistantMessage, ToolCallBlock, ToolResultMessage

    call = ToolCallBlock(id="c1", name='evil"\nname' + "x" * 200, arguments="{}")
    held = ToolCallBlock(id="c3", name="deploy", arguments="{}")
    asked = AssistantMessageEvent(
        turn=1,
        step=1,
        message=AssistantMessage(id="a", content=(call, held)),
        stream=(),
    )

    def result(call_id: str, code: str) -> ToolResultEvent:
        return ToolResultEvent(
            turn=1,
            step=1,
            message=ToolResultMessage(
                id=f"r{call_id}", call_id=call_id, content=(TextBlock("x"),), is_error=True
            ),
            error=ToolErrorInfo(code=code),
        )

    events = [
        _event(1, asked, "assistant/message"),
        _event(2, _Approval(1, "c3"), "tool/approval-requested"),
        _event(3, result("c1", "TOOL_OUTCOME_UNKNOWN"), "tool/result"),
        _event(4, result("c9", "TOOL_NOT_STARTED"), "tool/result"),
        _event(5, result("c3", "TOOL_NOT_STARTED"), "tool/result"),
        _event(6, TurnEnd(turn=1, reason=TurnEndReason(kind="interrupted")), "turn/end"),
    ]
    message = takeover_message(events, 3)
    assert message is not None
    lines = text(message).split("\n")
    assert lines[1].startswith("- tool \"evil' name" + "x" * 69 + '…" (call c1): its outcome')
    assert lines[2] == "- tool call c9: not started. It did not run and had no effect."
    assert lines[3] == (
        '- tool "deploy" (call c3): not started. It was waiting for an approval that was '
        "never decided; it did not run and had no effect."
    )
    assert takeover_message(events, 7) is None


@pytest.mark.parametrize("kind", ["completed", "aborted", "error"])
def test_only_interrupted_turns_count(kind: str) -> None:
    """A turn that ended any other way is no takeover."""
    events = [_event(1, TurnEnd(turn=1, reason=TurnEndReason(kind=kind)), "turn/end")]  # type: ignore[arg-type]
    assert takeover_message(events, 1) is None


async def test_pending_approval_killed_with_its_worker_is_named_not_started(
    tmp_path: Path,
) -> None:
    """EVENTS.md §2.4a, C7.2-9: a call held for an approval when its process died (SIGKILL, SQLite)
    is repaired to TOOL_NOT_STARTED; the takeover message names it as not started, waiting for an
    approval never decided."""
    from ..agent.test_approvals_crash import kill_while_pending

    path = tmp_path / "crash.db"
    acked = await kill_while_pending(path)
    rt = await Runtime.open(store=f"sqlite:///{path}")
    try:
        Harness(rt)
        handle = await rt.agents.resume(resume_session_id="s", agent_options=OPTIONS)
        message = takeover_message(handle.agent.session.events, acked + 1)
        assert message is not None
        assert text(message).split("\n")[1:] == [
            '- tool "write" (call c1): not started. It was waiting for an approval that was '
            "never decided; it did not run and had no effect.",
            "Continue the task from where it stopped.",
        ]
    finally:
        await rt.close()
