"""MCP servers on the command line: ``[mcp.servers.NAME]`` in ``steerloop.toml``, their
installation for ``run``/``chat``, and ``steerloop mcp ls``.

The ``mcp`` SDK is an optional extra: nothing here imports it until a server is configured.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

import typer
from rich.console import Console
from rich.table import Table

if TYPE_CHECKING:
    from .._runtime import Runtime
    from ..mcp import MCPServer, MCPTools

__all__ = ["install_configured_mcp", "mcp_app", "parse_mcp_table"]

_STDIO_KEYS = {"command", "args", "env", "cwd", "timeout"}
_HTTP_KEYS = {"url", "headers", "timeout"}

mcp_app = typer.Typer(help="MCP servers of steerloop.toml.", no_args_is_help=True)


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
            _build(name, entry)  # the same checks the library makes
        except (TypeError, ValueError) as exc:
            raise ValueError(f"{where}: {exc}") from None
        out[name] = dict(entry)
    return out


def _build(name: str, entry: Mapping[str, Any]) -> MCPServer:
    # steerloop.mcp._config needs no SDK; importing the package would load it.
    from ..mcp._config import MCPServer

    timeout = entry.get("timeout", 60.0)
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
            timeout=timeout,
        )
    return MCPServer.http(name, url=entry["url"], headers=entry.get("headers"), timeout=timeout)


def _stderr_log(name: str) -> TextIO:
    """Where a stdio server's stderr goes: a file, so it never writes over the terminal."""
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    directory = Path(base) / "steerloop" / "mcp"
    directory.mkdir(parents=True, exist_ok=True)
    return (directory / f"{name}.stderr.log").open("a", encoding="utf-8")


async def install_configured_mcp(
    rt: Runtime,
    servers: Mapping[str, Mapping[str, Any]],
    warn: Callable[[str], None],
) -> dict[str, MCPTools | str]:
    """Install each configured server on ``rt``; one that fails is a warning, not an error.

    Returns each server's installation, or the reason it is not installed. The
    installations close with ``rt.close()``.
    """
    if not servers:
        return {}
    try:
        from ..mcp import install_mcp
    except ImportError:
        reason = "the mcp extra is not installed (pip install 'steerloop[mcp]')"
        warn(f"MCP servers configured but not started: {reason}")
        return dict.fromkeys(servers, reason)

    async def one(name: str, entry: Mapping[str, Any]) -> MCPTools | str:
        log = _stderr_log(name) if "command" in entry else None
        try:
            return await install_mcp(rt, [_build(name, entry)], errlog=log)
        except Exception as exc:
            warn(f"MCP server {name!r} not started: {exc}")
            return str(exc)
        finally:
            if log is not None:
                log.close()  # the server process holds its own copy of the descriptor

    done = await asyncio.gather(*(one(n, e) for n, e in servers.items()))
    return dict(zip(servers, done, strict=True))


@mcp_app.command("ls")
def ls() -> None:
    """Start each configured server, then list its status and tools."""
    from ._settings import load_settings

    console = Console()
    try:
        settings = load_settings()
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None
    if not settings.mcp_servers:
        console.print("no MCP servers configured ([mcp.servers.NAME] in steerloop.toml)")
        return
    rows = asyncio.run(_list(settings.mcp_servers))
    table = Table("server", "transport", "status", "tools")
    for name, transport, status, tools in rows:
        table.add_row(name, transport, status, "\n".join(tools))
    console.print(table)


async def _list(
    servers: Mapping[str, Mapping[str, Any]],
) -> list[tuple[str, str, str, tuple[str, ...]]]:
    from .._runtime import Runtime

    rt = await Runtime.open()
    try:
        installed = await install_configured_mcp(rt, servers, lambda _message: None)
        rows: list[tuple[str, str, str, tuple[str, ...]]] = []
        for name, entry in servers.items():
            transport = "stdio" if "command" in entry else "http"
            got = installed[name]
            if isinstance(got, str):
                rows.append((name, transport, f"failed: {got}", ()))
            else:
                rows.append((name, transport, got.status(name), got.tools(name)))
        return rows
    finally:
        await rt.close()
