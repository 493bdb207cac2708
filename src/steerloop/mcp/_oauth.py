"""OAuth configuration of an HTTP MCP server: who the client is, where the person is sent back.

No SDK here: the configuration is checked (the CLI checks ``steerloop.toml``) without it.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal
from urllib.parse import urlsplit

if TYPE_CHECKING:
    from mcp.client.auth import TokenStorage
    from mcp.shared.auth import OAuthClientInformationFull, OAuthToken

__all__ = ["DEFAULT_REDIRECT_URI", "MCPOAuth", "MemoryTokenStorage"]

#: Where the authorization server sends the person back unless configured otherwise: a
#: loopback address, as a native client registers (RFC 8252 §7.3).
DEFAULT_REDIRECT_URI = "http://127.0.0.1:33418/callback"

TokenAuthMethod = Literal["none", "client_secret_basic", "client_secret_post"]
_AUTH_METHODS = ("none", "client_secret_basic", "client_secret_post")

#: Given the authorization URL, have a person consent there and return the URL the
#: authorization server redirected them to (the redirect URI with ``code`` and ``state``).
Authorize = Callable[[str], Awaitable[str]]


def _is_loopback(host: str | None) -> bool:
    if host == "localhost":
        return True
    try:
        return host is not None and ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class MemoryTokenStorage:
    """Tokens and the client registration, in memory (an ``mcp.client.auth.TokenStorage``)."""

    def __init__(self) -> None:
        self._tokens: OAuthToken | None = None
        self._client: OAuthClientInformationFull | None = None

    async def get_tokens(self) -> OAuthToken | None:
        return self._tokens

    async def set_tokens(self, tokens: OAuthToken) -> None:
        self._tokens = tokens

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        return self._client

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        self._client = client_info


@dataclass(frozen=True, slots=True, kw_only=True)
class MCPOAuth:
    """OAuth 2.1 authorization for an HTTP MCP server (``MCPServer.http(..., oauth=...)``).

    ``authorize`` plays the person: it gets the authorization URL and returns the URL the
    authorization server redirected them to; by default the system browser opens the URL
    and the redirect is caught on ``redirect_uri`` (which must then be a loopback address).
    Without ``client_id`` the client registers itself: with ``client_metadata_url`` as a
    URL-based client id where the authorization server accepts one, else dynamically;
    ``client_id`` (and ``client_secret``) use a registration made beforehand. ``scope`` is
    asked for up front, else the scope comes from the server's challenge or metadata. Tokens
    and the registration live in ``storage`` (an ``mcp.client.auth.TokenStorage``), by
    default in memory with this configuration, so every connection made from it shares
    them. ``client_secret`` is left out of the repr.
    """

    authorize: Authorize | None = None
    redirect_uri: str = DEFAULT_REDIRECT_URI
    client_name: str = "steerloop"
    scope: str | None = None
    client_id: str | None = None
    client_secret: str | None = field(default=None, repr=False)
    token_endpoint_auth_method: TokenAuthMethod | None = None
    client_metadata_url: str | None = None
    storage: TokenStorage = field(default_factory=MemoryTokenStorage, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.authorize is not None and not callable(self.authorize):
            raise ValueError("authorize must be an async callable (authorization URL -> redirect)")
        redirect = urlsplit(self.redirect_uri) if isinstance(self.redirect_uri, str) else None
        if redirect is None or redirect.scheme not in ("http", "https") or not redirect.netloc:
            raise ValueError("redirect_uri must be an http:// or https:// URL")
        if redirect.scheme == "http" and not _is_loopback(redirect.hostname):
            raise ValueError("an http:// redirect_uri must point at a loopback address")
        if self.authorize is None and (
            redirect.scheme != "http" or not _is_loopback(redirect.hostname)
        ):
            raise ValueError("without authorize, redirect_uri must be an http:// loopback URL")
        for name in ("client_name", "scope", "client_id", "client_secret"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, str) or not value):
                raise ValueError(f"{name} must be a non-empty string")
        if self.client_secret is not None and self.client_id is None:
            raise ValueError("client_secret needs the client_id it belongs to")
        if self.token_endpoint_auth_method not in (None, *_AUTH_METHODS):
            raise ValueError(f"token_endpoint_auth_method must be one of {_AUTH_METHODS}")
        url = self.client_metadata_url
        if url is not None and not (
            isinstance(url, str) and url.startswith("https://") and urlsplit(url).path.strip("/")
        ):
            raise ValueError("client_metadata_url must be an https:// URL with a path")

    @property
    def application_type(self) -> Literal["native", "web"]:
        """``native`` for a loopback redirect (a local client), else ``web`` (SEP-837)."""
        return "native" if _is_loopback(urlsplit(self.redirect_uri).hostname) else "web"
