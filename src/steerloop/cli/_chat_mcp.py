"""The MCP servers in ``steerloop chat``: ``/server:prompt args…`` expands a server's prompt
into the message sent, and ``@server:uri`` in a message attaches that resource to it.

An attached resource's contents follow the typed text in the same user message, whose
``source.extra["mcp_resources"]`` names what was attached; the server's later
``resources/updated`` for it is logged to the session (nothing is re-read).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from .._ids import new_id
from ..messages import Block, MessageSource, TextBlock, UserMessage

if TYPE_CHECKING:
    from ..mcp import MCPTools

__all__ = ["McpChat"]

_ATTACHMENT = re.compile(r"(?<!\S)@([A-Za-z0-9_-]{1,48}):(\S+)")


class McpChat:
    """The installed servers, as the chat uses them."""

    def __init__(self, installed: Mapping[str, MCPTools | str]) -> None:
        self.servers = {
            name: tools for name, tools in installed.items() if not isinstance(tools, str)
        }

    def prompt_target(self, command: str) -> tuple[str, str] | None:
        """``(server, prompt)`` when ``command`` (``/server:prompt``) names an installed server."""
        server, sep, prompt = command[1:].partition(":")
        if not sep or not prompt or server not in self.servers:
            return None
        return server, prompt

    async def prompt(self, server: str, prompt: str, arguments: str) -> UserMessage:
        """Prompt ``prompt`` of ``server`` as the message to send.

        Raises:
            ValueError: no such prompt, or arguments it does not take.
        """
        return await self.servers[server].prompt_message(server, prompt, arguments)

    async def prompts(self) -> list[tuple[str, str]]:
        """``(/server:prompt, description)`` of every prompt of every server."""
        rows: list[tuple[str, str]] = []
        for server, tools in self.servers.items():
            try:
                listed = await tools.prompts(server)
            except Exception:  # a server without prompts, or one that is down
                continue
            for prompt in listed:
                args = " ".join(
                    a.name if a.required else f"[{a.name}]" for a in prompt.arguments or ()
                )
                rows.append((f"/{server}:{prompt.name} {args}".rstrip(), prompt.description or ""))
        return rows

    async def attach(self, line: str, agent: Any) -> UserMessage | None:
        """The message for ``line`` with each ``@server:uri`` it names attached, or ``None``
        when it names none.

        Raises:
            ValueError: a resource that cannot be read (its server's error).
        """
        found = [
            (m.group(1), m.group(2))
            for m in _ATTACHMENT.finditer(line)
            if m.group(1) in self.servers
        ]
        if not found:
            return None
        blocks: list[Block] = [TextBlock(line)]
        for server, uri in found:
            try:
                blocks.extend(await self.servers[server].read_resource(server, uri, agent=agent))
            except Exception as exc:
                raise ValueError(f"@{server}:{uri} could not be read: {exc}") from exc
        attached = [{"server": server, "uri": uri} for server, uri in found]
        source = MessageSource(kind="user", extra={"mcp_resources": attached})
        return UserMessage(id=new_id("msg"), content=tuple(blocks), source=source)
