"""Images and files in the web chat (issue 27) in Debian's chromium: paste an image into the
composer and drop one onto the chat, see the thumbnails (read from the blob URL with the
token), a file chip with name and size, the model receives the bytes; a file over the
server's cap is refused in the page before anything is uploaded."""

from __future__ import annotations

import asyncio
import base64
import re
import struct
import zlib
from pathlib import Path
from typing import Any

import pytest
from playwright.async_api import Page, expect

from steerloop import AgentOptions, FileBlock, ImageBlock, TextBlock
from steerloop.service import Profile, create_app
from steerloop.testing import ScriptedAdapter, text_response

from .served import WAIT, served
from .test_attachments import png
from .test_webchat import Chat, base_of, browser, page

__all__ = ["browser", "page"]

pytestmark = [pytest.mark.timeout(120), pytest.mark.asyncio(loop_scope="module")]

TOKEN = "attach-token-51c2"
CAP = 20_000  # bytes per attachment, told to the page
BLOB = re.compile(r"^blob:")  # a thumbnail shows the bytes it fetched, as an object URL


class Model:
    def __init__(self) -> None:
        self.adapter = ScriptedAdapter([text_response(f"I see it ({n})") for n in range(1, 9)])

    def profiles(self, rt: Any) -> list[Profile]:
        rt.llm.register_adapter(["mock"], self.adapter)
        return [Profile(name="default", options=AgentOptions(provider="mock", model="m"))]

    async def requests(self, count: int) -> None:
        async with asyncio.timeout(WAIT):
            while len(self.adapter.requests) < count:
                await asyncio.sleep(0.02)

    def user_blocks(self, n: int) -> tuple[Any, ...]:
        messages = self.adapter.requests[n].messages
        return next(m for m in reversed(messages) if m.role == "user").content


# Builds a DataTransfer holding one file from base64 and fires ``kind`` with it: a paste on
# the composer (a ClipboardEvent) or a drag's enter/over/drop on the chat pane.
_FIRE = """([kind, selector, name, type, data]) => {
  const bytes = Uint8Array.from(atob(data), (c) => c.charCodeAt(0));
  const transfer = new DataTransfer();
  transfer.items.add(new File([bytes], name, { type }));
  const target = document.querySelector(selector);
  if (kind === "paste") {
    return target.dispatchEvent(
      new ClipboardEvent("paste", { clipboardData: transfer, bubbles: true, cancelable: true }),
    );
  }
  for (const step of ["dragenter", "dragover", "drop"]) {
    target.dispatchEvent(
      new DragEvent(step, { dataTransfer: transfer, bubbles: true, cancelable: true }),
    );
  }
  return true;
}"""


async def fire(page: Page, kind: str, selector: str, name: str, type: str, data: bytes) -> None:
    await page.evaluate(_FIRE, [kind, selector, name, type, base64.b64encode(data).decode()])


async def test_paste_and_drop_show_thumbnails_and_the_model_gets_the_bytes(
    page: Page, tmp_path: Path
) -> None:
    """A pasted screenshot starts a session; a dropped image and a dropped text file go with
    the next message. The transcript shows both thumbnails (loaded: natural width > 0) and
    the file's chip; each request to the model holds the exact bytes. The service has a
    token: the thumbnails are fetched with it."""
    first, second = png(24, 16, seed=1), png(30, 20, seed=2)
    notes = b"line one\nline two\n"
    model = Model()
    app = create_app(
        f"sqlite:///{tmp_path / 's.db'}",
        model.profiles,
        token=TOKEN,
        max_attachment_bytes=CAP,
        max_message_attachment_bytes=2 * CAP,
    )
    async with served(app) as client:
        chat = Chat(page, base_of(client), tmp_path)
        await page.add_init_script(f"sessionStorage.setItem('steerloop.token', '{TOKEN}')")
        await chat.open()
        await expect(page.locator("body")).to_have_attribute("data-max-attachment-bytes", str(CAP))
        await fire(page, "paste", '[data-testid="composer"]', "shot.png", "image/png", first)
        await expect(chat.attachment).to_have_count(1)
        await expect(chat.attachment).to_contain_text("shot.png")
        await chat.type_and_enter("what is in this picture?")
        thumbs = chat.entries("user").get_by_test_id("thumbnail")
        await expect(thumbs).to_have_count(1)
        await expect(thumbs.first).to_have_attribute("src", BLOB)
        await expect(chat.attachments).to_be_hidden()
        await model.requests(1)
        text, image = model.user_blocks(0)
        assert text == TextBlock("what is in this picture?")
        assert isinstance(image, ImageBlock) and image.data == first
        assert await thumbs.first.evaluate("img => img.naturalWidth") == 24
        await expect(chat.entries("assistant")).to_have_count(1)
        # Drop an image and a text file onto the chat pane; send them with a question.
        await fire(page, "drop", ".chat", "chart.png", "image/png", second)
        await fire(page, "drop", ".chat", "notes.txt", "text/plain", notes)
        await expect(chat.attachment).to_have_count(2)
        await chat.type_and_enter("and these?")
        await expect(thumbs).to_have_count(2)
        chip = chat.entries("user").get_by_test_id("file-chip")
        await expect(chip).to_have_count(1)
        await expect(chip).to_contain_text("notes.txt")
        await expect(chip).to_contain_text(f"{len(notes)} B")
        await model.requests(2)
        text, image, document = model.user_blocks(1)
        assert text == TextBlock("and these?") and image.data == second
        assert isinstance(document, FileBlock) and document.data == notes
        assert document.name == "notes.txt" and document.media_type == "text/plain"
        assert await thumbs.nth(1).evaluate("img => img.naturalWidth") == 30
        # Every blob read carried the token in its header, never in the URL.
        blob_reads = [r for r in chat.requests if "/blobs/" in r.url]
        assert len(blob_reads) == 2
        for request in blob_reads:
            assert (await request.all_headers())["authorization"] == f"Bearer {TOKEN}"
            assert TOKEN not in request.url
        assert chat.errors == []
        await chat.shot("attachments")


