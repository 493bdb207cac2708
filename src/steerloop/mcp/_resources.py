"""A server's resources: listing, reading, the ``read_resource`` tool and update reports.

Reading goes through the connection's bounds like a tool result. A resource becomes text
blocks: a text resource its text under a one-line header naming it, a binary one a line
saying what it is (its bytes are not shown to the model). The ``<server>__read_resource``
tool lets the model follow a resource link a tool result gave it; it is read-only, so calls
of it run in parallel. A ``resources/updated`` notification updates nothing: it is logged
(``mcp/resource-updated``) to the sessions that read that resource from this server.
"""

from __future__ import annotations

import logging
import weakref
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any

import mcp_types as types
from mcp.client import Client
from pydantic import BaseModel, ConfigDict, Field

from ..agent import Agent
from ..messages import Block, TextBlock
from ..session.events import MCPResourceUpdated
from ..tools import Tool, ToolError, ToolExec, ToolResult, define_tool
from ._connection import Connection
from ._limits import CUT_KEY

__all__ = [
    "ResourceWatch",
    "list_resources",
    "offers_resources",
    "read_resource",
    "read_resource_tool",
]

_log = logging.getLogger("steerloop.mcp")
#: The most resources ``list_resources`` gathers over all pages.
MAX_LISTED = 1_000
_URI_CHARS = 4_096


def _page(client: Client, cursor: str | None) -> Awaitable[types.ListResourcesResult]:
    return client.list_resources(cursor=cursor)


async def list_resources(connection: Connection) -> list[types.Resource]:
    """The server's resources, all pages (at most ``MAX_LISTED``)."""
    found: list[types.Resource] = []
    cursor: str | None = None
    for _ in range(100):
        page = await connection.run(None, partial(_page, cursor=cursor))
        found.extend(page.resources)
        cursor = page.next_cursor
        if not cursor or len(found) >= MAX_LISTED:
            break
    return found[:MAX_LISTED]


def _templates(client: Client) -> Awaitable[types.ListResourceTemplatesResult]:
    return client.list_resource_templates()


async def offers_resources(connection: Connection) -> bool:
    """Whether the server lists a resource or a resource template (first pages only)."""
    capabilities = await connection.capabilities()
    if capabilities.resources is None:
        return False
    try:
        if (await connection.run(None, partial(_page, cursor=None))).resources:
            return True
        return bool((await connection.run(None, _templates)).resource_templates)
    except Exception as exc:  # a server that declares resources and cannot list them
        _log.info("MCP server %r: resources not listed: %s", connection.server.name, exc)
        return False


def _read(client: Client, uri: str) -> Awaitable[types.ReadResourceResult]:
    return client.read_resource(uri, cache_mode="bypass")


async def read_resource(
    connection: Connection, uri: str, signal: Any = None
) -> tuple[tuple[Block, ...], bool]:
    """The blocks of resource ``uri`` and whether any of its contents is binary.

    Raises:
        ValueError: a URI that is empty or too long.
    """
    if not isinstance(uri, str) or not uri or len(uri) > _URI_CHARS:
        raise ValueError(f"a resource URI is a non-empty string of at most {_URI_CHARS} chars")
    result = await connection.run(signal, partial(_read, uri=uri))
    return resource_blocks(connection.server.name, result)


def resource_blocks(
    server: str, result: types.ReadResourceResult
) -> tuple[tuple[Block, ...], bool]:
    blocks: list[Block] = []
    binary = False
    for item in result.contents:
        mime = f" ({item.mime_type})" if item.mime_type else ""
        if isinstance(item, types.TextResourceContents):
            blocks.append(
                TextBlock(f"[resource {item.uri}{mime} of MCP server {server!r}]\n{item.text}")
            )
        else:
            binary = True
            size = len(item.blob) * 3 // 4
            blocks.append(
                TextBlock(
                    f"[resource {item.uri}{mime} of MCP server {server!r}: "
                    f"binary, about {size:,} bytes, not shown]"
                )
            )
    cut = (result.meta or {}).get(CUT_KEY)
    if isinstance(cut, str):
        blocks.append(TextBlock(cut))
    if not blocks:
        blocks.append(TextBlock(f"[resource of MCP server {server!r}: no contents]"))
    return tuple(blocks), binary


class _ReadArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")
    uri: str = Field(description="The URI of the resource, e.g. from a resource link.")


def read_resource_tool(name: str, connection: Connection, watch: ResourceWatch) -> Tool[Any]:
    """The read-only tool ``name`` reading a resource of ``connection``'s server."""
    server = connection.server.name

    async def execute(args: _ReadArgs, exec: ToolExec) -> ToolResult:
        try:
            blocks, _binary = await read_resource(connection, args.uri, exec.signal)
        except ValueError as exc:
            return ToolResult(content=str(exc), is_error=True, error=ToolError("INVALID_ARGS"))
        if isinstance(exec.agent, Agent):
            await watch.add(args.uri, exec.agent)
        return ToolResult(content=blocks)

    return define_tool(
        name=name,
        description=(
            f"Read a resource of the MCP server {server!r} by its URI (a resource link in "
            "one of its tool results names one). Read-only."
        ),
        parameters=_ReadArgs,
        execute=execute,
        concurrency_safe=True,
        timeout=connection.server.timeout,
    )


class ResourceWatch:
    """The agents that read each resource of one server, told (in their logs) of updates."""

    def __init__(self, connection: Connection, subscribe: Callable[[str], Awaitable[None]]) -> None:
        self.connection = connection
        self._subscribe = subscribe
        self._readers: dict[str, weakref.WeakSet[Agent]] = {}

    async def add(self, uri: str, agent: Agent) -> None:
        """Report updates of ``uri`` to ``agent``; the first reader subscribes."""
        readers = self._readers.get(uri)
        if readers is None:
            readers = self._readers[uri] = weakref.WeakSet()
            try:
                await self._subscribe(uri)
            except Exception as exc:  # no subscription: reads still work, updates go unseen
                _log.info(
                    "MCP server %r: no updates of %s: %s", self.connection.server.name, uri, exc
                )
        readers.add(agent)

    def updated(self, uri: str) -> None:
        """The server said ``uri`` changed: log it to each agent that read it (no re-read)."""
        record = MCPResourceUpdated(server=self.connection.server.name, uri=uri)
        for agent in list(self._readers.get(uri, ())):
            if agent.phase.disposed:
                continue
            try:
                agent.session.append(record, ignorable=True)
            except Exception as exc:  # a sealed session: it is gone
                _log.debug("resource update not logged to %r: %s", agent.id, exc)
