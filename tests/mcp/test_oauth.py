"""OAuth for HTTP MCP servers (``MCPServer.http(..., oauth=MCPOAuth(...))``).

The servers are the official conformance suite's: an MCP server that answers 401 until it
gets a token, with its own authorization server (discovery metadata, registration,
authorization with a redirect, token endpoint), and the suite's checks of what the client
did. The whole flow is the ``mcp`` SDK's; these tests hold steerloop's part of it.
"""

from __future__ import annotations

import asyncio
import socket
import webbrowser
from pathlib import Path
from typing import Any

import httpx2
import pytest

from steerloop import Runtime, user_message
from steerloop.mcp import MCPConnectionError, MCPOAuth, MCPServer, install_mcp
from steerloop.mcp import _connection as connection_module
from steerloop.mcp._consent import consent_in_browser
from steerloop.mcp._oauth_flow import authorization_response, registration
from steerloop.testing import text_response, tool_call_response

from ..conftest import Harness, compact, settle
from .conformance import failing_checks, follow_to_redirect, scenario_server

pytestmark = pytest.mark.timeout(180)

REDIRECT = "http://127.0.0.1:33418/callback"


class Consent:
    """A person who consents at the authorization URL, counting the times they are asked."""

    def __init__(self, delay: float = 0.0) -> None:
        self.asked: list[str] = []
        self.delay = delay

    async def __call__(self, authorization_url: str) -> str:
        self.asked.append(authorization_url)
        await asyncio.sleep(self.delay)
        return await follow_to_redirect(authorization_url)


async def test_a_client_authorizes_once_and_every_connection_reuses_the_tokens(
    h: Harness, tmp_path: Path
) -> None:
    """The first connection walks the flow (one consent); a second connection made from the
    same configuration uses the stored token; no token reaches the log or a repr; the suite
    finds every step of the flow as the spec asks (PKCE S256, registration, metadata)."""
    consent = Consent()
    oauth = MCPOAuth(authorize=consent, client_name="steerloop-test")
    async with scenario_server("auth/metadata-default", tmp_path) as url:
        server = MCPServer.http("guarded", url=url, oauth=oauth, timeout=30)
        installed = await install_mcp(h.rt, [server])
        assert installed.tools("guarded") == ("guarded__test-tool",)
        agent = await h.agent(
            tool_call_response("c1", "guarded__test-tool", {}), text_response("done")
        )
        agent.followup(user_message("go"))
        await settle(agent)
        assert compact(agent.session, only=("result(",)) == ["result(c1)"]
        async with Runtime.open() as other:
            again = await install_mcp(other, [server])
            assert again.tools("guarded") == ("guarded__test-tool",)
        assert len(consent.asked) == 1
        tokens = await oauth.storage.get_tokens()
        assert tokens is not None
        logged = repr(list(agent.session.events))
        assert tokens.access_token not in logged
        assert tokens.access_token not in repr(server)
        await installed.close()
    assert failing_checks(tmp_path) == []


async def test_a_refused_authorization_fails_the_connection_with_its_reason(
    h: Harness, tmp_path: Path
) -> None:
    """The authorization server sends the person back with ``error=access_denied``: the
    connection fails with that reason, and no tool is registered."""

    async def refuse(authorization_url: str) -> str:
        return f"{REDIRECT}?error=access_denied&error_description=not+today&state=x"

    async with scenario_server("auth/metadata-default", tmp_path) as url:
        server = MCPServer.http("guarded", url=url, oauth=MCPOAuth(authorize=refuse))
        with pytest.raises(MCPConnectionError, match=r"authorization refused \(access_denied\)"):
            await install_mcp(h.rt, [server])
    assert h.rt.tools.get("guarded__test-tool") is None


