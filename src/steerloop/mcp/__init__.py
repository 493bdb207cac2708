"""MCP servers as a tool source, over the official ``mcp`` SDK (extra ``steerloop[mcp]``)."""

from ._config import ENV_ALLOW_LIST, MCPServer
from ._errors import MCPConnectionError, MCPLimitError
from ._install import MCPTools, install_mcp, installed_mcp, result_from_mcp
from ._limits import MCPLimits
from ._oauth import MCPOAuth

__all__ = [
    "ENV_ALLOW_LIST",
    "MCPConnectionError",
    "MCPLimitError",
    "MCPLimits",
    "MCPOAuth",
    "MCPServer",
    "MCPTools",
    "install_mcp",
    "installed_mcp",
    "result_from_mcp",
]
