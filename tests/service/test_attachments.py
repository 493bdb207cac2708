"""Images and files over HTTP (issue 27), on both hosts (SQLite in process, PostgreSQL with
its worker): a message's ``content`` as parts reaches the model as bytes, the log names each
blob by URL, ``GET /v1/sessions/{id}/blobs/{hash}`` serves it, hostile input is refused
with a clear code and writes nothing; AG-UI 1.0 media parts (and the pre-1.0 ``binary``
part) map onto the same blocks."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import random
import struct
import zlib
from typing import Any

import pytest
from ag_ui.core import (
    DocumentPart,
    ImagePart,
    InputContentDataSource,
    InputContentUrlSource,
    RunAgentInput,
    TextPart,
    UserMessage,
)

from steerloop import AgentOptions, FileBlock, ImageBlock, TextBlock
from steerloop.service import Profile, create_app
from steerloop.testing import ScriptedAdapter, text_response

from .aguisupport import agui_run
from .served import WAIT, read_sse, served, wait_for_log
from .stores import store_url
from .test_agui_client import drive

__all__ = ["store_url"]

pytestmark = pytest.mark.timeout(120)


def png(width: int = 2, height: int = 2, seed: int = 0) -> bytes:
    """A valid RGB PNG (``seed`` varies its pixels, so its hash)."""

    def chunk(kind: bytes, body: bytes) -> bytes:
        return (
            struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))
        )

    noise = random.Random(seed)  # incompressible: the size follows the pixel count
    rows = b"".join(b"\0" + noise.randbytes(width * 3) for _ in range(height))
    head = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", head)
        + chunk(b"IDAT", zlib.compress(rows))
        + chunk(b"IEND", b"")
    )


PDF = b"%PDF-1.4\n1 0 obj<<>>endobj\ntrailer<<>>\n%%EOF\n"


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def sha(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


class Model:
    """A scripted model under the profile ``default``; ``adapter.requests`` records what it got."""

    def __init__(self) -> None:
        self.adapter = ScriptedAdapter([text_response(f"seen {n}") for n in range(1, 20)])

    def profiles(self, rt: Any) -> list[Profile]:
        rt.llm.register_adapter(["mock"], self.adapter)
        return [Profile(name="default", options=AgentOptions(provider="mock", model="m"))]

    async def requests(self, count: int) -> None:
        async with asyncio.timeout(WAIT):
            while len(self.adapter.requests) < count:
                await asyncio.sleep(0.02)

    def last_user_blocks(self) -> tuple[Any, ...]:
        request = self.adapter.requests[-1]
        return next(m for m in reversed(request.messages) if m.role == "user").content


def ended(count: int) -> Any:
    return lambda events: sum(e["type"] == "turn/end" for e in events) >= count


def user_messages(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e["data"] for e in events if e["type"] == "user/message"]


async def test_parts_reach_the_model_and_the_log_serves_them_by_url(store_url: str) -> None:
    """A message of text, an image and a PDF: the model gets the bytes; the log, the SSE feed
    and the blob endpoint name and serve them; another session cannot read them."""
    image, model = png(seed=7), Model()
    app = create_app(store_url, model.profiles, body_limit=4096)  # attachments raise the cap
    async with served(app) as client:
        big = png(64, 64, seed=3)  # > body_limit once in base64: still accepted
        assert len(b64(big)) > 4096
        created = await client.post(
            "/v1/sessions",
            json={
                "session_id": "s-att",
                "input": [{"type": "text", "text": "first"}, {"type": "image", "data": b64(big)}],
            },
        )
        assert created.status_code == 201, created.text
        await wait_for_log(client, "s-att", ended(1))
        assert [type(b) for b in model.last_user_blocks()] == [TextBlock, ImageBlock]
        assert model.last_user_blocks()[1].data == big
        parts = [
            {"type": "text", "text": "what is this?"},
            {"type": "image", "media_type": "image/png", "data": b64(image), "name": "shot.png"},
            {"type": "file", "media_type": "application/pdf", "name": "spec.pdf", "data": b64(PDF)},
        ]
        sent = await client.post(
            "/v1/sessions/s-att/messages", json={"mode": "followup", "content": parts}
        )
        assert sent.status_code == 202, sent.text
        events = await wait_for_log(client, "s-att", ended(2))
        await model.requests(2)
        text, got_image, got_file = model.last_user_blocks()
        assert text == TextBlock("what is this?")
        assert (got_image.media_type, got_image.data, got_image.name) == (
            "image/png",
            image,
            "shot.png",
        )
        assert isinstance(got_file, FileBlock) and got_file.data == PDF
        assert got_file.name == "spec.pdf"
        # The log: references with a blob URL, never the bytes.
        content = user_messages(events)[-1]["content"]
        url = f"/v1/sessions/s-att/blobs/{sha(image)}"
        assert content[1] == {
            "type": "image",
            "media_type": "image/png",
            "blob": sha(image),
            "size": len(image),
            "name": "shot.png",
            "blob_url": url,
        }
        assert content[2]["blob_url"] == f"/v1/sessions/s-att/blobs/{sha(PDF)}"
        assert all("data" not in part for part in content)
        # The SSE feed says the same.
        feed = await read_sse(
            client,
            "/v1/sessions/s-att/events",
            lambda e: e.event == "user/message" and "what is this?" in e.data,
        )
        assert url in feed[-1].data and b64(image) not in feed[-1].data
        # The blob itself.
        blob = await client.get(url)
        assert blob.status_code == 200 and blob.content == image
        assert blob.headers["content-type"] == "image/png"
        assert "immutable" in blob.headers["cache-control"]
        assert blob.headers["x-content-type-options"] == "nosniff"
        again = await client.get(url, headers={"If-None-Match": blob.headers["etag"]})
        assert again.status_code == 304 and again.content == b""
        pdf = await client.get(content[2]["blob_url"])
        assert (pdf.headers["content-type"], pdf.content) == ("application/pdf", PDF)
        # Another session does not reference it: 404, as for a hash never stored.
        assert (
            await client.post("/v1/sessions", json={"session_id": "s-other"})
        ).status_code == 201
        for path in (
            f"/v1/sessions/s-other/blobs/{sha(image)}",
            f"/v1/sessions/s-att/blobs/{sha(b'never stored')}",
        ):
            answer = await client.get(path)
            assert (answer.status_code, answer.json()["error"]["code"]) == (404, "blob_not_found")
        missing = await client.get(f"/v1/sessions/nobody/blobs/{sha(image)}")
        assert missing.status_code == 404


async def test_the_blob_endpoint_needs_the_token_and_refuses_hostile_hashes(
    store_url: str,
) -> None:
    model = Model()
    async with served(create_app(store_url, model.profiles, token="t0k")) as client:
        auth = {"Authorization": "Bearer t0k"}
        body = {"session_id": "s-tok", "input": [{"type": "image", "data": b64(png())}]}
        assert (await client.post("/v1/sessions", json=body, headers=auth)).status_code == 201
        url = f"/v1/sessions/s-tok/blobs/{sha(png())}"
        assert (await client.get(url)).status_code == 401
        client.headers.update(auth)
        await wait_for_log(client, "s-tok", ended(1))
        assert (await client.get(url)).content == png()
        for bad in (
            "sha256:" + "A" * 64,
            "sha256:" + "0" * 63,
            "md5:" + "0" * 32,
            "..%2F..%2Fetc",
            "sha256:" + "0" * 64 + "%00",
            "x" * 600,
        ):
            answer = await client.get(f"/v1/sessions/s-tok/blobs/{bad}", headers=auth)
            assert 400 <= answer.status_code < 500, (bad, answer.status_code)
            assert answer.status_code != 401
        answer = await client.get("/v1/sessions/s-tok/blobs/sha256:" + "g" * 64, headers=auth)
        assert (answer.status_code, answer.json()["error"]["code"]) == (422, "invalid_blob_hash")


def img(**part: Any) -> list[dict[str, Any]]:
    return [{"type": "image", **part}]


def doc(**part: Any) -> list[dict[str, Any]]:
    return [{"type": "file", **part}]


TEXT = "text/plain"
HOSTILE: list[tuple[Any, int, str]] = [
    (img(data="not base64!"), 422, "invalid_base64"),
    (img(data=b64(png())[:-3]), 422, "invalid_base64"),
    ([{"type": "audio", "data": "AAAA"}], 422, "invalid_content"),
    (["just a string in a list"], 422, "invalid_content"),
    ([], 422, "invalid_content"),
    ([{"type": "text", "text": "x"}] * 65, 422, "invalid_content"),
    (img(data=b64(png()), url="https://e.x/a.png"), 422, "invalid_content"),
    (img(), 422, "invalid_content"),
    (img(data=b64(b"GIF89a not a png"), media_type="image/png"), 422, "invalid_attachment"),
    (img(data=b64(b"<svg/>"), media_type="image/svg+xml"), 422, "invalid_attachment"),
    (img(url="javascript:alert(1)"), 422, "invalid_attachment"),
    (img(url="https://e.x/picture"), 422, "invalid_attachment"),
    (doc(media_type="application/pdf", data=b64(b"MZ\x90\x00")), 422, "invalid_attachment"),
    (doc(media_type="application/x-msdownload", data=b64(b"MZ")), 422, "invalid_attachment"),
    (doc(media_type=TEXT, data=b64(b"\xff\xfe")), 422, "invalid_attachment"),
    (doc(media_type=TEXT, name="../etc/passwd", data=b64(b"x")), 422, "invalid_attachment"),
    (doc(media_type=TEXT, data=""), 422, "invalid_attachment"),
    ([{"type": "text", "text": "nul\x00"}], 422, "invalid_text"),
    ([{"type": "text", "text": "x", "extra": 1}], 422, "invalid_body"),
    (img(data=12), 422, "invalid_body"),
    (img(data=b64(png(40, 40))), 413, "attachment_too_large"),
    ([img(data=b64(png(20, 20, s)))[0] for s in range(3)], 413, "attachment_too_large"),
]


async def test_hostile_content_is_refused_with_its_code_and_writes_nothing(
    store_url: str,
) -> None:
    """Each bad part: its 4xx code; the limits are the runtime's, configured on the app."""
    assert 1000 < len(png(20, 20)) < 1500 and len(png(40, 40)) > 1500
    model = Model()
    app = create_app(
        store_url, model.profiles, max_attachment_bytes=1500, max_message_attachment_bytes=3000
    )
    async with served(app) as client:
        assert (await client.post("/v1/sessions", json={"session_id": "s-bad"})).status_code == 201
        for content, status, code in HOSTILE:
            answer = await client.post(
                "/v1/sessions/s-bad/messages", json={"mode": "followup", "content": content}
            )
            assert (answer.status_code, answer.json()["error"]["code"]) == (status, code), (
                content if len(str(content)) < 200 else str(content)[:200],
                answer.text,
            )
            created = await client.post("/v1/sessions", json={"input": content})
            assert created.status_code == status, created.text
        listed = (await client.get("/v1/sessions")).json()["sessions"]
        assert [row["session_id"] for row in listed] == ["s-bad"]
        events = (await client.get("/v1/sessions/s-bad/log")).json()["events"]
        assert user_messages(events) == [] and model.adapter.requests == []
        # Two blocks under each cap and the message's: accepted.
        ok = [{"type": "image", "data": b64(png(20, 20, s))} for s in range(2)]
        answer = await client.post(
            "/v1/sessions/s-bad/messages", json={"mode": "followup", "content": ok}
        )
        assert answer.status_code == 202, answer.text
        await wait_for_log(client, "s-bad", ended(1))
        assert [b.data for b in model.last_user_blocks()] == [png(20, 20, s) for s in range(2)]


