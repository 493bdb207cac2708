"""The stdio transport: a server process in a contained tree, its messages bounded.

The SDK's own stdio transport decodes each line on the event loop (a 200,000-block result
held the loop for seconds) and ends only the server's process group. This one reads lines
of at most ``MCPLimits.message_bytes`` (a longer one ends the connection), decodes them
through the connection's ``Bounder`` (a long line in a worker thread, cut before it is
validated), and ends the server's whole tree (``ProcessTree``) when it closes: the spec's
order (close stdin, wait, SIGTERM, wait), then SIGKILL for whatever is left of the tree,
escapees included, every step bounded and shielded from cancellation.
"""

from __future__ import annotations

import errno
import logging
import os
import shutil
import signal
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager, suppress
from typing import Any, TextIO

import anyio
import anyio.abc
import anyio.to_thread
from anyio.streams.memory import MemoryObjectSendStream
from mcp.shared.message import SessionMessage

from ._bounds import Bounder, MessageTooLarge
from ._config import MCPServer, server_environment
from ._tree import ProcessTree

__all__ = ["contained_stdio"]

_log = logging.getLogger("steerloop.mcp")

# Seconds for: the writer to flush, the server to exit after its stdin closes, after SIGTERM.
_FLUSH = 0.5
_EXIT_AFTER_STDIN = 2.0
_EXIT_AFTER_TERM = 2.0
_KILL_WAIT = 5.0
_CHUNK = 65_536


@asynccontextmanager
async def contained_stdio(
    server: MCPServer,
    bounder: Bounder,
    errlog: TextIO | None,
    on_fault: Callable[[str], None],
    *,
    cgroup: bool = True,
) -> AsyncIterator[tuple[Any, Any]]:
    """Start ``server`` in a tree of its own; yield its ``(read, write)`` message streams
    (``on_fault`` hears why the connection ended when the server broke a limit).

    Raises:
        OSError: the server could not be started.
    """
    env = server_environment(server)
    executable = _executable(server, env)
    tree = ProcessTree(cgroup=cgroup)
    command, args = tree.command(executable, list(server.args))
    try:
        process = await anyio.open_process(
            [command, *args],
            env=tree.environment(env),
            cwd=server.cwd,
            stderr=errlog or sys.stderr,
            start_new_session=True,
        )
    except BaseException:
        await anyio.to_thread.run_sync(tree.kill)
        raise
    tree.started(process.pid)
    read_in, read_out = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    write_in, write_out = anyio.create_memory_object_stream[SessionMessage](0)
    writer_done = anyio.Event()

    async def writer() -> None:
        assert process.stdin is not None
        try:
            async with write_out:
                async for message in write_out:
                    bounder.sent(message)
                    text = message.message.model_dump_json(by_alias=True, exclude_unset=True)
                    await process.stdin.send((text + "\n").encode())
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
            await read_in.aclose()  # the session sees the end instead of waiting forever
        finally:
            writer_done.set()

    async with anyio.create_task_group() as group:
        group.start_soon(_read_lines, process, bounder, read_in, server.name, on_fault)
        group.start_soon(writer)
        try:
            yield read_out, write_in
        finally:
            with anyio.CancelScope(shield=True):
                read_out.close()
                write_in.close()
                with anyio.move_on_after(_FLUSH):
                    await writer_done.wait()
                await _stop(process, tree)
            group.cancel_scope.cancel()


async def _read_lines(
    process: anyio.abc.Process,
    bounder: Bounder,
    read_in: MemoryObjectSendStream[SessionMessage | Exception],
    name: str,
    on_fault: Callable[[str], None],
) -> None:
    """Hand on each line of the server's stdout as a bounded message; a line over
    ``message_bytes`` ends the connection (``on_fault`` hears why)."""
    assert process.stdout is not None
    cap = bounder.limits.message_bytes
    pieces: list[bytes] = []
    size = 0
    async with read_in:
        try:
            async for chunk in process.stdout:
                start = 0
                while (end := chunk.find(b"\n", start)) >= 0:
                    size += end - start
                    if size > cap:
                        raise MessageTooLarge(f"a message longer than {cap:,} bytes")
                    pieces.append(chunk[start:end])
                    line = b"".join(pieces)
                    pieces, size, start = [], 0, end + 1
                    if line.strip():
                        await read_in.send(await bounder.decode(line))
                size += len(chunk) - start
                if size > cap:
                    raise MessageTooLarge(f"a message longer than {cap:,} bytes")
                pieces.append(chunk[start:])
        except MessageTooLarge as exc:
            on_fault(f"the server sent {exc}")
            _log.warning("MCP server %r sent %s: connection closed", name, exc)
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, anyio.EndOfStream):
            pass


def _executable(server: MCPServer, env: dict[str, str]) -> str:
    """The server's program, found as ``exec`` would find it (a wrapper that cannot run it
    would only exit; a missing program is a clear error here instead).

    Raises:
        FileNotFoundError: no such program (on the server's ``PATH``).
    """
    command = server.command
    assert command is not None
    if os.sep in command and not os.path.isabs(command) and server.cwd is not None:
        command = os.path.join(server.cwd, command)
    found = shutil.which(command, path=env.get("PATH", os.defpath))
    if found is None:
        raise FileNotFoundError(errno.ENOENT, "No such file or directory", server.command)
    return found


async def _stop(process: anyio.abc.Process, tree: ProcessTree) -> None:
    """Close stdin, wait, SIGTERM the tree, wait, SIGKILL what is left; all bounded."""
    assert process.stdin is not None and process.stdout is not None
    with suppress(OSError, anyio.BrokenResourceError, anyio.ClosedResourceError):
        await process.stdin.aclose()
    if not await _exited(process, _EXIT_AFTER_STDIN):
        tree.signal(signal.SIGTERM)
        await _exited(process, _EXIT_AFTER_TERM)
    if not await anyio.to_thread.run_sync(tree.kill, _KILL_WAIT):
        _log.warning("MCP server process %d: some of its processes outlived SIGKILL", process.pid)
    with suppress(OSError, anyio.BrokenResourceError, anyio.ClosedResourceError):
        await process.stdout.aclose()
    with anyio.move_on_after(_KILL_WAIT):
        await process.aclose()


async def _exited(process: anyio.abc.Process, timeout: float) -> bool:
    """Whether the server exited within ``timeout`` (polled: ``wait`` also waits for pipes
    a child may hold open)."""
    with anyio.move_on_after(timeout):
        while process.returncode is None:
            await anyio.sleep(0.01)
    return process.returncode is not None
