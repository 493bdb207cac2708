"""A stdio server's whole process tree ends with its connection: a grandchild that left the
server's process group with setsid included, on close and before a reconnect, with a cgroup
(where this machine gives one) and with the environment marker (always)."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path
from typing import TextIO

import pytest

from steerloop import Runtime, user_message
from steerloop.mcp import install_mcp
from steerloop.mcp._tree import ProcessTree, _cgroup_root
from steerloop.testing import text_response, tool_call_response

from ..conftest import Harness, compact, settle
from .helpers import START, alive, eventually, hostile, lines

pytestmark = pytest.mark.timeout(180)

SLEEPER = f'setsid {sys.executable} -c "import time; time.sleep(600)" </dev/null >/dev/null 2>&1 &'


async def test_close_ends_a_setsid_grandchild(state: Path, errlog: TextIO) -> None:
    """rt.close(): the server and the grandchild it started in a session of its own are gone."""
    rt = await Runtime.open()
    installed = await install_mcp(rt, [hostile(state)], errlog=errlog)
    h = Harness(rt)
    agent = await h.agent(tool_call_response("c1", "x__spawn", {}), text_response("done"))
    agent.followup(user_message("u1"))
    await settle(agent, START)
    (grandchild,) = map(int, lines(state / "children"))
    server = int((state / "pid").read_text())
    assert alive(grandchild) and alive(server)
    await rt.close()
    assert installed.tools("x") == ()
    await eventually(lambda: not alive(grandchild) and not alive(server), 10)


async def test_a_reconnect_ends_the_old_tree_first(h: Harness, state: Path, errlog: TextIO) -> None:
    """The server dies leaving a setsid grandchild: the next call reconnects, and the old
    server's grandchild is gone before the new server runs the call."""
    installed = await install_mcp(h.rt, [hostile(state)], errlog=errlog)
    agent = await h.agent(
        tool_call_response("c1", "x__spawn", {}),
        tool_call_response("c2", "x__die", {}),
        tool_call_response("c3", "x__echo", {"text": "again"}),
        text_response("done"),
    )
    agent.followup(user_message("u1"))
    await settle(agent, START)
    assert compact(agent.session, only=("result(",)) == [
        "result(c1)",
        "result(c2,TOOL_FAILED)",
        "result(c3)",
    ]
    (grandchild,) = map(int, lines(state / "children"))
    assert not alive(grandchild)
    await installed.close()


@pytest.mark.parametrize("cgroup", [True, False], ids=["cgroup", "marker"])
async def test_a_tree_ends_every_process_it_started(cgroup: bool) -> None:
    """ProcessTree alone: a shell that starts a setsid sleeper and exits; kill() ends the
    sleeper, found by the cgroup or by the environment marker."""
    if cgroup and _cgroup_root() is None:
        pytest.skip("no cgroup v2 of our own on this machine")
    tree = ProcessTree(cgroup=cgroup)
    if cgroup and tree.cgroup is None:
        pytest.skip("our cgroup is not writable here")
    command, args = tree.command("/bin/sh", ["-c", SLEEPER])
    shell = subprocess.Popen(
        [command, *args], env=tree.environment({"PATH": "/usr/bin:/bin"}), start_new_session=True
    )
    tree.started(shell.pid)
    await asyncio.to_thread(shell.wait, 10)
    members = await eventually(tree.members, 10)
    assert members and shell.pid not in members
    assert await asyncio.to_thread(tree.kill, 10)
    await eventually(lambda: not any(alive(p) for p in members), 10)
    if cgroup:
        assert tree.cgroup is not None and not tree.cgroup.exists()
