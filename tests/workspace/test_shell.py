"""The shell tool: output and exit code, the output cap, and that no process outlives a call
(timeout, abort, cancel through the agent, background children)."""

from __future__ import annotations

import asyncio
import gc
import os
import shlex
import sys
import warnings
from pathlib import Path

import pytest

from steerloop import AbortController, AbortedError, CancelCause, user_message
from steerloop.messages import TextBlock, ToolResultMessage
from steerloop.testing import text_response, tool_call_response
from steerloop.tools import Tool
from steerloop.workspace import workspace_tools

from ..conftest import Harness, compact, settle
from .conftest import POLL_TIMEOUT, code, read_pid, run, text, wait_gone

# Cancelled calls in a row, each on a loop closed right after: the race it pins is narrow.
ROUNDS = 20

# The leader shell writes its pid, then a subshell starts a grandchild `sleep` and writes
# its pid; the leader waits for the subshell, which waits for the sleep.
GRANDCHILD = "echo $$ > leader.pid; (sleep 30 & echo $! > grand.pid; wait); echo never"


def shell(
    root: Path, *, shell_timeout: float = 120, output_cap: int = 30_000, kill_grace: float = 2.0
) -> Tool:
    tools = workspace_tools(
        root, shell_timeout=shell_timeout, output_cap=output_cap, kill_grace=kill_grace
    )
    return next(t for t in tools if t.name == "shell")


async def test_output_and_exit_code(root: Path) -> None:
    result = await run(shell(root), command="echo out; echo err >&2; pwd; exit 3")
    assert not result.is_error
    assert text(result) == f"out\nerr\n{root}\n[exit code 3]"
    assert result.meta == {"exit_code": 3, "output_bytes": len(f"out\nerr\n{root}\n")}


async def test_success_without_output(root: Path) -> None:
    result = await run(shell(root), command="true")
    assert text(result) == "[exit code 0]"
    assert result.meta == {"exit_code": 0, "output_bytes": 0}


async def test_runs_in_the_workspace_with_no_stdin(root: Path) -> None:
    (root / "a.txt").write_text("content\n")
    result = await run(shell(root), command="cat a.txt; cat; echo done")
    assert text(result) == "content\ndone\n[exit code 0]"


async def test_output_is_capped_keeping_head_and_tail(root: Path) -> None:
    script = "import sys; sys.stdout.write('A' * 600 + 'B' * 600 + 'C' * 600)"
    command = f"{shlex.quote(sys.executable)} -c {shlex.quote(script)}"
    result = await run(shell(root, output_cap=100), command=command)
    assert text(result) == "A" * 50 + "\n[... 1700 bytes of output cut ...]\n" + "C" * 50 + (
        "\n[exit code 0]"
    )
    assert result.meta == {"exit_code": 0, "output_bytes": 1800}


async def test_timeout_kills_the_process_group(root: Path, reaper: list[int]) -> None:
    """On the timeout the leader and its grandchild are both ended; the result names it."""
    result = await run(shell(root, shell_timeout=1), command=GRANDCHILD)
    leader = await read_pid(root / "leader.pid")
    grandchild = await read_pid(root / "grand.pid")
    reaper += [leader, grandchild]
    assert result.is_error
    assert result.error is not None
    assert (result.error.code, result.error.name) == ("TOOL_FAILED", "TimeoutError")
    assert text(result).startswith("command timed out after 1s; its process group was killed\n")
    assert "never" not in text(result)
    await wait_gone(leader, grandchild)


async def test_timeout_escalates_to_sigkill(root: Path, reaper: list[int]) -> None:
    """A group that ignores SIGTERM is killed after the grace period."""
    command = "trap '' TERM; echo $$ > leader.pid; sleep 30 & echo $! > grand.pid; wait"
    result = await run(shell(root, shell_timeout=1, kill_grace=0.2), command=command)
    leader = await read_pid(root / "leader.pid")
    grandchild = await read_pid(root / "grand.pid")
    reaper += [leader, grandchild]
    assert code(result) == "TOOL_FAILED"
    assert text(result).endswith("[killed by signal 9]")
    await wait_gone(leader, grandchild)


