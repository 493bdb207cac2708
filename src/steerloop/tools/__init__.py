"""Tools: definitions, the registry and the execute pipeline."""

from ._define import PostExecute, Tool, ToolDecision, ToolError, ToolExec, ToolResult, define_tool
from ._function import tool
from ._hooks import ApprovalHookPayload, ToolHookPayload
from ._runtime import ToolPipeline, ToolRegistry, error_result

__all__ = [
    "ApprovalHookPayload",
    "PostExecute",
    "Tool",
    "ToolDecision",
    "ToolError",
    "ToolExec",
    "ToolHookPayload",
    "ToolPipeline",
    "ToolRegistry",
    "ToolResult",
    "define_tool",
    "error_result",
    "tool",
]