async def test_an_idempotent_retry_with_the_same_image_is_one_message(store_url: str) -> None:
    model = Model()
    async with served(create_app(store_url, model.profiles)) as client:
        assert (await client.post("/v1/sessions", json={"session_id": "s-key"})).status_code == 201
        body = {"mode": "followup", "content": [img(data=b64(png()))[0]], "idempotency_key": "k1"}
        first = await client.post("/v1/sessions/s-key/messages", json=body)
        second = await client.post("/v1/sessions/s-key/messages", json=body)
        assert first.status_code == second.status_code == 202
        assert first.json()["cmd_seq"] == second.json()["cmd_seq"]
        other = {
            "mode": "followup",
            "content": [{"type": "image", "data": b64(png(seed=1))}],
            "idempotency_key": "k1",
        }
        reused = await client.post("/v1/sessions/s-key/messages", json=other)
        assert (reused.status_code, reused.json()["error"]["code"]) == (
            409,
            "IDEMPOTENCY_KEY_REUSED",
        )


async def test_agui_media_parts_and_legacy_binary_parts_reach_the_model(store_url: str) -> None:
    """AG-UI 1.0 ``image``/``document`` parts (built with the ``ag-ui-protocol`` models) and a
    pre-1.0 ``binary`` part become blocks; the next run's snapshot shows them by blob URL."""
    image, model = png(seed=9), Model()
    async with served(create_app(store_url, model.profiles)) as client:
        first = RunAgentInput(
            thread_id="t-img",
            run_id="r1",
            state={},
            messages=[
                UserMessage(
                    id="u1",
                    content=[
                        TextPart(text="look"),
                        ImagePart(
                            source=InputContentDataSource(value=b64(image), mime_type="image/png")
                        ),
                        DocumentPart(
                            source=InputContentDataSource(
                                value=b64(PDF), mime_type="application/pdf"
                            ),
                            metadata={"filename": "spec.pdf"},
                        ),
                        ImagePart(
                            source=InputContentUrlSource(value="https://example.com/cat.jpg")
                        ),
                    ],
                )
            ],
            tools=[],
            context=[],
            forwarded_props={},
        )
        events = await agui_run(client, first.model_dump(by_alias=True, exclude_none=True))
        assert events[-1].type.value == "RUN_FINISHED"
        text, got_image, got_pdf, by_url = model.last_user_blocks()
        assert text == TextBlock("look") and got_image.data == image
        assert (got_pdf.name, got_pdf.data) == ("spec.pdf", PDF)
        assert (by_url.url, by_url.media_type) == ("https://example.com/cat.jpg", "image/jpeg")
        legacy = {
            "threadId": "t-img",
            "runId": "r2",
            "state": {},
            "tools": [],
            "context": [],
            "forwardedProps": {},
            "messages": [
                {"id": "u1", "role": "user", "content": "look"},
                {
                    "id": "u2",
                    "role": "user",
                    "content": [
                        {"type": "text", "text": "and this"},
                        {
                            "type": "binary",
                            "mimeType": "image/png",
                            "data": b64(png(seed=2)),
                            "filename": "b.png",
                        },
                    ],
                },
            ],
        }
        second = await agui_run(client, legacy)
        assert model.last_user_blocks()[1].data == png(seed=2)
        assert model.last_user_blocks()[1].name == "b.png"
        snapshot = next(e for e in second if e.type.value == "MESSAGES_SNAPSHOT")
        shown = next(m for m in snapshot.messages if m.id == "u1").content
        assert isinstance(shown, list) and shown[1].source.value == (
            f"/v1/sessions/t-img/blobs/{sha(image)}"
        )
        assert shown[2].metadata == {"filename": "spec.pdf"}
        url = shown[1].source.value
        assert (await client.get(url)).content == image
        bad = dict(legacy, runId="r3")
        by_id = {"type": "binary", "mimeType": "image/png", "id": "f1"}
        bad["messages"] = [{"id": "u3", "role": "user", "content": [by_id]}]
        answer = await client.post("/v1/agui", json=bad)
        assert (answer.status_code, answer.json()["error"]["code"]) == (422, "invalid_content")