async def test_abort_kills_the_process_group_at_once(root: Path, reaper: list[int]) -> None:
    """The command runs in its own session; aborting the call's signal ends the whole
    group before the body returns, and the body raises ``AbortedError``."""
    ctrl = AbortController()
    call = asyncio.ensure_future(run(shell(root), ctrl.signal, command=GRANDCHILD))
    leader = await read_pid(root / "leader.pid")
    grandchild = await read_pid(root / "grand.pid")
    reaper += [leader, grandchild]
    assert os.getsid(leader) == leader
    assert os.getpgid(grandchild) == leader
    assert not call.done()
    ctrl.abort("stop")
    with pytest.raises(AbortedError):
        await asyncio.wait_for(call, POLL_TIMEOUT)
    await wait_gone(leader, grandchild)


async def test_aborted_signal_runs_nothing(root: Path) -> None:
    ctrl = AbortController()
    ctrl.abort("early")
    with pytest.raises(AbortedError):
        await run(shell(root), ctrl.signal, command="touch ran")
    assert not (root / "ran").exists()


@pytest.mark.parametrize(
    "background", ["sleep 30 > /dev/null 2>&1 &", "sleep 30 &"], ids=["detached", "holds-pipe"]
)
async def test_background_processes_do_not_outlive_the_command(
    root: Path, reaper: list[int], background: str
) -> None:
    """A background child is ended when the command exits (even one holding the output
    pipe, which would otherwise keep the call waiting for 30s)."""
    result = await run(shell(root), command=f"{background} echo $! > bg.pid; echo started")
    child = await read_pid(root / "bg.pid")
    reaper.append(child)
    assert text(result) == "started\n[exit code 0]"
    await wait_gone(child)


async def test_cancel_through_the_agent_leaves_no_process(
    h: Harness, root: Path, reaper: list[int]
) -> None:
    """agent.cancel while shell runs: the turn ends aborted, the call ABORTED, and neither
    the shell nor its grandchild survives."""
    for tool in workspace_tools(root):
        h.rt.tools.register(tool)
    agent = await h.agent(tool_call_response("c1", "shell", {"command": GRANDCHILD}))
    agent.followup(user_message("u1"))
    leader = await read_pid(root / "leader.pid")
    grandchild = await read_pid(root / "grand.pid")
    reaper += [leader, grandchild]
    agent.cancel(CancelCause.user())
    await settle(agent)
    assert compact(agent.session)[-5:] == [
        "msg",
        "call(c1)",
        "result(c1,ABORTED)",
        "S-1.1",
        "T-1:aborted",
    ]
    await wait_gone(leader, grandchild)
    assert len(h.adapter.requests) == 1


async def test_shell_result_reaches_the_model(h: Harness, root: Path) -> None:
    for tool in workspace_tools(root):
        h.rt.tools.register(tool)
    agent = await h.agent(
        tool_call_response("c1", "shell", {"command": "echo hi; exit 1"}), text_response("ok")
    )
    agent.followup(user_message("u1"))
    await settle(agent)
    assert compact(agent.session, only=("result(", "T-")) == ["result(c1)", "T-1:completed"]
    message = h.adapter.requests[1].messages[-1]
    assert isinstance(message, ToolResultMessage)
    assert not message.is_error
    assert text_of(message) == "hi\n[exit code 1]"


def text_of(message: ToolResultMessage) -> str:
    return "".join(block.text for block in message.content if isinstance(block, TextBlock))


# --- issue 11 item 11: secrets and escapees --------------------------------------------------

KEY = "sk-test-0123456789abcdef"
PG = "pg-password-value"


