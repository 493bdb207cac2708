"""``steerloop eval replay``: a recorded session run again with another model or prompt."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Literal

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from .._runtime import Runtime
from ..agent import AgentOptions
from ..evals import ReplayReport, replay
from ..llm.config import register_providers
from ..llm.retry import install_retry
from ..workspace import workspace_tools
from ._mcp import install_configured_mcp
from ._session_setup import output_cap, resolve_route
from ._settings import Settings

__all__ = ["report_text", "run_eval_replay"]


async def run_eval_replay(
    settings: Settings,
    session_id: str,
    *,
    model: str | None,
    from_turn: int,
    system_prompt: str | None,
    tools: Literal["recorded", "live"],
    max_tokens: int | None,
    console: Console,
) -> ReplayReport:
    """Replay ``session_id`` of the configured store with ``model``; a progress bar per turn
    on ``console``. With ``tools="live"`` the workspace tools of the working directory and
    the configured MCP servers are there for the calls that only read.

    Raises:
        ProviderConfigError: no usable provider/model (a ``ValueError``).
    """
    config, provider, name = resolve_route(settings, model)
    options = AgentOptions(
        provider=provider,
        model=name,
        max_tokens=output_cap(settings, config, provider, name, max_tokens),
    )
    async with Runtime.open(
        store=settings.store, max_parallel_tool_calls=settings.max_parallel_tool_calls
    ) as rt:
        register_providers(rt, config)
        install_retry(rt)
        if tools == "live":
            for tool in workspace_tools(Path.cwd()):
                rt.tools.register(tool)
            await install_configured_mcp(rt, settings.mcp_servers, _warn(console))
        bar = Progress(
            TextColumn(f"replaying {session_id} with {provider}/{name}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("turns"),
            TimeElapsedColumn(),
            console=console,
            transient=True,
        )
        with bar:
            task = bar.add_task("replay", total=None)

            def progress(done: int, total: int) -> None:
                bar.update(task, completed=done, total=total)

            return await replay(
                rt,
                session_id,
                agent_options=options,
                from_turn=from_turn,
                system_prompt=system_prompt,
                tools=tools,
                progress=progress,
            )


def _warn(console: Console) -> Callable[[str], None]:
    def warn(message: str) -> None:
        console.print(f"[yellow]warning:[/yellow] {message}")

    return warn


def report_text(report: ReplayReport, *, as_json: bool) -> str:
    """The report as the command writes it: JSON (indented) or Markdown."""
    if as_json:
        return json.dumps(report.to_json(), ensure_ascii=False, indent=2) + "\n"
    return report.to_markdown()
