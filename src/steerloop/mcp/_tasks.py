"""Task-augmented calls (MCP 2025-11-25 tasks): the handle is logged before the wait.

A tool whose ``execution.taskSupport`` is ``optional`` or ``required``, on a server that
declares task-augmented ``tools/call``, is called with a ``task`` parameter. The server
answers with a task at once; ``mcp/task-created`` is appended and flushed, then the call
waits on ``tasks/result`` (which the server holds until the task ends, delivering the task's
own requests, an ``elicitation/create`` say, on the way). A lost connection is reconnected
and the result asked again: the call itself is never sent twice. A cancelled call cancels
its task (``tasks/cancel``, best effort).

After a crash the call has a ``tool/call`` and no result. ``recover`` finds its logged
handle and asks the server for the task's result, so the call gets its real outcome rather
than ``TOOL_OUTCOME_UNKNOWN`` whenever the server still knows the task.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import mcp_types as types
from mcp.client import Client
from mcp.shared.exceptions import MCPError

from .. import AbortSignal
from ..errors import AbortedError
from ..session.events import MCPTaskCreated, SessionEvent
from ._bounds import TASK_KEY
from ._connection import Connection
from ._errors import MCPConnectionError

if TYPE_CHECKING:
    from ..session import Session
    from ._calls import CallContext

__all__ = ["call_as_task", "find_task", "recover_task", "uses_tasks"]

_log = logging.getLogger("steerloop.mcp")

#: Milliseconds a server is asked to keep a task's result (a recovery after a crash needs it).
TASK_TTL_MS = 24 * 3600 * 1000
# Seconds the SDK may wait for one tasks/result (the call's deadline bounds it really).
_RESULT_READ_TIMEOUT = 7 * 24 * 3600.0
_CANCEL_TIMEOUT = 5.0
_RESULT_ATTEMPTS = 3


def uses_tasks(capabilities: types.ServerCapabilities, tool: types.Tool) -> bool:
    """Whether ``tool`` of a server with ``capabilities`` is called as a task."""
    support = tool.execution.task_support if tool.execution is not None else None
    requests = capabilities.tasks.requests if capabilities.tasks is not None else None
    tools = requests.tools if requests is not None else None
    return support in ("optional", "required") and tools is not None and tools.call is not None


async def call_as_task(
    connection: Connection,
    call: CallContext,
    session: Session,
    name: str,
    arguments: dict[str, Any],
) -> types.CallToolResult:
    """Call ``name`` as a task; log its handle to ``session``; wait for its result."""
    request = types.CallToolRequest(
        params=types.CallToolRequestParams(
            name=name, arguments=arguments, task=types.TaskMetadata(ttl=TASK_TTL_MS)
        )
    )

    def send(client: Client) -> Any:
        return client.session.send_request(request, types.CallToolResult)

    answer: types.CallToolResult = await connection.run(call.signal, send)
    handle = (answer.meta or {}).get(TASK_KEY)
    if handle is None:
        return answer  # the server ran the call at once
    task = types.Task.model_validate(handle, by_name=False)
    call.task_id = task.task_id
    session.append(
        MCPTaskCreated(
            call_id=call.exec.call_id,
            server=connection.server.name,
            task_id=task.task_id,
            ttl_ms=task.ttl,
            poll_ms=task.poll_interval,
        ),
        ignorable=True,
    )
    await session.flush()
    try:
        return await task_result(connection, task.task_id, call.signal)
    except AbortedError:
        await _cancel(connection, task.task_id)
        raise


async def task_result(
    connection: Connection, task_id: str, signal: AbortSignal | None
) -> types.CallToolResult:
    """The result of task ``task_id`` (``tasks/result`` waits until it ends), asked again
    after a lost connection."""
    request = types.GetTaskPayloadRequest(params=types.GetTaskPayloadRequestParams(task_id=task_id))

    def fetch(client: Client) -> Any:
        return client.session.send_request(
            request, types.CallToolResult, request_read_timeout_seconds=_RESULT_READ_TIMEOUT
        )

    for attempt in range(_RESULT_ATTEMPTS):
        try:
            result: types.CallToolResult = await connection.run(signal, fetch)
            return result
        except MCPConnectionError:
            if attempt + 1 == _RESULT_ATTEMPTS:
                raise
            _log.info("MCP server %r: asking for task %r again", connection.server.name, task_id)
    raise AssertionError("unreachable")


async def _cancel(connection: Connection, task_id: str) -> None:
    request = types.CancelTaskRequest(params=types.CancelTaskRequestParams(task_id=task_id))

    def send(client: Client) -> Any:
        return client.session.send_request(request, types.CancelTaskResult)

    with contextlib.suppress(Exception):
        await asyncio.wait_for(connection.run(None, send), _CANCEL_TIMEOUT)


def find_task(events: Sequence[SessionEvent], call_id: str) -> MCPTaskCreated | None:
    """The task handle logged for call ``call_id``, if any."""
    for event in reversed(events):
        data = event.data
        if isinstance(data, MCPTaskCreated) and data.call_id == call_id:
            return data
    return None


async def recover_task(
    connection: Connection, handle: MCPTaskCreated, signal: AbortSignal
) -> types.CallToolResult | None:
    """The result of a task a crashed process was waiting for; ``None`` when the server no
    longer knows it or the signal aborts first."""
    try:
        return await task_result(connection, handle.task_id, signal)
    except (MCPError, MCPConnectionError, AbortedError) as exc:
        _log.info(
            "MCP server %r: task %r of call %r not recovered: %s",
            handle.server,
            handle.task_id,
            handle.call_id,
            exc,
        )
        return None
