"""The web chat of ``steerloop serve`` (API.md "Web chat") in a real browser: Debian's
chromium driven by playwright against uvicorn on 127.0.0.1 with a scripted model.

Every test drives the page through its ``data-testid`` hooks only and saves a screenshot of
each state under its ``tmp_path``. One browser serves the whole module (each test gets its
own context); the tests share the module's event loop with the in-process servers.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from playwright.async_api import Browser, Page, Request, async_playwright, expect

from steerloop import AgentOptions, Runtime, define_tool
from steerloop.llm.chunks import BlockStart, ReasoningDelta, TextDelta
from steerloop.service import Profile, create_app
from steerloop.testing import (
    ScriptedAdapter,
    hang_after,
    reasoning_response,
    text_response,
    tool_call_response,
)

from .served import served, turn_ends, types, wait_for_log

CHROMIUM = Path("/usr/bin/chromium")
WAIT_MS = 15_000

pytestmark = [pytest.mark.timeout(120), pytest.mark.asyncio(loop_scope="module")]
expect.set_options(timeout=WAIT_MS)


class Model:
    """A scripted model with two tools: ``gate`` (waits for ``release``) and ``echo``."""

    def __init__(self, *script: Any) -> None:
        self.adapter = ScriptedAdapter(list(script))
        self.release = asyncio.Event()

    def profiles(self, rt: Runtime) -> list[Profile]:
        rt.llm.register_adapter(["mock"], self.adapter)

        async def run_gate(args: Any, exec: Any) -> str:
            released = asyncio.ensure_future(self.release.wait())
            aborted = asyncio.ensure_future(exec.signal.wait())
            await asyncio.wait({released, aborted}, return_when=asyncio.FIRST_COMPLETED)
            for waiter in (released, aborted):
                waiter.cancel()  # the test's own waiters
            return "gate open"

        async def run_echo(args: Any, exec: Any) -> str:
            return str(args["text"])

        rt.tools.register(
            define_tool(
                name="gate",
                description="waits",
                parameters={"type": "object", "properties": {"wait": {"type": "string"}}},
                execute=run_gate,
            )
        )
        rt.tools.register(
            define_tool(
                name="echo",
                description="returns its text",
                parameters={
                    "type": "object",
                    "properties": {"text": {"type": "string"}},
                    "required": ["text"],
                },
                execute=run_echo,
            )
        )
        return [Profile(name="default", options=AgentOptions(provider="mock", model="m"))]

    def user_texts(self, n: int) -> list[str]:
        request = self.adapter.requests[n]
        return [
            block.text
            for message in request.messages
            if message.role == "user"
            for block in message.content
        ]


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def browser() -> AsyncIterator[Browser]:
    if not CHROMIUM.is_file():
        pytest.fail(f"{CHROMIUM} is missing: install Debian's chromium (apt-get install chromium)")
    async with async_playwright() as pw:
        launched = await pw.chromium.launch(executable_path=str(CHROMIUM), headless=True)
        try:
            yield launched
        finally:
            await launched.close()


class Chat:
    """One browser tab on the chat page, with the hooks the tests use."""

    def __init__(self, page: Page, base: str, shots: Path) -> None:
        self.page = page
        self.base = base
        self.shots = shots
        self.errors: list[str] = []
        self.requests: list[Request] = []
        page.on("pageerror", lambda exc: self.errors.append(str(exc)))
        page.on("request", lambda request: self.requests.append(request))

    def __getattr__(self, testid: str) -> Any:
        return self.page.get_by_test_id(testid.replace("_", "-"))

    def entries(self, role: str) -> Any:
        return self.page.get_by_test_id("transcript").locator(f'[data-role="{role}"]')

    async def open(self, query: str = "") -> None:
        await self.page.goto(f"{self.base}/{query}")
        await expect(self.page.get_by_test_id("status")).to_have_text("idle")

    async def type_and_enter(self, text: str) -> None:
        await self.composer.fill(text)
        await self.composer.press("Enter")

    async def shot(self, name: str) -> None:
        await self.page.screenshot(path=self.shots / f"{name}.png")


@pytest_asyncio.fixture(loop_scope="module")
async def page(browser: Browser) -> AsyncIterator[Page]:
    context = await browser.new_context(viewport={"width": 1100, "height": 720})
    try:
        yield await context.new_page()
    finally:
        await context.close()


def store(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'sessions.db'}"


def base_of(client: Any) -> str:
    return str(client.base_url).rstrip("/")


async def test_send_streams_before_the_answer_ends_and_esc_stops(
    page: Page, tmp_path: Path
) -> None:
    """Enter with no session selected starts one (its id goes into the URL); the live frames
    show reasoning and text while the turn runs; Esc cancels it: the turn ends aborted by the
    user and the safe prefix stays."""
    partial = [
        BlockStart(index=0, block_type="reasoning"),
        ReasoningDelta(index=0, text="weighing the options"),
        BlockStart(index=1, block_type="text"),
        TextDelta(index=1, text="Hello, wor"),
    ]
    model = Model(hang_after(partial))
    async with served(create_app(store(tmp_path), model.profiles)) as client:
        chat = Chat(page, base_of(client), tmp_path)
        await chat.open()
        await expect(chat.empty).to_be_visible()
        await chat.type_and_enter("hi there")
        await expect(page).to_have_url(re.compile(r"/\?session=s_"))
        session_id = page.url.split("session=")[1]
        await expect(chat.session_item).to_have_attribute("data-session-id", session_id)
        await expect(chat.entries("user")).to_have_text(["youhi there"])
        await expect(chat.streaming).to_contain_text("Hello, wor")
        await expect(chat.streaming.get_by_test_id("reasoning")).to_have_text(
            "weighing the options"
        )
        await expect(chat.status).to_have_text("running")
        await expect(chat.send).to_have_text("Steer")
        await expect(chat.composer).to_have_value("")
        await chat.shot("1-streaming")
        await chat.composer.press("Escape")
        await expect(chat.status).to_have_text("idle")
        await expect(chat.turn_end).to_have_text("stopped")
        await expect(chat.streaming).to_have_count(0)
        await expect(chat.entries("assistant")).to_contain_text(["Hello, wor"])
        await chat.shot("2-stopped")
        events = await wait_for_log(client, session_id, lambda ev: turn_ends(ev) == 1)
        assert events[-1]["data"]["reason"] == {"kind": "aborted", "reason": {"kind": "user"}}
        assert model.user_texts(0) == ["hi there"]
        assert chat.errors == []
