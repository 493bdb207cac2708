"""Images and files through the loop: ``UNSUPPORTED_INPUT`` before any request (and a
refused input never reaches the surface), the size caps when a message is sent, tool
results fitted to the caps and the calling model, ``read_file`` of an image."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from steerloop import (
    FileBlock,
    ImageBlock,
    Runtime,
    TextBlock,
    ToolResult,
    tool,
    user_message,
)
from steerloop.llm import ModelInfo
from steerloop.messages import ToolResultMessage
from steerloop.testing import text_response, tool_call_response
from steerloop.workspace import workspace_tools

from ..media import pdf, png
from ..support import Harness, compact, last_reason, settle

PNG = png(8, 8)
TEXT_ONLY = ModelInfo(input_modalities=frozenset({"text"}))
NO_FILES = ModelInfo(input_modalities=frozenset({"text", "image"}))


def image(name: str = "shot.png") -> ImageBlock:
    return ImageBlock("image/png", PNG, name=name)


def tool_results(h: Harness, request: int) -> list[ToolResultMessage]:
    return [m for m in h.adapter.requests[request].messages if isinstance(m, ToolResultMessage)]


async def test_an_image_for_a_text_model_ends_the_turn_before_any_request(h: Harness) -> None:
    """C7: the turn ends ``error`` ``UNSUPPORTED_INPUT`` naming the block; nothing is sent;
    the refused message never reaches the surface, so the next text turn goes out clean."""
    h.adapter.model_info = TEXT_ONLY
    agent = await h.agent(text_response("fine"))
    agent.followup(user_message([TextBlock("look"), image()]))
    await settle(agent)
    reason = last_reason(agent)
    assert reason.kind == "error"
    assert reason.error.code == "UNSUPPORTED_INPUT"
    assert reason.error.message == (
        f"mock/m does not accept images: image shot.png (image/png, {len(PNG)} B) in a user "
        "message (the new input); nothing was sent"
    )
    assert h.adapter.requests == []
    assert not any(e.type == "user/message" for e in agent.session.events)

    agent.followup(user_message("just text then"))
    await settle(agent)
    assert last_reason(agent).kind == "completed"
    [request] = h.adapter.requests
    assert [m.content for m in request.messages] == [(TextBlock("just text then"),)]


async def test_a_file_for_a_model_without_files_is_refused(h: Harness) -> None:
    h.adapter.model_info = NO_FILES
    agent = await h.agent()
    agent.followup(user_message([FileBlock("application/pdf", pdf(1), "spec.pdf")]))
    await settle(agent)
    error = last_reason(agent).error
    assert error.code == "UNSUPPORTED_INPUT"
    assert "does not accept files (PDF): file spec.pdf (application/pdf," in error.message
    assert h.adapter.requests == []


async def test_a_text_file_needs_only_text(h: Harness) -> None:
    """A text file is sent as text by every adapter: a text-only model takes it."""
    h.adapter.model_info = TEXT_ONLY
    agent = await h.agent(text_response("read"))
    notes = FileBlock("text/markdown", b"# notes", "notes.md")
    agent.followup(user_message([TextBlock("see"), notes]))
    await settle(agent)
    assert last_reason(agent).kind == "completed"
    assert h.adapter.requests[0].messages[-1].content == (TextBlock("see"), notes)


async def test_an_image_in_the_history_is_refused_for_a_text_model(h: Harness) -> None:
    """A model switched to one without images: the image already on the surface is never
    sent; the error says it is in the history."""
    agent = await h.agent(text_response("a square"))
    agent.followup(user_message([TextBlock("look"), image()]))
    await settle(agent)
    assert last_reason(agent).kind == "completed"
    h.adapter.model_info = TEXT_ONLY
    agent.followup(user_message("and?"))
    await settle(agent)
    error = last_reason(agent).error
    assert error.code == "UNSUPPORTED_INPUT"
    assert "image shot.png" in error.message and "(the history)" in error.message
    assert len(h.adapter.requests) == 1


async def test_size_caps_refuse_a_message_when_it_is_sent() -> None:
    """``Runtime.open(max_attachment_bytes=..., max_message_attachment_bytes=...)``: a block
    or a message over its cap is refused with a clear error; nothing is queued or logged."""
    rt = await Runtime.open(
        max_attachment_bytes=len(PNG), max_message_attachment_bytes=len(PNG) + 10
    )
    try:
        h = Harness(rt)
        agent = await h.agent()
        before = len(agent.session.events)
        big = ImageBlock("image/png", png(40, 40, noise=True), name="big.png")
        with pytest.raises(ValueError, match=r"image big\.png \(image/png, .*\) is over the limit"):
            agent.followup(user_message([big]))
        with pytest.raises(ValueError, match=r"attachments \(.*\) are over the limit of"):
            agent.followup(user_message([image("a.png"), image("b.png")]))
        assert len(agent.session.events) == before
        assert rt.attachment_limits.block_bytes == len(PNG)
    finally:
        await rt.close()
    with pytest.raises(ValueError, match="block_bytes must be a positive integer"):
        Runtime.open(max_attachment_bytes=0)


@tool
async def snap(kind: str) -> ToolResult:
    """Return an attachment of ``kind``."""
    if kind == "image":
        return ToolResult(content=[TextBlock("snapped"), image()])
    if kind == "big":
        return ToolResult(
            content=[ImageBlock("image/png", png(64, 64, noise=True), name="big.png")]
        )
    return ToolResult(content=[TextBlock("x"), object()])  # type: ignore[list-item]


async def run_snap(h: Harness, kind: str) -> Any:
    h.rt.tools.register(snap)
    agent = await h.agent(tool_call_response("c1", "snap", {"kind": kind}), text_response("ok"))
    agent.followup(user_message("snap"))
    await settle(agent)
    return agent


async def test_a_tool_image_reaches_a_model_that_takes_images(h: Harness) -> None:
    await run_snap(h, "image")
    [result] = tool_results(h, 1)
    assert result.content == (TextBlock("snapped"), image())
    assert isinstance(result.content[1], ImageBlock) and result.content[1].data == PNG


async def test_a_tool_image_for_a_text_model_becomes_a_note(h: Harness) -> None:
    """The result is still recorded (the call is answered); the image is replaced by a note
    the model can read, so the next request is not refused."""
    h.adapter.model_info = TEXT_ONLY
    agent = await run_snap(h, "image")
    assert last_reason(agent).kind == "completed"
    [result] = tool_results(h, 1)
    assert result.content == (
        TextBlock("snapped"),
        TextBlock(
            f"[image shot.png (image/png, {len(PNG)} B) omitted: the model does not accept images]"
        ),
    )


async def test_tool_attachments_over_the_cap_and_non_blocks() -> None:
    rt = await Runtime.open(max_attachment_bytes=4096)
    try:
        h = Harness(rt)
        agent = await run_snap(h, "big")
        [result] = tool_results(h, 1)
        [note] = result.content
        assert isinstance(note, TextBlock)
        assert note.text.startswith("[image big.png (image/png, ")
        assert note.text.endswith("omitted: it is over the limit of 4.0 KiB per attachment]")
        agent2 = await h.agent(
            tool_call_response("c2", "snap", {"kind": "junk"}),
            text_response("ok"),
            session_id="s-2",
        )
        agent2.followup(user_message("snap"))
        await settle(agent2)
        assert "result(c2,TOOL_FAILED)" in compact(agent2.session, only=("result(",))
        assert agent.session.id == "s-1"
    finally:
        await rt.close()


@pytest.mark.parametrize("accepts", [True, False])
async def test_read_file_of_an_image(h: Harness, tmp_path: Path, accepts: bool) -> None:
    """``read_file`` of a PNG in the workspace: an image block for a model that takes images,
    a clear BINARY_FILE error otherwise."""
    (tmp_path / "shot.png").write_bytes(PNG)
    if not accepts:
        h.adapter.model_info = TEXT_ONLY
    h.rt.tools.register(next(t for t in workspace_tools(tmp_path) if t.name == "read_file"))
    agent = await h.agent(
        tool_call_response("c1", "read_file", {"path": "shot.png"}), text_response("ok")
    )
    agent.followup(user_message("read it"))
    await settle(agent)
    [result] = tool_results(h, 1)
    if accepts:
        assert result.content == (
            TextBlock(f"shot.png: image shot.png (image/png, {len(PNG)} B)"),
            ImageBlock("image/png", PNG, name="shot.png"),
        )
    else:
        assert result.is_error
        assert result.content == (
            TextBlock("'shot.png' is an image (image/png); the model does not accept images"),
        )