async def test_secrets_of_the_host_do_not_reach_the_command(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``env`` shows the allow-list and the configured variables, never the host's keys."""
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    monkeypatch.setenv("PGPASSWORD", PG)
    monkeypatch.setenv("UNRELATED_SETTING", "visible-to-nobody")
    monkeypatch.setenv("LC_TIME", "C")
    monkeypatch.setenv("PASSED_THROUGH", "yes")
    tool = next(
        t
        for t in workspace_tools(
            root, shell_env={"CONFIGURED": "1"}, shell_env_allow=["PASSED_THROUGH"]
        )
        if t.name == "shell"
    )
    out = text(await run(tool, command="env"))
    names = {line.split("=", 1)[0] for line in out.splitlines()[:-1] if "=" in line}
    assert {"PATH", "HOME", "LC_TIME", "CONFIGURED", "PASSED_THROUGH"} <= names
    assert not names & {"OPENAI_API_KEY", "PGPASSWORD", "UNRELATED_SETTING"}
    assert KEY not in out
    assert PG not in out


async def test_secret_values_are_redacted_from_output(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A key value that reaches the output another way (a file) is replaced by ``***``; a
    short "secret" is left alone so words are not mangled."""
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    monkeypatch.setenv("PGPASSWORD", PG)
    monkeypatch.setenv("X_TOKEN", "e")
    (root / "leak.txt").write_text(f"key={KEY} pg={PG}\nthe disk-usage report\n")
    out = text(await run(shell(root), command="cat leak.txt"))
    assert out == "key=*** pg=***\nthe disk-usage report\n[exit code 0]"


async def test_the_redacted_output_is_what_the_log_holds(
    h: Harness, root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)
    (root / "leak.txt").write_text(KEY)
    for tool in workspace_tools(root):
        h.rt.tools.register(tool)
    agent = await h.agent(
        tool_call_response("c1", "shell", {"command": "cat leak.txt; env"}),
        text_response("done"),
    )
    agent.followup(user_message("u1"))
    await settle(agent)
    logged = repr([event.data for event in agent.session.events])
    assert KEY not in logged
    assert "***" in logged


SETSID = "setsid sleep 30 > /dev/null 2>&1 < /dev/null & echo $! > escapee.pid"


async def test_setsid_child_is_ended_when_the_command_exits(root: Path, reaper: list[int]) -> None:
    """A child that left the process group with setsid does not outlive the call."""
    result = await run(shell(root), command=f"{SETSID}; echo started")
    child = await read_pid(root / "escapee.pid")
    reaper.append(child)
    assert text(result) == "started\n[exit code 0]"
    await wait_gone(child)


async def test_setsid_child_is_ended_on_timeout(root: Path, reaper: list[int]) -> None:
    result = await run(shell(root, shell_timeout=1), command=f"{SETSID}; sleep 30")
    child = await read_pid(root / "escapee.pid")
    reaper.append(child)
    assert code(result) == "TOOL_FAILED"
    await wait_gone(child)


async def test_setsid_child_is_ended_on_abort(root: Path, reaper: list[int]) -> None:
    ctrl = AbortController()
    task = asyncio.ensure_future(run(shell(root), ctrl.signal, command=f"{SETSID}; sleep 30"))
    child = await read_pid(root / "escapee.pid")
    reaper.append(child)
    ctrl.abort("stop")
    with pytest.raises(AbortedError):
        await asyncio.wait_for(task, POLL_TIMEOUT)
    await wait_gone(child)


async def test_setsid_child_is_ended_when_the_call_is_cancelled(
    root: Path, reaper: list[int]
) -> None:
    """The task running the call is cancelled from outside: SIGKILL at once, escapees too."""
    task = asyncio.ensure_future(run(shell(root), command=f"{SETSID}; sleep 30"))
    child = await read_pid(root / "escapee.pid")
    reaper.append(child)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await wait_gone(child)


def test_a_cancelled_call_leaves_no_unreaped_shell(root: Path) -> None:
    """Cancelled from outside, the call returns only once the shell's exit was collected.

    Counterexample this pins (seen in CI): SIGKILL and return at once; the child watcher's
    report of the exit was still on its way to the loop when the loop closed, so the shell's
    Popen never got its return code and warned "subprocess ... is still running" when collected.
    Each round closes its loop right after the cancelled call, as a test's loop does.
    """

    async def cancelled_call() -> int:
        task = asyncio.ensure_future(run(shell(root), command="echo $$ > shell.pid; sleep 30"))
        pid = await read_pid(root / "shell.pid")
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return pid

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ResourceWarning)
        for _ in range(ROUNDS):
            (root / "shell.pid").unlink(missing_ok=True)
            # Closed at once, as a test's loop may be: no further rounds for late callbacks.
            loop = asyncio.new_event_loop()
            try:
                pid = loop.run_until_complete(cancelled_call())
            finally:
                loop.close()
            gc.collect()
            assert not Path(f"/proc/{pid}").exists()
    assert [str(w.message) for w in caught if issubclass(w.category, ResourceWarning)] == []
