"""MCP content items as blocks (``block_from_mcp``): images and embedded resources become
image and file blocks; hostile items (bad base64, a lying MIME type, an unreadable kind)
become a short note, never inline base64."""

from __future__ import annotations

import base64

import mcp_types as types

from steerloop.mcp._content import block_from_mcp
from steerloop.messages import FileBlock, ImageBlock, TextBlock

from ..media import pdf, png

PNG = png(3, 2)
PDF = pdf(1)


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def test_text_and_image() -> None:
    assert block_from_mcp(types.TextContent(type="text", text="hi")) == TextBlock("hi")
    image = block_from_mcp(types.ImageContent(type="image", data=b64(PNG), mime_type="image/png"))
    assert isinstance(image, ImageBlock)
    assert (image.media_type, image.data) == ("image/png", PNG)


def test_embedded_resources_become_files_named_by_their_uri() -> None:
    text = types.EmbeddedResource(
        type="resource",
        resource=types.TextResourceContents(
            uri="file:///docs/read%20me.md", mime_type="text/markdown", text="# hi"
        ),
    )
    assert block_from_mcp(text) == FileBlock("text/markdown", b"# hi", "read me.md")
    blob = types.EmbeddedResource(
        type="resource",
        resource=types.BlobResourceContents(
            uri="s3://bucket/a/spec.pdf", mime_type="application/pdf", blob=b64(PDF)
        ),
    )
    assert block_from_mcp(blob) == FileBlock("application/pdf", PDF, "spec.pdf")
    picture = types.EmbeddedResource(
        type="resource",
        resource=types.BlobResourceContents(uri="x://p/../", mime_type="image/png", blob=b64(PNG)),
    )
    assert block_from_mcp(picture) == ImageBlock("image/png", PNG)
    odd = types.EmbeddedResource(
        type="resource",
        resource=types.TextResourceContents(uri="x:", mime_type="weird/kind", text="plain"),
    )
    assert block_from_mcp(odd) == FileBlock("text/plain", b"plain", None)


def test_hostile_items_become_notes() -> None:
    """Bad base64, an image that is not what its MIME type says, an executable, audio."""
    bad = types.ImageContent(type="image", data="not base64!!", mime_type="image/png")
    assert block_from_mcp(bad) == TextBlock("[image omitted: its data is not valid base64]")
    lying = types.ImageContent(type="image", data=b64(PDF), mime_type="image/png")
    note = block_from_mcp(lying)
    assert isinstance(note, TextBlock) and "image data is not image/png" in note.text
    exe = types.EmbeddedResource(
        type="resource",
        resource=types.BlobResourceContents(
            uri="file:///a.exe", mime_type="application/x-msdownload", blob=b64(b"MZ\x90")
        ),
    )
    note = block_from_mcp(exe)
    assert isinstance(note, TextBlock)
    assert note.text.startswith("[resource file:///a.exe (application/x-msdownload, 3 B) omitted")
    assert b64(b"MZ\x90") not in note.text
    audio = types.AudioContent(type="audio", data=b64(b"RIFF"), mime_type="audio/wav")
    assert block_from_mcp(audio) == TextBlock(
        "[audio (audio/wav) omitted: models here take no audio]"
    )
