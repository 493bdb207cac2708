"""Server configuration: how to reach one MCP server, and what its process may see."""

from __future__ import annotations

import math
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal, get_args

from ._limits import MCPLimits, check_limits
from ._oauth import MCPOAuth

__all__ = ["ENV_ALLOW_LIST", "MCPServer", "SamplingPolicy", "server_environment"]

_SERVER_NAME = re.compile(r"^[A-Za-z0-9_-]{1,48}$")

#: Variables a stdio server inherits from our environment when they are set: enough to find
#: programs and decode text, nothing that could carry a credential of ours.
ENV_ALLOW_LIST = (
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "SHELL",
    "TERM",
    "LANG",
    "LC_ALL",
    "LC_CTYPE",
    "TZ",
    "TMPDIR",
)

SamplingPolicy = Literal["deny", "ask", "allow"]

#: Seconds one tool call (and connecting, listing) may take unless the server sets its own.
DEFAULT_TIMEOUT = 60.0


def _check_name(name: object) -> str:
    if not isinstance(name, str) or not _SERVER_NAME.match(name):
        raise ValueError(f"MCP server name {name!r} must match {_SERVER_NAME.pattern}")
    return name


def _check_strings(value: object, what: str) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    ):
        raise ValueError(f"{what} must map strings to strings")
    return dict(value)


def _check_timeout(timeout: object) -> float:
    if (
        isinstance(timeout, bool)
        or not isinstance(timeout, int | float)
        or not math.isfinite(timeout)
        or timeout <= 0
    ):
        raise ValueError("timeout must be a positive number of seconds")
    return float(timeout)


def _check_sampling(sampling: object) -> SamplingPolicy:
    if sampling not in get_args(SamplingPolicy):
        raise ValueError(f"sampling must be 'deny', 'ask' or 'allow', not {sampling!r}")
    return sampling  # type: ignore[return-value]


@dataclass(frozen=True, slots=True, kw_only=True)
class MCPServer:
    """One MCP server. Build it with ``MCPServer.stdio`` or ``MCPServer.http``.

    ``env`` and ``headers`` are left out of the repr: they may carry secrets.
    """

    name: str
    transport: Literal["stdio", "http"]
    command: str | None = None
    args: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict, repr=False)
    cwd: str | None = None
    url: str | None = None
    headers: Mapping[str, str] = field(default_factory=dict, repr=False)
    timeout: float = DEFAULT_TIMEOUT
    limits: MCPLimits = field(default_factory=MCPLimits)
    sampling: SamplingPolicy = "deny"
    oauth: MCPOAuth | None = None

    @classmethod
    def stdio(
        cls,
        name: str,
        *,
        command: str,
        args: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
        cwd: str | os.PathLike[str] | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        limits: MCPLimits | None = None,
        sampling: SamplingPolicy = "deny",
    ) -> MCPServer:
        """A server run as a subprocess speaking MCP over its stdin/stdout.

        Its environment is ``env`` over the variables of ``ENV_ALLOW_LIST`` that are set here.
        ``timeout`` bounds each tool call (time spent waiting for a person's answer aside),
        connecting and listing. ``limits`` bounds what the server may send (``MCPLimits()``
        by default); ``sampling`` is the policy for its ``sampling/createMessage`` requests.

        Raises:
            ValueError: a bad name, command, argument list, environment, timeout, limits or
                sampling policy.
        """
        if not isinstance(command, str) or not command:
            raise ValueError("command must be a non-empty string")
        if isinstance(args, str) or not all(isinstance(a, str) for a in args):
            raise ValueError("args must be a list of strings")
        return cls(
            name=_check_name(name),
            transport="stdio",
            command=command,
            args=tuple(args),
            env=_check_strings(env, "env"),
            cwd=None if cwd is None else os.fspath(cwd),
            timeout=_check_timeout(timeout),
            limits=check_limits(limits),
            sampling=_check_sampling(sampling),
        )

    @classmethod
    def http(
        cls,
        name: str,
        *,
        url: str,
        headers: Mapping[str, str] | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        limits: MCPLimits | None = None,
        sampling: SamplingPolicy = "deny",
        oauth: MCPOAuth | None = None,
    ) -> MCPServer:
        """A server reached over streamable HTTP at ``url`` (``timeout``, ``limits`` and
        ``sampling`` as for ``stdio``).

        ``oauth`` authorizes the client the way the MCP authorization spec asks when the
        server answers 401 (or 403 ``insufficient_scope``); see ``MCPOAuth``.

        Raises:
            ValueError: a bad name, URL, headers, timeout, limits, sampling policy or OAuth
                configuration, or an ``Authorization`` header together with ``oauth``.
        """
        if not isinstance(url, str) or not url.startswith(("http://", "https://")):
            raise ValueError("url must be an http:// or https:// URL")
        checked = _check_strings(headers, "headers")
        if oauth is not None:
            if not isinstance(oauth, MCPOAuth):
                raise ValueError("oauth must be an MCPOAuth")
            if any(k.lower() == "authorization" for k in checked):
                raise ValueError("an Authorization header and oauth cannot both be given")
        return cls(
            name=_check_name(name),
            transport="http",
            url=url,
            headers=checked,
            timeout=_check_timeout(timeout),
            limits=check_limits(limits),
            sampling=_check_sampling(sampling),
            oauth=oauth,
        )


def server_environment(server: MCPServer) -> dict[str, str]:
    """The complete environment of a stdio server's process."""
    inherited = {k: os.environ[k] for k in ENV_ALLOW_LIST if k in os.environ}
    return inherited | dict(server.env)
