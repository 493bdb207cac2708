"""The web chat's input requests, MCP prompts and replays (issues 30 and 29) in a real
browser: Debian's chromium driven by playwright against uvicorn on 127.0.0.1, with real MCP
servers (server-everything from npm, the tests' hostile stdio server) and scripted models.

A server's elicitation renders as a form built from its requested schema (strings with
formats, numbers and integers with bounds, booleans, single and multiple choices, required
fields, defaults) answered with Accept / Decline / Cancel; ``/server:prompt args…`` in the
composer is expanded by the server into the user message; "Replay from here…" runs a replay
and shows its report side by side.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from playwright.async_api import Browser, Page, expect

from steerloop import AgentOptions, Runtime
from steerloop.mcp import MCPServer, install_mcp
from steerloop.service import Profile, create_app
from steerloop.testing import ScriptedAdapter, text_response, tool_call_response

from ..mcp.helpers import everything_bin, hostile
from .served import served, turn_ends, wait_for_log
from .test_webchat import Chat, base_of, store
from .test_webchat import browser as browser  # the module's browser (a fixture)

pytestmark = [pytest.mark.timeout(180), pytest.mark.asyncio(loop_scope="module")]
expect.set_options(timeout=30_000)  # a stdio MCP server starts within the first turn


class Served:
    """Profiles: scripted models (``default``, and ``alt`` for replays) and MCP servers."""

    def __init__(self, servers: list[MCPServer], *script: Any, alt: list[Any] | None = None):
        self.servers = servers
        self.adapter = ScriptedAdapter(list(script))
        self.alt = ScriptedAdapter(list(alt or []))

    async def profiles(self, rt: Runtime) -> list[Profile]:
        rt.llm.register_adapter(["mock"], self.adapter)
        rt.llm.register_adapter(["other"], self.alt)
        if self.servers:
            await install_mcp(rt, self.servers)  # closed with the runtime
        return [
            Profile(name="default", options=AgentOptions(provider="mock", model="m")),
            Profile(name="alt", options=AgentOptions(provider="other", model="o")),
        ]


@pytest_asyncio.fixture(loop_scope="module")
async def tab(browser: Browser) -> AsyncIterator[Page]:
    """One browser context per test."""
    context = await browser.new_context(viewport={"width": 1100, "height": 900})
    try:
        yield await context.new_page()
    finally:
        await context.close()


def session_of(tab: Page) -> str:
    return tab.url.split("session=")[1]


def answers(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e["data"] for e in events if e["type"] == "input/answered"]


async def test_an_elicitation_renders_a_form_from_its_schema_and_accept_answers_it(
    tab: Page, tmp_path: Path
) -> None:
    """server-everything's trigger-elicitation-request: one field per property with its
    title, defaults filled in (integer 42, number 3.14, the first line, chosen options),
    bounds and formats as input types, the required name marked; Accept with an empty
    required name is stopped by the browser (nothing sent); filled in, Accept sends the
    content typed per the schema (optional empty fields left out), the form closes and the
    server's result shows the answer."""
    model = Served(
        [MCPServer.stdio("ev", command=everything_bin(), args=["stdio"], timeout=120.0)],
        tool_call_response("c1", "ev__trigger-elicitation-request", {}),
        text_response("thanks"),
    )
    async with served(create_app(store(tmp_path), model.profiles)) as client:
        chat = Chat(tab, base_of(client), tmp_path)
        await chat.open()
        await chat.type_and_enter("ask me")
        request = chat.input_request
        await expect(request).to_be_visible()
        await expect(request.get_by_test_id("input-message")).to_have_text(
            "Please provide inputs for the following fields:"
        )
        fields = request.get_by_test_id("input-field")
        await expect(fields).to_have_count(13)

        def f(name: str) -> Any:
            return request.locator(f'[data-name="{name}"]')

        await expect(f("integer")).to_have_value("42")
        await expect(f("integer")).to_have_attribute("type", "number")
        await expect(f("integer")).to_have_attribute("max", "100")
        await expect(f("number")).to_have_value("3.14")
        await expect(f("email")).to_have_attribute("type", "email")
        await expect(f("homepage")).to_have_attribute("type", "url")
        await expect(f("birthdate")).to_have_attribute("type", "date")
        await expect(f("firstLine")).to_have_value("It was a dark and stormy night.")
        await expect(f("legacyTitledEnum").locator("option:checked")).to_have_text("Cats")
        await expect(f("titledSingleSelectEnum").locator("option:checked")).to_have_text("Superman")
        await expect(f("check")).not_to_be_checked()
        await expect(request.locator("label", has_text="String").first).to_contain_text("*")
        await chat.shot("1-form")
        posted = len(chat.requests)
        await request.get_by_test_id("input-accept").click()  # name is required and empty
        await expect(request).to_have_attribute("data-state", "pending")
        assert not any("/inputs/" in r.url for r in chat.requests[posted:])
        await f("name").fill("Ada")
        await f("integer").fill("7")
        await f("check").check()
        await f("titledSingleSelectEnum").select_option(label="Wonder Woman")
        await f("untitledMultipleSelectEnum").get_by_label("Piano").check()
        await request.get_by_test_id("input-accept").click()
        await expect(request.get_by_test_id("input-answered")).to_have_text("accepted (http)")
        await expect(request.get_by_test_id("input-field")).to_have_count(0)
        await expect(chat.entries("tool").get_by_test_id("tool-result")).to_contain_text(
            "Name: Ada"
        )
        await chat.shot("2-answered")
        events = await wait_for_log(client, session_of(tab), lambda ev: turn_ends(ev) == 1)
        (answer,) = answers(events)
        assert answer["action"] == "accept" and answer["by"] == "http"
        assert answer["content"] == {
            "name": "Ada",
            "check": True,
            "firstLine": "It was a dark and stormy night.",
            "integer": 7,
            "number": 3.14,
            "untitledSingleSelectEnum": "Monica",
            "untitledMultipleSelectEnum": ["Guitar", "Piano"],
            "titledSingleSelectEnum": "hero-3",
            "titledMultipleSelectEnum": ["fish-1"],
            "legacyTitledEnum": "pet-1",
        }
        (result,) = [e["data"] for e in events if e["type"] == "tool/result"]
        text = "".join(b.get("text", "") for b in result["message"]["content"])
        assert "Favorite Integer: 7" in text and "Agreed to terms: true" in text
        assert chat.errors == []


