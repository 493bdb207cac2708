"""What ``run`` and ``chat`` share: open the runtime, providers, tools, and the agent."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console

from .._runtime import Runtime
from ..agent._factory import AgentHandle
from ..agent._options import AgentOptions
from ..llm.config import ProviderConfig, ProviderConfigError, register_providers
from ..llm.retry import install_retry
from ..tools._define import ToolExec
from ..workspace import install_approval, workspace_tools
from ._mcp import install_configured_mcp
from ._settings import Settings

__all__ = ["Live", "open_live"]

Ask = Callable[[ToolExec], Awaitable[bool]]


@dataclass(slots=True)
class Live:
    """An open runtime with one agent over the chosen session."""

    rt: Runtime
    handle: AgentHandle
    provider: str
    model: str

    @property
    def agent(self) -> Any:
        return self.handle.agent


def resolve_route(settings: Settings, model: str | None) -> tuple[ProviderConfig, str, str]:
    """``(config, provider, model)``; raises ``ProviderConfigError`` with what to set."""
    config = ProviderConfig.load(settings.providers, model=settings.model)
    provider, name = config.resolve_model(model)
    return config, provider, name


async def open_live(
    stack: AsyncExitStack,
    settings: Settings,
    *,
    model: str | None,
    session_id: str | None,
    approve: str,
    ask: Ask | None,
    workspace: Path,
    setup: Callable[[Any], None] | None = None,
) -> Live:
    """Open everything ``run``/``chat`` need; ``stack`` closes it in reverse order."""
    try:
        config, provider, name = resolve_route(settings, model)
    except ProviderConfigError:
        raise
    rt = await Runtime.open(
        store=settings.store,
        max_parallel_tool_calls=settings.max_parallel_tool_calls,
        persona=settings.persona,
    )
    stack.push_async_callback(rt.close)
    register_providers(rt, config)
    install_retry(rt)
    for tool in workspace_tools(workspace):
        rt.tools.register(tool)
    install_approval(rt, approve, ask)  # type: ignore[arg-type]
    await install_configured_mcp(rt, settings.mcp_servers, _warn)
    options = AgentOptions(provider=provider, model=name)
    sid = session_id or f"chat-{time.strftime('%Y%m%d-%H%M%S')}"
    handle = await rt.agents.restore_or_create(session_id=sid, agent_options=options, setup=setup)
    return Live(rt, handle, provider, name)


def _warn(message: str) -> None:
    Console(stderr=True).print(f"[yellow]warning:[/yellow] {message}")
