"""MCP tool results as steerloop's, and the names of an installed server's tools."""

from __future__ import annotations

import dataclasses

import mcp_types as types

from ..messages import Block, TextBlock
from ..tools import ToolError, ToolResult
from ._content import block_from_mcp
from ._limits import CUT_KEY

__all__ = ["READ_RESOURCE", "result_from_mcp", "tool_name", "with_cut_note"]


#: The tool name (after the server's prefix) of the resource reader a server gets.
READ_RESOURCE = "read_resource"


def tool_name(server: str, tool: str) -> str:
    return f"{server}__{tool}"


def with_cut_note(result: ToolResult, mcp_result: types.CallToolResult) -> ToolResult:
    """``result`` with the one-line note of what the bounds cut of ``mcp_result``, if any."""
    note = (mcp_result.meta or {}).get(CUT_KEY)
    if not isinstance(note, str):
        return result
    content = result.content
    blocks = [TextBlock(content)] if isinstance(content, str) else list(content)
    return dataclasses.replace(result, content=[*blocks, TextBlock(note)])


def result_from_mcp(result: types.CallToolResult) -> ToolResult:
    """An MCP tool result as a steerloop one (``block_from_mcp`` for each item)."""
    blocks: list[Block] = [block_from_mcp(item) for item in result.content]
    meta = None
    if result.structured_content is not None:
        meta = {"structured_content": result.structured_content}
    if result.is_error:
        return ToolResult(
            content=blocks or "the tool reported an error",
            is_error=True,
            error=ToolError("TOOL_FAILED"),
            meta=meta,
        )
    return ToolResult(content=blocks, meta=meta)