async def test_decline_closes_the_form_and_a_prompt_command_is_expanded_by_the_server(
    tab: Page, tmp_path: Path
) -> None:
    """The hostile server asks; Decline answers it (the form closes, the call's result says
    declined). Then "/" lists the server's prompts; choosing one fills the composer; sent
    with its arguments it becomes the user message the server expanded, logged with the
    prompt as its source and marked in the transcript; a prompt missing a required argument
    is refused with the server's reason and the text stays in the box."""
    state = tmp_path / "server-state"
    state.mkdir()
    model = Served(
        [hostile(state, timeout=60.0)],
        tool_call_response("c1", "x__ask", {"text": "Your name?"}),
        text_response("fine"),
        text_response("hello Ada"),
    )
    async with served(create_app(store(tmp_path), model.profiles)) as client:
        chat = Chat(tab, base_of(client), tmp_path)
        await chat.open()
        await chat.type_and_enter("start")
        request = chat.input_request
        await expect(request.get_by_test_id("input-message")).to_have_text("Your name?")
        await request.get_by_test_id("input-decline").click()
        await expect(request.get_by_test_id("input-answered")).to_have_text("declined (http)")
        await expect(chat.turn_end).to_have_text("turn ended")
        session_id = session_of(tab)
        events = (await client.get(f"/v1/sessions/{session_id}/log")).json()["events"]
        assert [(a["action"], a.get("content")) for a in answers(events)] == [("decline", None)]
        await chat.composer.fill("/")
        await chat.composer.dispatch_event("input")
        item = chat.prompt_item
        await expect(item).to_have_count(1)
        await expect(item).to_have_attribute("data-command", "/x:greet")
        await expect(item).to_contain_text("/x:greet name [tone]")
        await expect(item).to_contain_text("Greets someone.")
        await chat.shot("1-prompt-menu")
        await item.click()
        await expect(chat.composer).to_have_value("/x:greet ")
        await expect(chat.prompt_menu).to_be_hidden()
        await chat.composer.press("Enter")  # the required name is missing
        await expect(chat.error).to_contain_text("prompt 'greet' needs name")
        await expect(chat.composer).to_have_value("/x:greet ")
        await chat.composer.press_sequentially("Ada tone=warm")
        await chat.composer.press("Enter")
        user = chat.entries("user").nth(1)
        await expect(user.locator(".text")).to_have_text("Greet Ada (warm).")
        await expect(user.get_by_test_id("prompt-source")).to_have_text("/x:greet")
        await expect(chat.entries("assistant").last).to_contain_text("hello Ada")
        await chat.shot("2-prompt-sent")
        events = await wait_for_log(client, session_id, lambda ev: turn_ends(ev) == 2)
        (message,) = [
            e["data"]
            for e in events
            if e["type"] == "user/message" and "Greet" in json.dumps(e["data"]["content"])
        ]
        assert message["content"] == [{"type": "text", "text": "Greet Ada (warm)."}]
        assert message["source"]["mcp_prompt"] == {
            "server": "x",
            "name": "greet",
            "arguments": {"name": "Ada", "tone": "warm"},
        }
        assert chat.errors == []


