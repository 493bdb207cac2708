"""The edge against a real browser (issue 23): Debian's chromium, driven by playwright, runs
an attacker's page that tries to list, read, create, send and approve on a local server —
from another origin (CSRF: ``fetch(no-cors)`` with ``text/plain`` bodies, a ``text/plain``
form) and from a name rebound to 127.0.0.1 (DNS rebinding: same-origin ``fetch`` to a
``Host`` the server does not answer to). The browser's Local/Private Network Access checks
are turned off (as in browsers without them), so the server is what refuses: each attack
request reaches it and is answered 403, nothing is created, sent or decided. The controls
allow the attacker's origin or name explicitly and see the same page succeed, so the tests
do exercise the path an attack takes."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import pytest_asyncio
from playwright.async_api import Browser, Page, Route, async_playwright

from steerloop.service import create_app
from steerloop.testing import text_response, tool_call_response

from .served import served, wait_for_log
from .test_approvals import Asking, asked

CHROMIUM = Path("/usr/bin/chromium")
pytestmark = [pytest.mark.timeout(120), pytest.mark.asyncio(loop_scope="module")]

REBOUND = "attacker.test"
FOREIGN = "http://evil.test:8000"
BROWSER_ARGS = [
    f"--host-resolver-rules=MAP {REBOUND} 127.0.0.1, MAP evil.test 127.0.0.1",
    # Local Network Access (and its predecessor, Private Network Access) would block a
    # public page's requests to 127.0.0.1 in the browser; off, as in browsers without it.
    "--disable-features=LocalNetworkAccessChecks,LocalNetworkAccessChecksWebSockets,"
    "PrivateNetworkAccessSendPreflights,PrivateNetworkAccessRespectPreflightResults,"
    "BlockInsecurePrivateNetworkRequests,PrivateNetworkAccessForWorkers,"
    "PrivateNetworkAccessForNavigations",
]

ATTACK = """
async (base) => {
  const out = {};
  const text = (body) => ({
    method: "POST", mode: base ? "no-cors" : "cors",
    headers: { "Content-Type": "text/plain" }, body: JSON.stringify(body),
  });
  const go = async (name, path, init) => {
    try {
      const r = await fetch(base + path, init);
      out[name] = r.type === "opaque" ? "opaque" : r.status;
      if (r.type !== "opaque") out[name + ":body"] = await r.text();
    } catch (e) { out[name] = "failed"; }
  };
  await go("list", "/v1/sessions", base ? { mode: "no-cors" } : {});
  await go("read", "/v1/sessions/s/log", base ? { mode: "no-cors" } : {});
  await go("create", "/v1/sessions", text({ session_id: "pwned", input: "hi" }));
  await go("send", "/v1/sessions/s/messages", text({ mode: "steer", content: "pwned" }));
  await go("approve", "/v1/sessions/s/approvals/c1", text({ decision: "allow" }));
  return out;
}
"""

FORM = """
async (action) => {
  const frame = document.createElement("iframe");
  frame.name = "sink";
  document.body.appendChild(frame);
  await new Promise((resolve) => setTimeout(resolve, 0));
  const posted = new Promise((resolve) => { frame.onload = resolve; });
  const form = document.createElement("form");
  form.method = "POST"; form.enctype = "text/plain"; form.target = "sink"; form.action = action;
  const field = document.createElement("input");
  field.name = '{"mode": "steer", "content": "formed';  // the body is name=value:
  field.value = '"}';                                   // {"mode": ..., "content": "formed="}
  form.appendChild(field);
  document.body.appendChild(form);
  form.submit();
  await posted;
}
"""


class Recorded:
    """The app under an ASGI wrapper recording each request's method, path, ``Host`` and
    status: what reached the server and how it answered."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.seen: list[tuple[str, str, str, int]] = []

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        host = dict(scope["headers"]).get(b"host", b"").decode()

        async def sent(message: Any) -> None:
            if message["type"] == "http.response.start":
                self.seen.append((scope["method"], scope["path"], host, message["status"]))
            await send(message)

        await self.app(scope, receive, sent)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def browser() -> AsyncIterator[Browser]:
    if not CHROMIUM.is_file():
        pytest.fail(f"{CHROMIUM} is missing: install Debian's chromium (apt-get install chromium)")
    async with async_playwright() as pw:
        launched = await pw.chromium.launch(
            executable_path=str(CHROMIUM), headless=True, args=BROWSER_ARGS
        )
        try:
            yield launched
        finally:
            await launched.close()


@pytest_asyncio.fixture(loop_scope="module")
async def page(browser: Browser) -> AsyncIterator[Page]:
    context = await browser.new_context()
    try:
        yield await context.new_page()
    finally:
        await context.close()


async def open_attack_page(page: Page, url: str) -> None:
    """Open ``url`` with the attacker's (empty) page: playwright serves the document, as
    the attacker's server did before the name was rebound; every later request of the page
    goes to the network."""

    async def serve(route: Route) -> None:
        await route.fulfill(status=200, content_type="text/html", body="<!doctype html><body>")

    await page.route(url, serve)
    await page.goto(url)


async def pending_call(client: httpx.AsyncClient) -> list[dict[str, Any]]:
    await client.post("/v1/sessions", json={"session_id": "s", "input": "go"})
    return await wait_for_log(client, "s", asked)


