"""``steerloop chat`` in a real terminal (tmux), driven the way a person uses it.

A loopback OpenAI-compatible server scripts the model: each request takes the next reply, and
gates hold a reply open so there is time to type while the agent works. The test types with
``tmux send-keys`` and reads the screen with ``tmux capture-pane``; every wait is a bounded
poll.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from tests.cli.helpers import (
    CLI,
    Tmux,
    clean_env,
    request_text,
    run_cli,
    text_reply,
    wait_for,
)
from tests.llm.openai_wire import (
    text_events,
    tool_call_events,
)
from tests.llm.sse_server import SSEServer, sse_reply

pytestmark = pytest.mark.timeout(120)

SPINNER = "⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏"


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    path = tmp_path / "ws"
    path.mkdir()
    (path / "notes.txt").write_text("hello\n")
    return path


def lines_with(screen: str, text: str) -> list[str]:
    return [line for line in screen.splitlines() if text in line]


async def test_stream_steer_cancel_and_resume(
    tmp_path: Path, server: SSEServer, tmux: Tmux, workspace: Path
) -> None:
    store = f"sqlite:///{tmp_path / 's.db'}"
    env = clean_env(tmp_path, server)

    # An earlier session, made by a one-shot run against the same store.
    server.add(text_reply("Noted: the word is ", "pineapple."))
    code, _out, err = await run_cli(
        "run", "remember the word pineapple", "--session", "OLD", "--store", store,
        "--approve", "auto", env=env, cwd=workspace,
    )  # fmt: skip
    assert code == 0, err

    release = asyncio.Event()
    shell_cmd = "while [ ! -f go ]; do sleep 0.05; done; echo shell-finished"
    server.add(
        # Turn 1, step 1: text streams, then the reply is held open (gate) before a tool call.
        sse_reply(
            [
                *text_events("Let me look ", "at the workspace."),
                *tool_call_events("c1", "shell", {"command": shell_cmd}),
            ],
            gates={2: release},
        ),
        # Turn 1, step 2: sees the tool result and the steer.
        text_reply("Done: the shell finished and I note **bananas**."),
        # Turn 2: streams a little, then hangs until the client hangs up.
        sse_reply([*text_events("Once upon a time")], hang_after=2),
    )
    await tmux.start([*CLI, "chat", "--session", "T1", "--store", store, "--approve", "auto"],
                     env=env, cwd=workspace)  # fmt: skip
    await tmux.wait_screen("session T1 (new)", "local/m", "❯")

    # Type a prompt: the first words stream while the reply is still open.
    await tmux.type("look around please")
    screen = await tmux.wait_screen("you ❯ look around please", "Let me look")
    assert "at the workspace." not in screen
    assert "steer ❯" in screen  # the prompt is live while the agent runs

    # Type while it works: Enter steers.
    await tmux.type("also mention bananas")
    await tmux.wait_screen("steering: also mention bananas")
    release.set()

    # The tool call runs as a live line with a spinner until it finishes.
    screen = await tmux.wait_screen("shell(command=")
    running = lines_with(screen, "shell(command=")
    assert any(ch in line for line in running for ch in SPINNER), running
    assert "✓ shell" not in screen
    (workspace / "go").write_text("")
    screen = await tmux.wait_screen("✓ shell(command=", "shell-finished", "turn 1 completed")

    # The next request carries the tool result and the steer.
    await wait_for(lambda: len(server.requests) >= 3, "the second request of turn 1")
    second = request_text(server, 2)
    assert "also mention bananas" in second
    assert "shell-finished" in second
    assert [m["role"] for m in server.requests[2].json()["messages"]][-3:] == [
        "assistant",
        "tool",
        "user",
    ]

    # Settled text is Markdown, printed once (the streamed form was only live).
    assert len(lines_with(screen, "Let me look at the workspace.")) == 1
    assert len(lines_with(screen, "the shell finished")) == 1
    assert "**bananas**" not in screen
    (end,) = lines_with(screen, "turn 1 completed")
    assert "tokens in 31 / out 16" in end  # 20+11 in, 9+7 out over the two steps

    # Ctrl-C while the reply streams: the turn ends aborted and the HTTP stream is closed.
    await tmux.type("tell me a long story")
    await tmux.wait_screen("Once upon a time")
    await tmux.send("C-c")
    await wait_for(lambda: server.requests[3].client_closed.is_set(), "the server to see a hangup")
    screen = await tmux.wait_screen("turn 2 aborted (user)", "⏹ interrupted")
    assert len(lines_with(screen, "Once upon a time")) == 1

    # Resume the earlier session: its history is shown.
    await tmux.type("/resume OLD")
    screen = await tmux.wait_screen("now in session OLD")
    tail = screen[screen.index("resumed session OLD") :]
    assert "you ❯ remember the word pineapple" in tail
    assert "Noted: the word is pineapple." in tail

    # Ctrl-D quits; the chat's session is durable.
    await tmux.send("C-d")
    await wait_for_async(tmux.pane_dead, "the chat to exit")
    code, out, err = await run_cli(
        "sessions", "export", "T1", "--store", store, env=env, cwd=workspace
    )
    assert code == 0, err
    events = [json.loads(line) for line in out.splitlines()]
    kinds = [e["type"] for e in events]
    assert kinds.count("turn/end") == 2
    ends = [e["data"]["reason"]["kind"] for e in events if e["type"] == "turn/end"]
    assert ends == ["completed", "aborted"]
    assert len(server.requests) == 4
    assert not server.errors


async def wait_for_async(probe: object, what: str, timeout: float = 20.0) -> None:
    """Poll an async ``probe()`` until it returns true."""
    assert callable(probe)
    deadline = asyncio.get_running_loop().time() + timeout
    while not await probe():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.05)


async def test_commands_approval_queue_and_fork(
    tmp_path: Path, server: SSEServer, tmux: Tmux, workspace: Path
) -> None:
    store = f"sqlite:///{tmp_path / 's.db'}"
    env = clean_env(tmp_path, server)
    release = asyncio.Event()
    server.add(
        # Turn 1 (approval mode ask): two writes, the first allowed, the second denied.
        sse_reply(tool_call_events("w1", "write_file", {"path": "yes.txt", "content": "ok"})),
        sse_reply(tool_call_events("w2", "write_file", {"path": "no.txt", "content": "x"})),
        text_reply("One written, one refused."),
        # Turn 2: held open so a /queue can be typed while it runs.
        text_reply("Working on it", " and done.", gates={2: release}),
        # Turn 3: the queued follow-up (with the earlier /inject).
        text_reply("Queued one handled."),
        # Turn 4: in the fork.
        text_reply("Hello from the fork."),
    )
    await tmux.start([*CLI, "chat", "--session", "C1", "--store", store, "--approve", "ask"],
                     env=env, cwd=workspace)  # fmt: skip
    await tmux.wait_screen("session C1 (new)", "approve ask")

    await tmux.type("/help")
    await tmux.wait_screen("/queue TEXT", "/resume ID", "/model P/M")
    await tmux.type("/tools")
    await tmux.wait_screen("read_file", "write_file", "shell")
    await tmux.type("/model nowhere/x")
    await tmux.wait_screen("error: unknown provider 'nowhere'")
    await tmux.type("/model local/m2")
    await tmux.wait_screen("the next requests use local/m2")

    # Approval prompts inside the chat; the agent waits for the answer.
    await tmux.type("write two files")
    await tmux.wait_screen('? allow write_file(path="yes.txt", content="ok")', "allow? [y/N] ❯")
    assert server.requests[0].json()["model"] == "m2"
    await tmux.type("y")
    await wait_for(lambda: (workspace / "yes.txt").exists(), "the allowed write")
    await tmux.wait_screen('? allow write_file(path="no.txt", content="x")')
    await tmux.type("n")
    screen = await tmux.wait_screen("One written, one refused.", "turn 1 completed")
    assert "✓ write_file(" in screen
    assert any("✗ write_file(" in line and "DENIED" in line for line in screen.splitlines())
    assert not (workspace / "no.txt").exists()

    # /inject while idle waits for the next step; /queue while running waits for the next turn.
    await tmux.type("/inject remember the colour teal")
    await tmux.wait_screen("injected into the next step: remember the colour teal")
    await tmux.type("start the slow one")
    await tmux.wait_screen("Working on it")
    await tmux.type("/queue and then this")
    await tmux.wait_screen("queued for after this turn: and then this")
    release.set()
    await tmux.wait_screen("Queued one handled.", "turn 3 completed")
    assert len(server.requests) == 5
    turn2, turn3 = request_text(server, 3), request_text(server, 4)
    assert "remember the colour teal" in turn2
    assert "start the slow one" in turn2
    assert "and then this" not in turn2
    assert "Working on it and done." in turn3
    assert "and then this" in turn3

    # /sessions lists the store; /fork copies this session into a new one and switches.
    await tmux.type("/sessions")
    screen = await tmux.wait_screen("← current")
    assert any("C1" in line and "← current" in line for line in screen.splitlines())
    await tmux.type("/fork")
    await tmux.wait_screen("now in session C1-fork1")
    await tmux.type("hello fork")
    await tmux.wait_screen("Hello from the fork.", "C1-fork1 · local/m2")
    forked = request_text(server, 5)
    assert "write two files" in forked  # the fork carries the history
    assert "hello fork" in forked

    # Ctrl-C when idle quits.
    await tmux.send("C-c")
    await wait_for_async(tmux.pane_dead, "the chat to exit")
    code, out, err = await run_cli("sessions", "ls", "--store", store, env=env, cwd=workspace)
    assert code == 0, err
    assert "C1-fork1" in out
    fork_row = next(line for line in out.splitlines() if "C1-fork1" in line)
    assert "C1 " in fork_row.replace("C1-fork1", "")  # the parent column names the origin
    code, out, err = await run_cli(
        "sessions", "export", "C1", "--store", store, env=env, cwd=workspace
    )
    assert "hello fork" not in out  # the parent is untouched by the fork's turn
    # The terminal's answers are the durable approval events (EVENTS.md §2.4a).
    logged = [json.loads(line) for line in out.splitlines()]
    approvals = [
        (e["type"], e["data"].get("call_id") or e["data"]["message"]["call_id"],
         e["data"].get("decision") or (e["data"].get("error") or {}).get("code"),
         e["data"].get("by"))
        for e in logged
        if e["type"].startswith("tool/approval-") or e["type"] in ("tool/call", "tool/result")
    ]  # fmt: skip
    assert approvals == [
        ("tool/call", "w1", None, None),
        ("tool/approval-requested", "w1", None, None),
        ("tool/approval-decided", "w1", "allow", "terminal"),
        ("tool/result", "w1", None, None),
        ("tool/call", "w2", None, None),
        ("tool/approval-requested", "w2", None, None),
        ("tool/approval-decided", "w2", "deny", "terminal"),
        ("tool/result", "w2", "DENIED", None),
    ]
    assert not server.errors


async def test_goal_commands_run_rounds_until_the_model_completes(
    tmp_path: Path, server: SSEServer, tmux: Tmux, workspace: Path
) -> None:
    """/goal TEXT arms a goal: rounds run (round 1 answers, round 2 calls complete_goal)
    until the goal is complete; /goal shows it; /goal clear and pause/resume refuse or act."""
    store = f"sqlite:///{tmp_path / 's.db'}"
    env = clean_env(tmp_path, server)
    server.add(
        text_reply("Round one: outline written."),
        sse_reply(tool_call_events("g1", "complete_goal", {"revision": 1, "evidence": "done"})),
        text_reply("The goal is complete."),
    )
    await tmux.start([*CLI, "chat", "--session", "G1", "--store", store, "--approve", "auto"],
                     env=env, cwd=workspace)  # fmt: skip
    await tmux.wait_screen("session G1 (new)")
    await tmux.type("/goal")
    await tmux.wait_screen("no goal (set one with /goal TEXT)")
    await tmux.type("/goal write the release notes")
    await tmux.wait_screen("goal set (up to 10 rounds): write the release notes")
    await tmux.wait_screen("The goal is complete.")
    await wait_for(lambda: len(server.requests) == 3, "two goal rounds and the tool reply")
    first = request_text(server, 0)
    assert "write the release notes" in first and "1/10" in first
    assert "2/10" in request_text(server, 1)
    await tmux.type("/goal")
    await tmux.wait_screen("· complete · round 2/10")
    await tmux.type("/goal pause")
    await tmux.wait_screen("error:")
    assert len(server.requests) == 3  # a complete goal starts no further round
    await tmux.send("C-d")
    await wait_for_async(tmux.pane_dead, "the chat to exit")
    assert not server.errors


async def test_ctrl_c_keeps_a_queued_steer_and_says_so(
    tmp_path: Path, server: SSEServer, tmux: Tmux, workspace: Path
) -> None:
    """A steer typed while the model streams, then Ctrl-C: the turn ends aborted, the chat
    says it kept the steer, and nothing runs until asked — ``/send`` sends it now; after
    another Ctrl-C, the next message carries the kept steer along (before: ``cancel()``
    dropped it without a word). C7.8-4."""
    store = f"sqlite:///{tmp_path / 's.db'}"
    env = clean_env(tmp_path, server)
    server.add(
        sse_reply([*text_events("Thinking about it")], hang_after=2),
        text_reply("Bananas considered."),
        sse_reply([*text_events("Pondering")], hang_after=2),
        text_reply("Both handled."),
    )
    await tmux.start([*CLI, "chat", "--session", "K1", "--store", store, "--approve", "auto"],
                     env=env, cwd=workspace)  # fmt: skip
    await tmux.wait_screen("session K1 (new)")

    await tmux.type("first question")
    await tmux.wait_screen("Thinking about it")
    await tmux.type("also consider bananas")
    await tmux.wait_screen("steering: also consider bananas")
    await tmux.send("C-c")
    await tmux.wait_screen(
        "kept 1 queued message: they go with your next message, or /send sends them now",
        "turn 1 aborted (user)",
    )
    assert len(server.requests) == 1  # parked: no turn starts on its own (C7.8-4)
    await tmux.type("/send")
    await tmux.wait_screen("sending 1 queued message", "Bananas considered.", "turn 2 completed")
    assert "also consider bananas" in server.requests[1].json()["messages"][-1]["content"]

    await tmux.type("second question")
    await tmux.wait_screen("Pondering")
    await tmux.type("and mention cherries")
    await tmux.wait_screen("steering: and mention cherries")
    await tmux.send("C-c")
    await tmux.wait_screen("turn 3 aborted (user)")
    await tmux.type("what about now?")
    await tmux.wait_screen("Both handled.", "turn 4 completed")
    last = request_text(server, 3)
    assert "and mention cherries" in last and "what about now?" in last

    await tmux.send("C-d")
    await wait_for_async(tmux.pane_dead, "the chat to exit")
    code, out, err = await run_cli(
        "sessions", "export", "K1", "--store", store, env=env, cwd=workspace
    )
    assert code == 0, err
    events = [json.loads(line) for line in out.splitlines()]
    ends = [e["data"]["reason"]["kind"] for e in events if e["type"] == "turn/end"]
    assert ends == ["aborted", "completed", "aborted", "completed"]
    assert not server.errors
