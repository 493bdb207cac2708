"""DNS rebinding: answer only requests that name this server in their ``Host``.

A page on ``http://attacker.example:8421`` whose name the attacker rebinds to 127.0.0.1 is,
to the browser, same-origin with every route of a local server on that port; only the
``Host`` header it sends (``attacker.example:8421``) tells it apart. So every request, the
web page's assets and ``/healthz`` included, must carry a loopback name or literal, the
bound ``--host``, or a name given with ``--allowed-host`` (a reverse proxy's); any other is
403. The port is not compared (the browser addressed this socket either way).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable

from starlette.datastructures import Headers
from starlette.types import ASGIApp, Receive, Scope, Send

from ._errors import ApiError, error_response

__all__ = [
    "LOOPBACK_NAMES",
    "WILDCARD_BINDS",
    "HostCheckMiddleware",
    "allowed_names",
    "host_name",
]

LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})
WILDCARD_BINDS = frozenset({"0.0.0.0", "::", "[::]"})
"""Bind addresses that name no host (``--host`` then adds nothing to the allowed names)."""


def host_name(value: str) -> str | None:
    """The name of a ``Host`` header (``name``, ``name:port``, ``[v6]:port``), lowercased
    without a trailing dot; ``None`` when it is not one."""
    value = value.strip().lower()
    if value.startswith("["):
        name, sep, rest = value[1:].partition("]")
        if not sep or (rest and not (rest[0] == ":" and rest[1:].isdigit())):
            return None
    else:
        name, sep, port = value.partition(":")
        if sep and not (port.isascii() and port.isdigit()):
            return None
    name = name.rstrip(".")
    if not name or not name.isascii() or any(c in name for c in " /\\@?#%"):
        return None
    return name


def allowed_names(hosts: Iterable[str]) -> frozenset[str]:
    """The allowed host names, normalised like ``host_name``.

    Raises:
        ValueError: an empty name or ``*`` (the check cannot be switched off by a pattern).
    """
    names = {n.strip().strip("[]").lower().rstrip(".") for n in hosts}
    if "" in names or "*" in names or "*." in names:
        raise ValueError("an allowed host must be a name (or *.domain), not empty or '*'")
    return frozenset(names)


def _is_loopback(name: str) -> bool:
    if name in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


class HostCheckMiddleware:
    """Refuse (403 ``host_not_allowed``) a request whose ``Host`` is not an allowed name.

    ``allowed_hosts`` are exact names (an IPv6 address with or without brackets), or
    ``*.example.com`` for every name under one domain; loopback names and literals are always
    allowed."""

    def __init__(self, app: ASGIApp, allowed_hosts: Iterable[str] = ()) -> None:
        self.app = app
        names = allowed_names(allowed_hosts)
        self.exact = frozenset(n for n in names if not n.startswith("*."))
        self.suffixes = tuple(n[1:] for n in names if n.startswith("*."))

    def allows(self, name: str) -> bool:
        return _is_loopback(name) or name in self.exact or name.endswith(self.suffixes)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        given = Headers(scope=scope).get("host")
        name = host_name(given) if given is not None else None
        if name is not None and self.allows(name):
            await self.app(scope, receive, send)
            return
        shown = "no Host header" if given is None else f"Host {given[:100]!r}"
        refused = ApiError(
            403,
            "host_not_allowed",
            f"{shown} does not name this server; a name it should answer to is given with "
            "--allowed-host (create_app(allowed_hosts=...))",
        )
        await error_response(refused)(scope, receive, send)
