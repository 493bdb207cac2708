"""The change stream of a 2026-07-28 connection (``subscriptions/listen``).

On 2026-07-28 there is no ``resources/subscribe``: a client names what it wants to hear of
in one ``subscriptions/listen`` request (tool-list changes, the URIs of resources to watch),
the server acknowledges the subset it honours, and its events arrive on that stream. One
``Listener`` per connection holds that stream; a resource watched later opens it again with
the larger filter (a subscription has no replay, so what changed in between is not heard
of: the watch is for updates after it is acknowledged). Each ``resources/updated`` goes to
``on_updated`` (logged to the agents that read it: nothing is re-read silently).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

import anyio
from mcp.client import Client
from mcp.client.subscriptions import ResourceUpdated, ToolsListChanged

__all__ = ["SUBSCRIPTION_ID", "Listener"]

#: The ``_meta`` key that ties a notification to its ``subscriptions/listen`` stream.
SUBSCRIPTION_ID = "io.modelcontextprotocol/subscriptionId"

_log = logging.getLogger("steerloop.mcp")


class Listener:
    """One connection's ``subscriptions/listen`` stream (see the module)."""

    def __init__(
        self,
        server: str,
        on_tools_changed: Callable[[], None],
        on_updated: Callable[[str], None],
    ) -> None:
        self._server = server
        self._on_tools_changed = on_tools_changed
        self._on_updated = on_updated
        self._uris: list[str] = []
        self._changed = asyncio.Event()
        self._acks: list[tuple[str, asyncio.Future[bool]]] = []

    async def watch(self, uri: str, timeout: float) -> None:
        """Add ``uri`` to the stream's filter and wait for the server's acknowledgment.

        Raises:
            ValueError: the server did not honour the subscription.
            TimeoutError: no acknowledgment within ``timeout`` seconds.
        """
        if uri not in self._uris:
            self._uris.append(uri)
        acked: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._acks.append((uri, acked))
        self._changed.set()
        try:
            async with asyncio.timeout(timeout):
                honoured = await acked
        except BaseException:
            self._forget(uri)
            raise
        if not honoured:
            self._forget(uri)
            raise ValueError("the server does not honour a subscription to it")

    def _forget(self, uri: str) -> None:
        if uri in self._uris:
            self._uris.remove(uri)

    async def run(self, client: Client, tools: bool) -> None:
        """Hold the stream while the connection lives (in its task group); ``tools``: the
        server announces tool-list changes."""
        while True:
            self._changed.clear()
            uris = tuple(self._uris)
            if not tools and not uris:
                await self._changed.wait()
                continue
            try:
                if not await self._listen(client, tools, uris):
                    return  # the server ended the stream: the next connection listens again
            except Exception as exc:
                _log.debug("MCP server %r: subscription ended: %s", self._server, exc)
                self._settle(set(), everything=True)
                return

    async def _listen(self, client: Client, tools: bool, uris: tuple[str, ...]) -> bool:
        """One stream with this filter; ``True`` when it ended for a larger filter."""
        async with client.listen(tools_list_changed=tools, resource_subscriptions=uris) as sub:
            self._settle(set(sub.honored.resource_subscriptions or ()), upto=uris)
            refilter = False
            async with anyio.create_task_group() as group:

                async def changed() -> None:
                    nonlocal refilter
                    await self._changed.wait()
                    refilter = True
                    group.cancel_scope.cancel()

                group.start_soon(changed)
                async for event in sub:
                    if isinstance(event, ToolsListChanged):
                        self._on_tools_changed()
                    elif isinstance(event, ResourceUpdated):
                        self._on_updated(event.uri)
                group.cancel_scope.cancel()
            return refilter

    def _settle(
        self, honored: set[str], upto: tuple[str, ...] = (), everything: bool = False
    ) -> None:
        """Answer the watches the acknowledgment covers (those of a URI in ``upto``)."""
        left = []
        for uri, acked in self._acks:
            if acked.done():
                continue
            if everything or uri in upto:
                acked.set_result(uri in honored)
            else:
                left.append((uri, acked))
        self._acks = left
