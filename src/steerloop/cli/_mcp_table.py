"""The ``[mcp.servers.NAME]`` tables of ``steerloop.toml``: checked, and built into servers.

Apart from ``_mcp`` (the commands) so ``_settings`` can check the tables without importing
the commands that load the settings.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..mcp import MCPOAuth, MCPServer

__all__ = ["build_server", "parse_mcp_table"]

_COMMON_KEYS = {"timeout", "sampling", "limits"}
_STDIO_KEYS = {"command", "args", "env", "cwd", *_COMMON_KEYS}
_HTTP_KEYS = {"url", "headers", "oauth", *_COMMON_KEYS}
#: ``oauth = true`` (the system browser, a dynamic registration) or a table of these.
_OAUTH_KEYS = {
    "redirect_uri",
    "client_name",
    "scope",
    "client_id",
    "client_secret",
    "token_endpoint_auth_method",
    "client_metadata_url",
}


def parse_mcp_table(path: Path, table: object) -> dict[str, dict[str, Any]]:
    """The ``[mcp.servers.NAME]`` tables of a config file, checked; raises ``ValueError``."""
    if table is None:
        return {}
    if not isinstance(table, dict) or set(table) - {"servers"}:
        raise ValueError(f"{path}: [mcp] holds only [mcp.servers.NAME] tables")
    servers = table.get("servers", {})
    if not isinstance(servers, dict):
        raise ValueError(f"{path}: [mcp.servers] must be a table of servers")
    out: dict[str, dict[str, Any]] = {}
    for name, entry in servers.items():
        where = f"{path}: [mcp.servers.{name}]"
        if not isinstance(entry, dict):
            raise ValueError(f"{where} must be a table")
        if ("command" in entry) == ("url" in entry):
            raise ValueError(f"{where} needs exactly one of command (stdio) or url (HTTP)")
        allowed = _STDIO_KEYS if "command" in entry else _HTTP_KEYS
        unknown = set(entry) - allowed
        if unknown:
            raise ValueError(f"{where}: unknown key(s) {', '.join(sorted(unknown))}")
        try:
            build_server(name, entry)  # the same checks the library makes
        except (TypeError, ValueError) as exc:
            raise ValueError(f"{where}: {exc}") from None
        out[name] = dict(entry)
    return out


def build_server(name: str, entry: Mapping[str, Any]) -> MCPServer:
    # steerloop.mcp._config needs no SDK; importing the package would load it.
    from ..mcp._config import MCPServer
    from ..mcp._limits import MCPLimits

    timeout = entry.get("timeout", 60.0)
    limits = entry.get("limits")
    if limits is not None:
        if not isinstance(limits, dict):
            raise ValueError("limits must be a table of max_result_bytes, max_blocks, ...")
        limits = MCPLimits(**limits)  # an unknown key is a TypeError, reported as such
    common: dict[str, Any] = {
        "timeout": timeout,
        "limits": limits,
        "sampling": entry.get("sampling", "deny"),
    }
    if "command" in entry:
        args = entry.get("args", [])
        if not isinstance(args, list):
            raise ValueError("args must be a list of strings")
        return MCPServer.stdio(
            name,
            command=entry["command"],
            args=args,
            env=entry.get("env"),
            cwd=entry.get("cwd"),
            **common,
        )
    return MCPServer.http(
        name,
        url=entry["url"],
        headers=entry.get("headers"),
        oauth=_oauth(entry.get("oauth", False)),
        **common,
    )


def _oauth(value: object) -> MCPOAuth | None:
    from ..mcp._oauth import MCPOAuth

    if value is False:
        return None
    if value is True:
        return MCPOAuth()
    if not isinstance(value, dict):
        raise ValueError("oauth must be true, false or a table")
    unknown = set(value) - _OAUTH_KEYS
    if unknown:
        raise ValueError(f"oauth: unknown key(s) {', '.join(sorted(unknown))}")
    return MCPOAuth(**value)
