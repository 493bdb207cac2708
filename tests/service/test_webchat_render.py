"""The web chat renders answers as Markdown and says when no model is configured (issue 28),
in Chromium.

Markdown: marked + DOMPurify, vendored (``_web/vendor/README.md``); raw HTML in an answer is
shown as the text it is, links cannot run script, code is monospace with a Copy button. The
XSS tests of ``test_webchat.py`` hold with it. No model: creating a session or sending
answers 503 ``NO_MODEL`` and the page shows how to configure one, keeping what was typed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from playwright.async_api import Browser, Page, expect

from steerloop import AgentOptions, Runtime
from steerloop.service import Profile, create_app
from steerloop.testing import ScriptedAdapter, text_response

from .served import served
from .test_webchat import Chat, base_of, browser, page, store  # noqa: F401  (fixtures)

pytestmark = [pytest.mark.timeout(120), pytest.mark.asyncio(loop_scope="module")]

ANSWER = """# Plan

Use a `List<String>` or List<String> here.<br>Next line.

100.

1. one
2. **two**

```python
def first(xs: list[int]) -> int:
    return xs[0]  # <first>
```

| a | b |
|---|---|
| x | y |

[safe](https://example.com) [evil](javascript:alert(1)) <img src=x onerror="window.__md_xss=1">
"""


def one_answer(text: str) -> Any:
    def profiles(rt: Runtime) -> list[Profile]:
        rt.llm.register_adapter(["mock"], ScriptedAdapter([text_response(text)]))
        return [Profile(name="default", options=AgentOptions(provider="mock", model="m"))]

    return profiles


async def test_an_answer_is_rendered_as_markdown_with_copyable_code(
    browser: Browser,  # noqa: F811
    tmp_path: Path,
) -> None:
    context = await browser.new_context(
        viewport={"width": 1100, "height": 900}, permissions=["clipboard-read", "clipboard-write"]
    )
    try:
        tab = await context.new_page()
        async with served(create_app(store(tmp_path), one_answer(ANSWER))) as client:
            chat = Chat(tab, base_of(client), tmp_path)
            await chat.open()
            await chat.type_and_enter("plan it")
            await expect(chat.turn_end).to_have_text("turn ended")
            answer = chat.entries("assistant").locator(".md")
            await expect(answer.locator("h1")).to_have_text("Plan")
            # numbered lines keep the numbers written (100. is an empty item of its own)
            await expect(answer.locator("ol li")).to_have_text(["", "one", "two"])
            values = await answer.locator("ol li").evaluate_all("items => items.map(i => i.value)")
            assert values == [100, 1, 2]
            await expect(answer.locator("ol li strong")).to_have_text("two")
            await expect(answer.locator("table td")).to_have_text(["x", "y"])
            text = await answer.inner_text()
            assert "List<String> or List<String> here." in text
            assert "Next line." in text and "<br>" not in text
            assert '<img src=x onerror="window.__md_xss=1">' in text  # shown, not run
            code = answer.locator("pre code")
            await expect(code).to_have_text(
                "def first(xs: list[int]) -> int:\n    return xs[0]  # <first>"
            )
            font = await code.evaluate("node => getComputedStyle(node).fontFamily")
            assert "monospace" in font
            links = answer.locator("a")
            await expect(links).to_have_count(2)
            assert await links.nth(0).get_attribute("href") == "https://example.com"
            assert await links.nth(0).get_attribute("rel") == "noopener noreferrer"
            assert await links.nth(1).get_attribute("href") is None  # javascript: removed
            await chat.shot("markdown")
            await answer.get_by_test_id("copy-code").click()
            await expect(answer.get_by_test_id("copy-code")).to_have_text("Copied")
            copied = await tab.evaluate("navigator.clipboard.readText()")
            assert copied == "def first(xs: list[int]) -> int:\n    return xs[0]  # <first>"
            assert await tab.evaluate("window.__md_xss") is None
            assert chat.errors == []
    finally:
        await context.close()


async def test_no_model_the_page_says_how_to_configure_one(
    page: Page,  # noqa: F811
    tmp_path: Path,
) -> None:
    no_model = [Profile(name="default", options=AgentOptions())]
    async with served(create_app(store(tmp_path), no_model)) as client:
        chat = Chat(page, base_of(client), tmp_path)
        await chat.open()
        await expect(chat.no_model).to_be_hidden()
        await chat.type_and_enter("hello?")
        await expect(chat.no_model).to_be_visible()
        await expect(chat.no_model).to_contain_text("No model is configured")
        for way in ("DEEPSEEK_API_KEY", 'model = "PROVIDER/MODEL"', "steerloop serve --model"):
            await expect(chat.no_model).to_contain_text(way)
        await expect(chat.composer).to_have_value("hello?")  # kept
        await chat.shot("no-model")
        assert (await client.get("/v1/sessions")).json() == {"sessions": []}
        assert chat.errors == []


async def test_the_list_says_idle_for_an_unloaded_session_and_tells_equal_titles_apart(
    page: Page,  # noqa: F811
    tmp_path: Path,
) -> None:
    """Sessions no worker holds were labelled "unloaded" (the service's word); two sessions
    named by the same first message showed the same title."""
    url = store(tmp_path)

    def profiles(rt: Runtime) -> list[Profile]:
        adapter = ScriptedAdapter([text_response("one"), text_response("two")])
        rt.llm.register_adapter(["mock"], adapter)
        return [Profile(name="default", options=AgentOptions(provider="mock", model="m"))]

    async with served(create_app(url, profiles)) as client:
        for sid in ("s_aaaaaa111111", "s_bbbbbb222222"):
            created = await client.post("/v1/sessions", json={"session_id": sid, "input": "hello"})
            assert created.status_code == 201
    async with served(create_app(url, profiles)) as client:  # a new process: nothing loaded
        listed = (await client.get("/v1/sessions")).json()["sessions"]
        assert {row["status"] for row in listed} == {"unloaded"}
        chat = Chat(page, base_of(client), tmp_path)
        await chat.open()
        items = chat.session_list.get_by_test_id("session-item")
        await expect(items.locator("a.open")).to_have_text(
            ["hello · 222222", "hello · 111111"], timeout=15_000
        )
        await expect(items.locator(".badge")).to_have_text(["idle", "idle"])
        await chat.shot("list")
        assert chat.errors == []
