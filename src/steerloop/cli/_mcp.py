"""MCP servers on the command line: ``[mcp.servers.NAME]`` in ``steerloop.toml``, their
installation for ``run``/``chat``, and ``steerloop mcp ls``.

The ``mcp`` SDK is an optional extra: nothing here imports it until a server is configured.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

import typer

from ._mcp_table import build_server, parse_mcp_table

if TYPE_CHECKING:
    from .._runtime import Runtime
    from ..mcp import MCPTools

__all__ = ["install_configured_mcp", "mcp_app", "parse_mcp_table"]

mcp_app = typer.Typer(help="MCP servers of steerloop.toml.", no_args_is_help=True)


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
    *,
    roots: Sequence[Path] = (),
) -> dict[str, MCPTools | str]:
    """Install each configured server on ``rt``; one that fails is a warning, not an error.

    Returns each server's installation, or the reason it is not installed. The
    installations close with ``rt.close()``. ``roots`` are advertised to every server.
    """
    if not servers:
        return {}
    import asyncio

    try:
        from ..mcp import install_mcp
    except ImportError:
        reason = "the mcp extra is not installed (pip install 'steerloop[mcp]')"
        warn(f"MCP servers configured but not started: {reason}")
        return dict.fromkeys(servers, reason)

    async def one(name: str, entry: Mapping[str, Any]) -> MCPTools | str:
        log = _stderr_log(name) if "command" in entry else None
        try:
            return await install_mcp(rt, [build_server(name, entry)], errlog=log, roots=roots)
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
    import asyncio

    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    from ._settings import load_settings

    console = Console()
    try:
        settings = load_settings()
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None
    if not settings.mcp_servers:
        # escaped: rich would read ``[mcp.servers.NAME]`` as a style tag and drop it
        console.print(escape("no MCP servers configured: add [mcp.servers.NAME] to steerloop.toml"))
        return
    rows = asyncio.run(_list(settings.mcp_servers))
    table = Table("server", "transport", "status", "tools")
    for name, transport, status, tools in rows:
        table.add_row(escape(name), transport, escape(status), escape("\n".join(tools)))
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