def asking() -> Asking:
    """A session's first answer calls ``write`` (held for approval); then plain answers."""
    return Asking(tool_call_response("c1", "write", {}), *[text_response("ok")] * 8)


def sqlite(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'sessions.db'}"


ATTACKS = {
    ("GET", "/v1/sessions"),
    ("GET", "/v1/sessions/s/log"),
    ("POST", "/v1/sessions"),
    ("POST", "/v1/sessions/s/messages"),
    ("POST", "/v1/sessions/s/approvals/c1"),
}


async def assert_untouched(
    client: httpx.AsyncClient, model: Asking, before: list[dict[str, Any]]
) -> None:
    assert model.ran == []
    assert (await client.get("/v1/sessions/s/log")).json()["events"] == before
    listed = (await client.get("/v1/sessions")).json()["sessions"]
    assert [s["session_id"] for s in listed] == ["s"]


async def test_a_page_on_another_origin_cannot_drive_the_server(page: Page, tmp_path: Path) -> None:
    """From ``http://evil.test:8000``: no-cors reads, ``text/plain`` creates, sends and an
    approval, and a ``text/plain`` form post each reach the server and are answered 403;
    no session is made, nothing is sent, the call stays pending and does not run."""
    model = asking()
    app = Recorded(create_app(sqlite(tmp_path), model.profiles))
    async with served(app) as client:
        before = await pending_call(client)
        base = str(client.base_url).rstrip("/")
        await open_attack_page(page, f"{FOREIGN}/")
        start = len(app.seen)
        out = await page.evaluate(ATTACK, base)
        assert set(out.values()) <= {"opaque", "failed"}, out  # the page itself learns nothing
        assert {(m, p): s for m, p, _h, s in app.seen[start:]} == dict.fromkeys(ATTACKS, 403)
        start = len(app.seen)
        await page.evaluate(FORM, f"{base}/v1/sessions/s/messages")
        async with asyncio.timeout(15):
            while len(app.seen) == start:  # the frame's load may come before the post's
                await asyncio.sleep(0.02)
        assert [(m, p, s) for m, p, _h, s in app.seen[start:]] == [
            ("POST", "/v1/sessions/s/messages", 403)
        ]
        await assert_untouched(client, model, before)


async def test_an_allowed_origin_may_drive_it_control(page: Page, tmp_path: Path) -> None:
    """Control: the same page with its origin allowed creates a session (CORS answered),
    so the test above fails for the server's reason, not the browser's."""
    model = asking()
    app = Recorded(create_app(sqlite(tmp_path), model.profiles, allowed_origins=[FOREIGN]))
    async with served(app) as client:
        await pending_call(client)
        base = str(client.base_url).rstrip("/")
        await open_attack_page(page, f"{FOREIGN}/")
        created = await page.evaluate(
            """async (base) => (await fetch(base + "/v1/sessions", {method: "POST",
                 headers: {"Content-Type": "application/json"},
                 body: JSON.stringify({session_id: "allowed"})})).status""",
            base,
        )
        assert created == 201
        listed = (await client.get("/v1/sessions")).json()["sessions"]
        assert sorted(s["session_id"] for s in listed) == ["allowed", "s"]


async def test_a_rebound_name_cannot_drive_the_server(page: Page, tmp_path: Path) -> None:
    """A page on ``http://attacker.test:PORT`` whose name now resolves to 127.0.0.1: its
    same-origin requests reach the server with ``Host: attacker.test:PORT`` and every one
    is 403 ``host_not_allowed``, the page's assets too; nothing is read or changed. With
    the name allowed (the control) the same script lists, reads, creates, sends and
    approves: the whole chain the issue saw."""
    model = asking()
    app = Recorded(create_app(sqlite(tmp_path), model.profiles))
    async with served(app) as client:
        before = await pending_call(client)
        origin = f"http://{REBOUND}:{client.base_url.port}"
        await open_attack_page(page, f"{origin}/attack.html")
        out = await page.evaluate(ATTACK, "")
        for name in ("list", "read", "create", "send", "approve"):
            assert out[name] == 403, out
            assert json.loads(out[f"{name}:body"])["error"]["code"] == "host_not_allowed"
        asset = await page.evaluate("async () => (await fetch('/app.js')).status")
        assert asset == 403
        attacks = {(m, p): s for m, p, h, s in app.seen if h.startswith(REBOUND)}
        assert {k: v for k, v in attacks.items() if k in ATTACKS} == dict.fromkeys(ATTACKS, 403)
        await assert_untouched(client, model, before)


async def test_an_allowed_name_may_drive_it_control(page: Page, tmp_path: Path) -> None:
    """Control: with ``allowed_hosts=[attacker.test]`` the same page does it all (list 200,
    read 200, create 201, send 202, approve 202) and the call runs."""
    model = asking()
    app = create_app(sqlite(tmp_path), model.profiles, allowed_hosts=[REBOUND])
    async with served(app) as client:
        await pending_call(client)
        await open_attack_page(page, f"http://{REBOUND}:{client.base_url.port}/attack.html")
        out = await page.evaluate(ATTACK, "")
        got = {k: out[k] for k in ("list", "read", "create", "send", "approve")}
        assert got == {"list": 200, "read": 200, "create": 201, "send": 202, "approve": 202}
        async with asyncio.timeout(15):
            while model.ran != ["c1"]:
                await asyncio.sleep(0.02)