async def test_a_file_over_the_cap_is_refused_in_the_page(page: Page, tmp_path: Path) -> None:
    """A chosen file over the server's per-attachment cap never leaves the page: the page
    says why, the tray stays empty, no message is posted; an unsupported type likewise."""
    model = Model()
    app = create_app(f"sqlite:///{tmp_path / 's.db'}", model.profiles, max_attachment_bytes=CAP)
    async with served(app) as client:
        chat = Chat(page, base_of(client), tmp_path)
        await chat.open()
        big = png(100, 100, seed=5)
        assert len(big) > CAP
        await chat.attach_input.set_input_files(
            files=[{"name": "huge.png", "mimeType": "image/png", "buffer": big}]
        )
        await expect(chat.error).to_be_visible()
        await expect(chat.error).to_contain_text(
            f"Not attached: huge.png is {len(big) / 1024:.1f} KiB, over the limit of "
            f"{CAP / 1024:.1f} KiB per attachment"
        )
        await expect(chat.attachments).to_be_hidden()
        await expect(chat.attachment).to_have_count(0)
        await fire(
            page, "paste", '[data-testid="composer"]', "a.exe", "application/x-msdownload", b"MZ"
        )
        await expect(chat.error).to_contain_text("a.exe is not an image")
        await expect(chat.attachment).to_have_count(0)
        # Pressing Enter with nothing typed and nothing attached sends nothing.
        await chat.composer.press("Enter")
        await chat.shot("refused")
        posts = [r for r in chat.requests if r.method == "POST"]
        assert posts == [] and model.adapter.requests == []


def chart_png(width: int = 320, height: int = 180) -> bytes:
    """A small bar chart as a PNG (drawn pixel by pixel: no imaging library needed)."""
    green, orange = (47, 111, 94), (196, 120, 40)
    bars = [(0.35, green), (0.55, green), (0.8, orange), (0.6, green), (0.9, green)]
    rows = []
    for y in range(height):
        row = bytearray(b"\0")
        for x in range(width):
            pixel = (255, 255, 255)
            if y in (20, 70, 120) and x > 30:
                pixel = (230, 232, 234)  # grid lines
            if x == 30 or y == height - 20:
                pixel = (90, 97, 103)  # axes
            slot, offset = divmod(x - 40, 56)
            if 0 <= slot < len(bars) and offset < 40 and x - 40 >= 0:
                share, colour = bars[slot]
                if height - 20 - int(share * (height - 40)) <= y < height - 20:
                    pixel = colour
            row += bytes(pixel)
        rows.append(bytes(row))

    def chunk(kind: bytes, body: bytes) -> bytes:
        crc = zlib.crc32(kind + body)
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", crc)

    head = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    idat = zlib.compress(b"".join(rows), 9)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", head) + chunk(b"IDAT", idat) + chunk(b"IEND", b"")


async def test_the_readme_screenshot_an_image_and_a_file_in_the_transcript(
    browser: Any, tmp_path: Path
) -> None:
    """docs/webchat-image.png is this test's ``webchat-image.png`` (960x600): a chart dropped
    into the chat with a PDF, its thumbnail and the file's chip in the transcript, the model's
    answer, and the next attachment waiting in the tray; nothing clipped."""
    chart = chart_png()
    spec = b"%PDF-1.4\n" + b"%" * 40_000 + b"\n%%EOF\n"
    model = Model()
    model.adapter = ScriptedAdapter(
        [
            text_response(
                "The fifth quarter is the highest, about 90% of the scale; the third, in "
                "orange, is the one the spec calls out as the outlier (section 2.3)."
            )
        ]
    )
    context = await browser.new_context(viewport={"width": 960, "height": 600})
    try:
        page = await context.new_page()
        app = create_app(f"sqlite:///{tmp_path / 's.db'}", model.profiles)
        async with served(app) as client:
            chat = Chat(page, base_of(client), tmp_path)
            await chat.open()
            await fire(page, "drop", ".chat", "quarterly.png", "image/png", chart)
            await fire(page, "drop", ".chat", "spec.pdf", "application/pdf", spec)
            await chat.type_and_enter("What does this chart say, given the spec?")
            thumb = chat.entries("user").get_by_test_id("thumbnail")
            await expect(thumb).to_have_attribute("src", BLOB)
            await expect(chat.entries("assistant")).to_contain_text("fifth quarter")
            assert await thumb.evaluate("img => img.naturalWidth") == 320
            await fire(
                page, "paste", '[data-testid="composer"]', "errors.log", "text/plain", b"x\n"
            )
            await expect(chat.attachment).to_have_count(1)
            await chat.composer.fill("And this log?")
            overflow = await page.evaluate(
                """() => {
                    const pane = document.querySelector('[data-testid="scroll"]');
                    const cut = [...document.querySelectorAll(".entry, .file-chip, .attachment")]
                        .filter((n) => n.scrollWidth > n.clientWidth + 1);
                    return [pane.scrollHeight - pane.clientHeight, cut.length];
                }"""
            )
            assert overflow == [0, 0]
            await page.mouse.move(0, 599)
            await page.screenshot(path=tmp_path / "webchat-image.png")
            request = model.user_blocks(0)
            assert request[1].data == chart and request[2].data == spec
            assert chat.errors == []
    finally:
        await context.close()