async def test_replay_from_an_assistant_message_shows_the_report_side_by_side(
    tab: Page, tmp_path: Path
) -> None:
    """Two recorded turns; "Replay from here…" on the second answer opens the dialog with
    the served profiles' models; run with ``alt`` and a system prompt, the replay is a new
    session and the report shows turn 2 recorded vs replayed, where it diverged, and its
    Markdown; the recorded session is not written."""
    model = Served(
        [],
        text_response("first answer"),
        text_response("second answer"),
        alt=[text_response("another second answer")],
    )
    async with served(create_app(store(tmp_path), model.profiles)) as client:
        chat = Chat(tab, base_of(client), tmp_path)
        await chat.open()
        await chat.type_and_enter("one")
        await expect(chat.turn_end).to_have_count(1)
        await chat.type_and_enter("two")
        await expect(chat.turn_end).to_have_count(2)
        session_id = session_of(tab)
        recorded = (await client.get(f"/v1/sessions/{session_id}/log")).json()["events"]
        buttons = chat.replay_open
        await expect(buttons).to_have_count(2)
        await expect(buttons.nth(1)).to_have_attribute("data-turn", "2")
        await buttons.nth(1).click()
        dialog = chat.replay_dialog
        await expect(dialog).to_be_visible()
        await expect(dialog.get_by_test_id("replay-title")).to_have_text("Replay from turn 2")
        profiles = dialog.get_by_test_id("replay-profile").locator("option")
        await expect(profiles).to_have_text(["default · mock/m", "alt · other/o"])
        await dialog.get_by_test_id("replay-profile").select_option("alt")
        await dialog.get_by_test_id("replay-system").fill("Answer in one word.")
        await dialog.get_by_test_id("replay-run").click()
        await expect(dialog.get_by_test_id("replay-status")).to_have_text("Done.")
        rows = dialog.get_by_test_id("replay-turn")
        await expect(rows).to_have_count(1)
        await expect(rows).to_have_attribute("data-turn", "2")
        await expect(
            rows.get_by_test_id("replay-recorded").get_by_test_id("replay-text")
        ).to_have_text("second answer")
        await expect(rows.get_by_test_id("replay-new").get_by_test_id("replay-text")).to_have_text(
            "another second answer"
        )
        await expect(dialog.get_by_test_id("replay-divergence")).to_contain_text(
            "First divergence: turn 2, step 1"
        )
        await expect(dialog.get_by_test_id("replay-markdown")).to_contain_text("another second")
        await chat.shot("1-replay-report")
        new_id = await dialog.get_by_test_id("replay-session").text_content()
        assert new_id and new_id != session_id
        replayed = (await client.get(f"/v1/sessions/{new_id}/log")).json()["events"]
        said = [
            e["data"]["message"]["content"] for e in replayed if e["type"] == "assistant/message"
        ]
        assert said == [
            [{"type": "text", "text": "first answer"}],  # turn 1: the forked history
            [{"type": "text", "text": "another second answer"}],
        ]
        assert len(model.alt.requests) == 1
        (system,) = [m for m in model.alt.requests[0].messages if m.role == "system"]
        assert "Answer in one word." in "".join(getattr(b, "text", "") for b in system.content)
        after = (await client.get(f"/v1/sessions/{session_id}/log")).json()["events"]
        assert after == recorded
        assert chat.errors == []
