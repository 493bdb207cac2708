"""``steerloop serve``: the HTTP + SSE service under uvicorn."""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ._session_setup import LiveOptions, agent_options, equip, resolve_route
from ._settings import Settings

if TYPE_CHECKING:
    from .._runtime import Runtime

__all__ = ["KEEP_ALIVE_SECONDS", "is_loopback", "no_token_note", "serve_main"]

log = logging.getLogger("steerloop.service")

KEEP_ALIVE_SECONDS = 75
"""How long an idle HTTP connection stays open (uvicorn's default is 5 s). A client that
reuses a connection just as the server closes it gets no answer (the keep-alive race: the
bench saw ``httpx.ReadError`` posting 50 at a time, httpx also expiring idle connections
after 5 s). A client whose own expiry is shorter (httpx 5 s, undici 4 s) never meets the
close, nor does a proxy in front with the common 60 s idle timeout."""


def is_loopback(host: str) -> bool:
    """Whether ``host`` binds only the loopback interface."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def no_token_note(token_env: str) -> str:
    """The startup line of a server without a token: what that allows, and how to change it."""
    return (
        f"steerloop serve: no API token ({token_env} is not set): any process on this "
        "machine can drive the agents, approvals included; set "
        f"{token_env}=<secret> to require 'Authorization: Bearer <secret>'"
    )


def default_profiles(
    settings: Settings, model: str | None = None, options: LiveOptions | None = None
) -> Any:
    """The ``default`` profile: the agent ``steerloop chat`` builds, by the same recipe
    (``agent_options`` and ``equip``: persona, ``max_tokens``, request options, tool pool,
    providers, workspace tools of the working directory, approval, the ``[mcp.servers]`` of
    ``steerloop.toml``). Approval ``ask`` is answered over HTTP
    (``POST /v1/sessions/{id}/approvals/{call_id}``).

    With no model configured (and no ``--model``) the profile has none: the server starts,
    says so in its log, and answers 503 ``NO_MODEL`` with what to configure.

    Raises:
        ValueError: ``--model`` names a provider that cannot serve (what to set).
    """
    from ..llm.config import ProviderConfigError

    # The app installs the retry policy (``create_app(retry=...)``): the recipe leaves it.
    options = options or LiveOptions(approve=settings.approve, retry=False)
    try:
        config, provider, name = resolve_route(settings, model)
    except ProviderConfigError as exc:
        if model is not None:
            raise
        log.warning("no model is configured, sessions are refused (503 NO_MODEL): %s", exc)
        route = None
    else:
        route = (config, provider, name)

    async def build(rt: Runtime) -> list[Any]:
        from ..agent._options import AgentOptions
        from ..service import Profile

        if route is None:
            return [Profile(name="default", options=AgentOptions())]
        config, provider, name = route
        await equip(rt, settings, config, options, ask=None, workspace=Path.cwd(), warn=log.warning)
        agent = agent_options(settings, config, provider, name, options)
        return [Profile(name="default", options=agent)]

    return build


def serve_main(
    settings: Settings,
    *,
    host: str,
    port: int,
    role: str,
    profiles: str | None,
    token_env: str,
    idle_unload: float,
    retry: bool,
    drain_timeout: float = 10.0,
    capacity: int = 100,
    allowed_hosts: Sequence[str] = (),
    allowed_origins: Sequence[str] = (),
    limits: Any = None,
    model: str | None = None,
    call: Mapping[str, Any] | None = None,
    attachments: Mapping[str, int] | None = None,
) -> None:
    """Run the service until interrupted; raises ``ValueError`` for a refused configuration."""
    import uvicorn

    from .._media import DEFAULT_LIMITS
    from ..service import create_app
    from ..service._hostcheck import WILDCARD_BINDS
    from ..service._profile import load_profiles
    from ..service._protocol import edge_protocol
    from ..service._throttled_log import ThrottledLog, quiet_resource_errors

    token = os.environ.get(token_env) or None
    if token is None and not is_loopback(host):
        raise ValueError(
            f"refusing to bind {host} without a token: set {token_env} (or bind 127.0.0.1)"
        )
    if role not in ("all", "api", "worker"):
        raise ValueError(f"--role must be all, api or worker, not {role!r}")
    if idle_unload <= 0:
        raise ValueError("--idle-unload must be > 0")
    if capacity < 1:
        raise ValueError("--capacity must be >= 1")
    if drain_timeout < 0:
        raise ValueError("--drain-timeout must be >= 0")
    if profiles is None:
        options = LiveOptions(approve=settings.approve, retry=False, call=call or {})
        found: Any = default_profiles(settings, model, options)
    else:
        if model is not None or call:
            raise ValueError(
                "--model, --temperature and --set shape the default profile: not with --profiles"
            )
        spec = profiles
        sys.path.insert(0, os.getcwd())

        async def found(rt: Runtime) -> Any:
            return list((await load_profiles(spec, rt)).values())

    names = [*allowed_hosts, *([] if host in WILDCARD_BINDS else [host])]
    caps = dict(attachments or {})
    app = create_app(
        settings.store,
        found,
        role,  # type: ignore[arg-type]
        token=token,
        idle_unload=idle_unload,
        retry=retry,
        drain_timeout=drain_timeout,
        capacity=capacity,
        allowed_hosts=names,
        allowed_origins=allowed_origins,
        limits=limits,
        max_attachment_bytes=caps.get("max_attachment_bytes", DEFAULT_LIMITS.block_bytes),
        max_message_attachment_bytes=caps.get(
            "max_message_attachment_bytes", DEFAULT_LIMITS.message_bytes
        ),
    )
    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level="warning",
        lifespan="on",
        timeout_keep_alive=KEEP_ALIVE_SECONDS,
        http=edge_protocol(app.state.limits),
    )
    server = uvicorn.Server(config)

    async def announce() -> None:
        while not server.started:
            await asyncio.sleep(0.02)
        bound = server.servers[0].sockets[0].getsockname()
        print(f"steerloop serve: listening on http://{host}:{bound[1]}", flush=True)
        if token is None:
            print(no_token_note(token_env), flush=True)

    async def main() -> None:
        quiet_resource_errors(asyncio.get_running_loop(), ThrottledLog(log))
        watcher = asyncio.create_task(announce())
        try:
            await server.serve()
        finally:
            watcher.cancel()  # our own printing task

    try:
        asyncio.run(main())
    except SystemExit:  # uvicorn exits this way when the app's startup fails
        raise ValueError("the service did not start (see the log above)") from None