async def test_the_official_agui_client_sends_an_image_part(store_url: str) -> None:
    """``@ag-ui/client``'s ``HttpAgent`` sends a user message with a 1.0 image part and a
    document part: the model gets the bytes; the next run's ``MESSAGES_SNAPSHOT`` (checked
    with ``@ag-ui/core``'s schemas by the script) shows them by blob URL."""
    image, model = png(seed=11), Model()
    first = [
        {"type": "text", "text": "what is this?"},
        {"type": "image", "source": {"type": "data", "value": b64(image), "mimeType": "image/png"}},
        {
            "type": "document",
            "source": {"type": "data", "value": b64(PDF), "mimeType": "application/pdf"},
            "metadata": {"filename": "spec.pdf"},
        },
    ]
    async with served(create_app(store_url, model.profiles)) as client:
        d = await drive(client, "t-client", {"user": first}, {"user": "thanks"})
        one, two = await d.line(), await d.line()
        await d.finish()
        assert one["error"] is None and one["outcome"] == "success"
        assert two["error"] is None and two["events"][1] == "MESSAGES_SNAPSHOT"
        blocks: Any = model.adapter.requests[0].messages[-1].content
        text, got_image, got_pdf = blocks
        assert text == TextBlock("what is this?") and got_image.data == image
        assert (got_pdf.name, got_pdf.data) == ("spec.pdf", PDF)
        snapshot = next(e for e in two["raw"] if e["type"] == "MESSAGES_SNAPSHOT")
        shown = next(m for m in snapshot["messages"] if m["id"] == "u1")["content"]
        url = f"/v1/sessions/t-client/blobs/{sha(image)}"
        assert shown[1] == {
            "type": "image",
            "source": {"type": "url", "value": url, "mimeType": "image/png"},
        }
        assert shown[2]["metadata"] == {"filename": "spec.pdf"}
        assert (await client.get(url)).content == image
