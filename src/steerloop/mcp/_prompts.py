"""A server's prompts: listed, and expanded into the user message they stand for.

``/server:prompt args…`` in ``steerloop chat`` names one; its arguments are ``key=value``
words, or positional words for the prompt's arguments in order (the last takes the rest of
the line). The expansion is one user message whose ``source.extra["mcp_prompt"]`` records
the server, the prompt and the arguments it came from.
"""

from __future__ import annotations

import shlex
from collections.abc import Awaitable, Sequence
from functools import partial

import mcp_types as types
from mcp.client import Client

from ..ids import new_id
from ..messages import Block, MessageSource, TextBlock, UserMessage
from ._connection import Connection
from ._limits import CUT_KEY

__all__ = ["expand_prompt", "list_prompts", "parse_prompt_arguments"]


def _page(client: Client, cursor: str | None) -> Awaitable[types.ListPromptsResult]:
    return client.list_prompts(cursor=cursor)


async def list_prompts(connection: Connection) -> list[types.Prompt]:
    """The server's prompts, all pages (bounded by ``max_tools`` per page)."""
    found: list[types.Prompt] = []
    cursor: str | None = None
    for _ in range(100):
        page = await connection.run(None, partial(_page, cursor=cursor))
        found.extend(page.prompts)
        cursor = page.next_cursor
        if not cursor or len(found) >= connection.server.limits.max_tools:
            break
    return found[: connection.server.limits.max_tools]


def parse_prompt_arguments(prompt: types.Prompt, text: str) -> dict[str, str]:
    """The arguments of ``prompt`` written on a command line.

    Raises:
        ValueError: unbalanced quotes, an unknown name, or a required argument missing.
    """
    declared = list(prompt.arguments or ())
    names = [a.name for a in declared]
    words = shlex.split(text)
    out: dict[str, str] = {}
    positional: list[str] = []
    for word in words:
        key, sep, value = word.partition("=")
        if sep and key in names:
            out[key] = value
        else:
            positional.append(word)
    free = [n for n in names if n not in out]
    if positional and not free:
        raise ValueError(f"prompt {prompt.name!r} takes no more arguments: {' '.join(positional)}")
    for index, name in enumerate(free):
        if index >= len(positional):
            break
        last = index == len(free) - 1
        out[name] = " ".join(positional[index:]) if last else positional[index]
    missing = [a.name for a in declared if a.required and a.name not in out]
    if missing:
        raise ValueError(f"prompt {prompt.name!r} needs {', '.join(missing)}")
    return out


def _blocks(server: str, message: types.PromptMessage) -> Sequence[Block]:
    content = message.content
    prefix = "" if message.role == "user" else f"[{message.role}] "
    if isinstance(content, types.TextContent):
        return [TextBlock(prefix + content.text)]
    if isinstance(content, types.EmbeddedResource):
        resource = content.resource
        if isinstance(resource, types.TextResourceContents):
            return [TextBlock(f"{prefix}[resource {resource.uri}]\n{resource.text}")]
        return [TextBlock(f"{prefix}[binary resource {resource.uri}: not shown]")]
    if isinstance(content, types.ResourceLink):
        return [TextBlock(f"{prefix}[resource link {content.uri} of MCP server {server!r}]")]
    return [TextBlock(f"{prefix}[{content.type} content: not shown]")]


def _get(client: Client, name: str, arguments: dict[str, str]) -> Awaitable[types.GetPromptResult]:
    return client.get_prompt(name, arguments)


async def expand_prompt(
    connection: Connection, name: str, arguments: dict[str, str]
) -> UserMessage:
    """Prompt ``name`` of the server as one user message."""
    server = connection.server.name
    result = await connection.run(None, partial(_get, name=name, arguments=arguments))
    blocks: list[Block] = []
    for message in result.messages:
        blocks.extend(_blocks(server, message))
    cut = (result.meta or {}).get(CUT_KEY)
    if isinstance(cut, str):
        blocks.append(TextBlock(cut))
    if not blocks:
        raise ValueError(f"prompt {name!r} of MCP server {server!r} expanded to nothing")
    source = MessageSource(
        kind="user",
        extra={"mcp_prompt": {"server": server, "name": name, "arguments": dict(arguments)}},
    )
    return UserMessage(id=new_id("msg"), content=tuple(blocks), source=source)
