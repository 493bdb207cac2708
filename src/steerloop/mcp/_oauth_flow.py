"""OAuth for HTTP MCP servers: the authorization the MCP spec asks of a client, by the SDK.

The ``mcp`` SDK's ``OAuthClientProvider`` does the protocol: protected-resource and
authorization-server discovery, the issuer checks (RFC 8414, RFC 9207), client registration
(dynamic, a URL-based client id, or one made beforehand), scope selection and step-up, PKCE,
the token request and refresh. This module configures it and plays its one interactive part:
sending a person to the authorization URL and reading where the authorization server sent
them back.
"""

from __future__ import annotations

from collections.abc import Callable
from urllib.parse import parse_qs, urlsplit

from mcp.client.auth import OAuthClientProvider, OAuthFlowError, TokenStorage
from mcp.shared.auth import (
    AuthorizationCodeResult,
    OAuthClientInformationFull,
    OAuthClientMetadata,
    OAuthToken,
)
from pydantic import AnyUrl

from ._consent import consent_in_browser
from ._oauth import MCPOAuth

__all__ = ["authorization_response", "oauth_provider", "registration"]


def registration(oauth: MCPOAuth) -> OAuthClientInformationFull | None:
    """The registration made beforehand (``client_id``), if any."""
    if oauth.client_id is None:
        return None
    method = oauth.token_endpoint_auth_method
    if method is None:
        method = "client_secret_basic" if oauth.client_secret else "none"
    return OAuthClientInformationFull(
        client_id=oauth.client_id,
        client_secret=oauth.client_secret,
        redirect_uris=[AnyUrl(oauth.redirect_uri)],
        token_endpoint_auth_method=method,
    )


class _Registered:
    """The configured storage, answering with the registration made beforehand until the
    flow stores one of its own."""

    def __init__(self, inner: TokenStorage, registered: OAuthClientInformationFull) -> None:
        self._inner = inner
        self._registered = registered

    async def get_tokens(self) -> OAuthToken | None:
        return await self._inner.get_tokens()

    async def set_tokens(self, tokens: OAuthToken) -> None:
        await self._inner.set_tokens(tokens)

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        stored = await self._inner.get_client_info()
        return stored if stored is not None else self._registered

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        await self._inner.set_client_info(client_info)


class _PersonAtTheBrowser:
    """The SDK's redirect and callback handlers, as one ``authorize`` call between them.

    ``waiting(True)`` and ``waiting(False)`` bracket the time spent on the person, which no
    connect bound should count.
    """

    def __init__(self, oauth: MCPOAuth, waiting: Callable[[bool], None]) -> None:
        self._oauth = oauth
        self._waiting = waiting
        self._returned: str | None = None

    async def redirect(self, authorization_url: str) -> None:
        self._returned = None
        self._waiting(True)
        try:
            authorize = self._oauth.authorize
            if authorize is None:
                returned = await consent_in_browser(authorization_url, self._oauth.redirect_uri)
            else:
                returned = await authorize(authorization_url)
        finally:
            self._waiting(False)
        if not isinstance(returned, str):
            raise OAuthFlowError("authorize must return the URL the person was redirected to")
        self._returned = returned

    async def callback(self) -> AuthorizationCodeResult:
        returned, self._returned = self._returned, None
        if returned is None:
            raise OAuthFlowError("the authorization ended without a redirect")
        return authorization_response(returned, self._oauth.redirect_uri)


def authorization_response(returned: str, redirect_uri: str) -> AuthorizationCodeResult:
    """The code, state and issuer of a redirect to ``redirect_uri`` (RFC 6749 §4.1.2).

    Raises:
        OAuthFlowError: a redirect elsewhere, an error response, or no code.
    """
    got, expected = urlsplit(returned), urlsplit(redirect_uri)
    if (got.scheme, got.netloc, got.path) != (expected.scheme, expected.netloc, expected.path):
        raise OAuthFlowError("the authorization server redirected elsewhere than redirect_uri")
    query = parse_qs(got.query)

    def one(name: str) -> str | None:
        values = query.get(name)
        return values[0] if values else None

    error = one("error")
    if error is not None:
        description = one("error_description")
        raise OAuthFlowError(
            f"authorization refused ({error})" + (f": {description}" if description else "")
        )
    code = one("code")
    if not code:
        raise OAuthFlowError("the authorization response carries no code")
    return AuthorizationCodeResult(code=code, state=one("state"), iss=one("iss"))


def oauth_provider(
    server_url: str, oauth: MCPOAuth, waiting: Callable[[bool], None]
) -> OAuthClientProvider:
    """The SDK's OAuth provider (an ``httpx2.Auth``) for the MCP server at ``server_url``."""
    metadata = OAuthClientMetadata(
        client_name=oauth.client_name,
        redirect_uris=[AnyUrl(oauth.redirect_uri)],
        scope=oauth.scope,
        token_endpoint_auth_method=oauth.token_endpoint_auth_method,
        grant_types=["authorization_code", "refresh_token"],
        application_type=oauth.application_type,
    )
    registered = registration(oauth)
    storage = oauth.storage if registered is None else _Registered(oauth.storage, registered)
    person = _PersonAtTheBrowser(oauth, waiting)
    return OAuthClientProvider(
        server_url,
        metadata,
        storage,
        redirect_handler=person.redirect,
        callback_handler=person.callback,
        client_metadata_url=oauth.client_metadata_url,
    )
