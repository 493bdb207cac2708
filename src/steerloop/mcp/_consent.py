"""The person at the browser, by default: the system browser opens the authorization URL and
the redirect is caught on the loopback redirect URI (RFC 8252 §7.3).

The listener is the standard library's HTTP server on a thread of its own: it answers one
path with one page, and lives only while the authorization is pending.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import webbrowser
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit, urlunsplit

__all__ = ["CONSENT_TIMEOUT", "consent_in_browser"]

_log = logging.getLogger("steerloop.mcp")

#: Seconds a person has to consent in the browser.
CONSENT_TIMEOUT = 300.0

_PAGE = (
    b"<!doctype html><meta charset=utf-8><title>steerloop</title>"
    b"<p>steerloop received the authorization. You can close this tab.</p>"
)


def _listener(redirect_uri: str, arrived: Any) -> ThreadingHTTPServer:
    """An HTTP server on the redirect URI's address that hands its first redirect to
    ``arrived(url)``."""
    parts = urlsplit(redirect_uri)
    path = parts.path or "/"

    class Redirected(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # the HTTP server's name for the GET handler
            target = urlsplit(self.path)
            if target.path != path:
                self.send_error(404)
                return
            arrived(urlunsplit((parts.scheme, parts.netloc, path, target.query, "")))
            self.send_response(200)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(_PAGE)))
            self.end_headers()
            self.wfile.write(_PAGE)

        def log_message(self, format: str, *args: Any) -> None:
            pass  # the query carries the authorization code: it is logged nowhere

    return ThreadingHTTPServer((parts.hostname or "127.0.0.1", parts.port or 80), Redirected)


async def consent_in_browser(
    authorization_url: str, redirect_uri: str, *, timeout: float = CONSENT_TIMEOUT
) -> str:
    """Open ``authorization_url`` in the system browser; return the redirect it leads to.

    Raises:
        OSError: the redirect URI's address cannot be listened on.
        TimeoutError: no redirect arrived within ``timeout`` seconds.
    """
    loop = asyncio.get_running_loop()
    returned: asyncio.Future[str] = loop.create_future()

    def settle(url: str) -> None:
        if not returned.done():
            returned.set_result(url)

    def arrived(url: str) -> None:  # on the listener's thread
        loop.call_soon_threadsafe(settle, url)

    server = _listener(redirect_uri, arrived)
    thread = threading.Thread(target=server.serve_forever, name="mcp-oauth-redirect", daemon=True)
    thread.start()
    try:
        _log.warning("To authorize the MCP server, open this URL: %s", authorization_url)
        await asyncio.to_thread(webbrowser.open, authorization_url)
        try:
            return await asyncio.wait_for(returned, timeout)
        except TimeoutError:
            raise TimeoutError(
                f"no authorization came back to {redirect_uri} within {timeout:g}s"
            ) from None
    finally:
        await asyncio.to_thread(server.shutdown)
        server.server_close()
