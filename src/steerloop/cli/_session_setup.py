"""The agent ``run``, ``chat`` and ``serve`` build: one recipe from ``steerloop.toml``.

``agent_options`` is the route and request of the agent (model, ``max_tokens``, request
options); ``equip`` is what its runtime carries (persona, tool pool, providers, retry,
workspace tools, approval, MCP servers). ``open_live`` (``run``, ``chat``) and the ``serve``
default profile both call them, so a setting reaches a served agent exactly as a chatted one.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ._naming import new_session_id
from ._settings import Settings

if TYPE_CHECKING:
    from .._runtime import Runtime
    from ..agent._factory import AgentHandle
    from ..agent._options import AgentOptions
    from ..llm.config import ProviderConfig
    from ..tools._define import ToolExec

__all__ = ["Live", "LiveOptions", "agent_options", "equip", "open_live", "output_cap"]

Ask = Callable[["ToolExec"], Awaitable[bool]]
#: ``tool/approval-decided.by`` of an answer typed in the terminal.
APPROVAL_BY = "terminal"


@dataclass(frozen=True, slots=True, kw_only=True)
class LiveOptions:
    """The command-line switches ``run``, ``chat`` and ``serve`` share."""

    approve: str = "ask"
    max_tokens: int | None = None  # --max-tokens; None: the config's
    tools: bool = True  # False: --no-tools (no workspace tools)
    retry: bool = True  # False: --no-retry (no retry policy)
    prefix: str = "chat"  # of a generated session id
    #: ``--temperature`` and ``--set KEY=VALUE``: request options over the config's.
    call: Mapping[str, Any] = field(default_factory=dict)


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
    from ..llm.config import ProviderConfig

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


def agent_options(
    settings: Settings, config: ProviderConfig, provider: str, model: str, options: LiveOptions
) -> AgentOptions:
    """The agent's options for ``provider/model``: its output cap and its request options
    (``[request]``, then the provider's and the model's tables, then the command line's)."""
    from ..agent._options import AgentOptions

    call = {**settings.request, **config.request_options(provider, model), **options.call}
    return AgentOptions(
        provider=provider,
        model=model,
        max_tokens=output_cap(settings, config, provider, model, options.max_tokens),
        call=call or None,
    )


async def equip(
    rt: Runtime,
    settings: Settings,
    config: ProviderConfig,
    options: LiveOptions,
    *,
    ask: Ask | None,
    workspace: Path,
    warn: Callable[[str], None],
) -> dict[str, Any]:
    """Give ``rt`` what the agent runs with: the persona and tool pool of the config file,
    its providers, the retry policy, workspace tools, approval (``ask`` answers in-process;
    without it a served session answers over HTTP) and the configured MCP servers (rooted
    at ``workspace``). Returns each MCP server's installation, or why it is not installed."""
    from ..llm.config import register_providers
    from ..llm.retry import install_retry
    from ..workspace import install_approval, workspace_tools
    from ._mcp import install_configured_mcp

    rt.system_prompt.persona = settings.persona
    rt.max_parallel_tool_calls = settings.max_parallel_tool_calls
    register_providers(rt, config)
    if options.retry:
        # Each retry is its own request, settled in the log as an ``assistant/attempt``.
        install_retry(rt)
    if options.tools:
        for tool in workspace_tools(workspace):
            rt.tools.register(tool)
    # "ask": the log records each request and its decision (tool/approval-requested,
    # tool/approval-decided by the terminal, or by whoever answers over HTTP).
    by = APPROVAL_BY if ask is not None else "user"
    install_approval(rt, options.approve, ask, by=by)  # type: ignore[arg-type]
    return await install_configured_mcp(rt, settings.mcp_servers, warn, roots=[workspace])


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
    from .._runtime import Runtime

    config, provider, name = resolve_route(settings, model)
    rt = await Runtime.open(store=settings.store)
    stack.push_async_callback(rt.close)
    mcp = await equip(rt, settings, config, options, ask=ask, workspace=workspace, warn=_warn)
    sid = session_id or new_session_id(options.prefix)
    handle = await rt.agents.restore_or_create(
        session_id=sid,
        agent_options=agent_options(settings, config, provider, name, options),
        setup=setup,
    )
    return Live(rt, handle, provider, name, config, mcp)


def _warn(message: str) -> None:
    from rich.console import Console

    Console(stderr=True).print(f"[yellow]warning:[/yellow] {message}")