async def test_time_spent_on_the_person_is_not_counted_in_the_connect_bound(
    h: Harness, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A person who takes longer at the authorization URL than connecting may take is not
    a connection that failed to answer: the bound counts the server's time only."""
    monkeypatch.setattr(connection_module, "CONNECT_TIMEOUT", 8.0)
    consent = Consent(delay=10.0)
    async with scenario_server("auth/metadata-default", tmp_path) as url:
        server = MCPServer.http("guarded", url=url, oauth=MCPOAuth(authorize=consent), timeout=8)
        installed = await install_mcp(h.rt, [server])
        assert installed.tools("guarded") == ("guarded__test-tool",)
        assert len(consent.asked) == 1
        await installed.close()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class Browser:
    """The system browser, as ``webbrowser.open`` sees it: it follows every redirect."""

    def __init__(self) -> None:
        self.opened: list[str] = []
        self.pages: list[str] = []

    def open(self, url: str, *args: Any, **kwargs: Any) -> bool:
        self.opened.append(url)
        with httpx2.Client(follow_redirects=True, timeout=30.0) as http:
            self.pages.append(http.get(url).text)
        return True


async def test_by_default_the_browser_opens_and_the_redirect_comes_back_to_a_loopback_listener(
    h: Harness, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without ``authorize``: the system browser opens the authorization URL, the
    authorization server redirects it to the loopback ``redirect_uri``, where steerloop
    listens only while it waits; the tab shows that it may be closed."""
    browser = Browser()
    monkeypatch.setattr(webbrowser, "open", browser.open)
    redirect = f"http://127.0.0.1:{free_port()}/oauth/callback"
    async with scenario_server("auth/metadata-default", tmp_path) as url:
        oauth = MCPOAuth(redirect_uri=redirect)
        installed = await install_mcp(h.rt, [MCPServer.http("guarded", url=url, oauth=oauth)])
        assert installed.tools("guarded") == ("guarded__test-tool",)
        await installed.close()
    assert len(browser.opened) == 1
    assert "You can close this tab" in browser.pages[0]
    with pytest.raises(httpx2.ConnectError):  # the listener is gone
        httpx2.get(f"{redirect}?code=late")
    assert failing_checks(tmp_path) == []


async def test_the_loopback_listener_answers_its_path_only_and_gives_up_in_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Another path on the listener is a 404 and no redirect; with no redirect, the wait
    ends after its bound, naming where the redirect was expected."""
    redirect = f"http://127.0.0.1:{free_port()}/callback"

    def wrong_path(url: str, *args: Any, **kwargs: Any) -> bool:
        assert httpx2.get(redirect.replace("/callback", "/other?code=x")).status_code == 404
        return True

    monkeypatch.setattr(webbrowser, "open", wrong_path)
    with pytest.raises(TimeoutError, match=f"no authorization came back to {redirect}"):
        await consent_in_browser("https://as.example/authorize", redirect, timeout=0.5)


def test_the_authorization_response_is_read_from_the_redirect() -> None:
    """Code, state and issuer come from the redirect; RFC 6749 error responses, a redirect
    to another address and one without a code are refused with their reason."""
    got = authorization_response(f"{REDIRECT}?code=abc&state=s1&iss=https%3A%2F%2Fas", REDIRECT)
    assert (got.code, got.state, got.iss) == ("abc", "s1", "https://as")
    assert authorization_response(f"{REDIRECT}?code=abc", REDIRECT).state is None
    refused: list[tuple[str, str]] = [
        (f"{REDIRECT}?error=invalid_scope", r"authorization refused \(invalid_scope\)$"),
        ("http://127.0.0.1:9/callback?code=abc", "redirected elsewhere"),
        ("http://127.0.0.1:33418/other?code=abc", "redirected elsewhere"),
        ("https://127.0.0.1:33418/callback?code=abc", "redirected elsewhere"),
        (f"{REDIRECT}?state=s1", "carries no code"),
        (f"{REDIRECT}?code=", "carries no code"),
    ]
    for returned, reason in refused:
        with pytest.raises(Exception, match=reason):
            authorization_response(returned, REDIRECT)


async def consent_nowhere(authorization_url: str) -> str:
    raise AssertionError("not asked")


@pytest.mark.parametrize(
    ("kwargs", "reason"),
    [
        ({"authorize": "https://as/authorize"}, "authorize must be an async callable"),
        (
            {"authorize": None, "redirect_uri": "https://app.example.com/callback"},
            "without authorize, redirect_uri must be an http:// loopback URL",
        ),
        ({"redirect_uri": "http://example.com/callback"}, "loopback"),
        ({"redirect_uri": "ftp://127.0.0.1/callback"}, "redirect_uri"),
        ({"redirect_uri": "callback"}, "redirect_uri"),
        ({"client_secret": "s3cret"}, "client_secret needs the client_id"),
        ({"client_id": ""}, "client_id must be a non-empty string"),
        ({"scope": 7}, "scope must be a non-empty string"),
        ({"token_endpoint_auth_method": "private_key_jwt"}, "token_endpoint_auth_method"),
        ({"client_metadata_url": "http://example.com/client.json"}, "client_metadata_url"),
        ({"client_metadata_url": "https://example.com/"}, "client_metadata_url"),
    ],
)
def test_an_invalid_oauth_configuration_is_refused(kwargs: dict[str, Any], reason: str) -> None:
    with pytest.raises(ValueError, match=reason):
        MCPOAuth(**{"authorize": consent_nowhere, **kwargs})


def test_oauth_configuration_keeps_its_secrets_and_refuses_a_second_authorization() -> None:
    """The client secret stays out of reprs; OAuth and an Authorization header of one's own
    are two answers to one question, so together they are refused."""
    oauth = MCPOAuth(
        authorize=consent_nowhere,
        redirect_uri="https://app.example.com/oauth/callback",
        client_id="steerloop",
        client_secret="s3cret",
    )
    assert oauth.application_type == "web"
    assert MCPOAuth().application_type == "native"
    server = MCPServer.http("s", url="https://mcp.example.com/mcp", oauth=oauth)
    assert "s3cret" not in repr(oauth) and "s3cret" not in repr(server)
    registered = registration(oauth)
    assert registered is not None
    assert registered.token_endpoint_auth_method == "client_secret_basic"
    with pytest.raises(ValueError, match="Authorization header and oauth"):
        MCPServer.http(
            "s", url="https://mcp.example.com/mcp", headers={"authorization": "Bearer x"},
            oauth=oauth,
        )  # fmt: skip
    with pytest.raises(ValueError, match="oauth must be an MCPOAuth"):
        MCPServer.http("s", url="https://mcp.example.com/mcp", oauth="token")  # type: ignore[arg-type]
