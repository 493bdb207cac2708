"""The MCP server of bench/mcp_calls.py: one ``echo`` tool, written with the SDK's server API."""

from mcp.server.mcpserver import MCPServer
from mcp_types import ToolAnnotations

server = MCPServer("bench")


def echo_text(text: str) -> str:
    """The function both sides of the bench run."""
    return text


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def echo(text: str) -> str:
    """Return the text."""
    return echo_text(text)


if __name__ == "__main__":
    server.run()
