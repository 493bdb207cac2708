"""What ``run`` and ``chat`` share: open the runtime, providers, tools, and the agent."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console

from .._runtime import Runtime
from ..agent._factory import AgentHandle
from ..agent._options import AgentOptions
from ..llm.config import ProviderConfig, register_providers
from ..llm.retry import install_retry
from ..tools._define import ToolExec
from ..workspace import install_approval, workspace_tools
from ._mcp import install_configured_mcp
from ._naming import new_session_id
from ._settings import Settings

__all__ = ["Live", "LiveOptions", "open_live", "output_cap"]

Ask = Callable[[ToolExec], Awaitable[bool]]
#: ``tool/approval-decided.by`` of an answer typed in the terminal.
APPROVAL_BY = "terminal"


@dataclass(frozen=True, slots=True, kw_only=True)
class LiveOptions:
    """The command-line switches ``run`` and ``chat`` share."""

    approve: str = "ask"
    max_tokens: int | None = None  # --max-tokens; None: the config's
    tools: bool = True  # False: --no-tools (no workspace tools)
    retry: bool = True  # False: --no-retry (no retry policy)
    prefix: str = "chat"  # of a generated session id


@dataclass(slots=True)
class Live:
    """An open runtime with one agent over the chosen session."""

    rt: Runtime
    handle: AgentHandle
    provider: str
    model: str
    config: ProviderConfig
    mcp: dict[str, Any] = field(default_factory=dict)  # server name -> MCPTools or why not

    @property
    def agent(self) -> Any:
        return self.handle.agent


def resolve_route(settings: Settings, model: str | None) -> tuple[ProviderConfig, str, str]:
    """``(config, provider, model)``; raises ``ProviderConfigError`` with what to set."""
    config = ProviderConfig.load(settings.providers, model=settings.model)
    provider, name = config.resolve_model(model)
    return config, provider, name


def output_cap(
    settings: Settings, config: ProviderConfig, provider: str, model: str, flag: int | None
) -> int | None:
    """The ``max_tokens`` of each request to ``provider/model``.

    ``--max-tokens`` (else ``max_tokens`` of the config file) caps the output; a model's
    ``max_output_tokens`` (``[providers.P.models."M"]``) is the most it may produce, so the
    smaller of the two is sent, and the model's own figure when no cap is given.
    """
    cap = flag if flag is not None else settings.max_tokens
    spec = config.providers.get(provider)
    info = spec.models.get(model) if spec is not None else None
    ceiling = info.max_output_tokens if info is not None else None
    if cap is None or ceiling is None:
        return cap if ceiling is None else ceiling
    return min(cap, ceiling)


async def open_live(
    stack: AsyncExitStack,
    settings: Settings,
    *,
    model: str | None,
    session_id: str | None,
    options: LiveOptions,
    ask: Ask | None,
    workspace: Path,
    setup: Callable[[Any], None] | None = None,
) -> Live:
    """Open everything ``run``/``chat`` need; ``stack`` closes it in reverse order.

    Raises:
        ProviderConfigError: no usable provider/model (a ``ValueError`` naming what to set).
    """
    config, provider, name = resolve_route(settings, model)
    rt = await Runtime.open(
        store=settings.store,
        max_parallel_tool_calls=settings.max_parallel_tool_calls,
        persona=settings.persona,
    )
    stack.push_async_callback(rt.close)
    register_providers(rt, config)
    if options.retry:
        # Each retry is its own request, settled in the log as an ``assistant/attempt``.
        install_retry(rt)
    if options.tools:
        for tool in workspace_tools(workspace):
            rt.tools.register(tool)
    # "ask": the prompt answers through agent.decide_approval, so the log records each
    # request and its decision (tool/approval-requested, tool/approval-decided by terminal).
    install_approval(rt, options.approve, ask, by=APPROVAL_BY)  # type: ignore[arg-type]
    mcp = await install_configured_mcp(rt, settings.mcp_servers, _warn, roots=[workspace])
    agent_options = AgentOptions(
        provider=provider,
        model=name,
        max_tokens=output_cap(settings, config, provider, name, options.max_tokens),
    )
    sid = session_id or new_session_id(options.prefix)
    handle = await rt.agents.restore_or_create(
        session_id=sid, agent_options=agent_options, setup=setup
    )
    return Live(rt, handle, provider, name, config, mcp)


def _warn(message: str) -> None:
    Console(stderr=True).print(f"[yellow]warning:[/yellow] {message}")
