"""Token estimates of images and files by the providers' published rules (see
``context/_media_tokens``): worked examples of each rule, and what the session estimate adds
for an image on the surface."""

from __future__ import annotations

import pytest

from steerloop import FileBlock, ImageBlock, TextBlock, user_message
from steerloop.context import estimate_message_tokens
from steerloop.context._media_tokens import (
    IMAGE_CEILING,
    PDF_PAGE_TOKENS,
    binary_tokens,
    image_tokens,
)
from steerloop.messages import block_from_json, block_to_json

from ..media import pdf, png


@pytest.mark.parametrize(
    ("size", "tokens"),
    [
        # 200 x 200: Anthropic 200*200/750 = 54; OpenAI one tile: 85 + 170 = 255.
        ((200, 200), 255),
        # 1000 x 1000: Anthropic 1000*1000/750 = 1334; OpenAI 768 x 768 -> 4 tiles = 765.
        ((1000, 1000), 1334),
        # 4000 x 3000: Anthropic scales to 1.15 MP -> 1,150,000/750 = 1534 (ceil 1534);
        # OpenAI 2048 x 1536 -> 1024 x 768 -> 2 x 2 tiles = 765.
        ((4000, 3000), 1534),
        # 2048 x 512: Anthropic 1568 x 392 -> 820; OpenAI short side 512 stays -> 4 x 1 tiles
        # = 85 + 680 = 765.
        ((2048, 512), 820),
    ],
)
def test_image_rule(size: tuple[int, int], tokens: int) -> None:
    assert image_tokens(*size) == tokens


def test_blocks() -> None:
    assert binary_tokens(ImageBlock("image/png", png(200, 200))) == 255
    assert binary_tokens(FileBlock("application/pdf", pdf(3), "a.pdf")) == 3 * PDF_PAGE_TOKENS
    text = FileBlock("text/plain", b"x" * 400, "a.txt")
    assert binary_tokens(text) == 0  # counted as its 400 characters instead
    stored = block_from_json(block_to_json(ImageBlock("image/png", png(201, 200))))
    assert isinstance(stored, ImageBlock)
    assert binary_tokens(stored) == IMAGE_CEILING  # no bytes at hand: the ceiling
    assert binary_tokens(ImageBlock("image/png", url="https://x/y.png")) == IMAGE_CEILING
    broken = FileBlock("application/pdf", b"%PDF-1.7 not really", "x.pdf")
    assert binary_tokens(broken) == PDF_PAGE_TOKENS  # unreadable: one page by its size


def test_message_estimate_adds_the_image_to_the_text() -> None:
    plain = user_message("x" * 400)
    with_image = user_message([TextBlock("x" * 400), ImageBlock("image/png", png(200, 200))])
    with_text_file = user_message([TextBlock("x" * 400), FileBlock("text/plain", b"y" * 400)])
    base = estimate_message_tokens([plain])
    assert estimate_message_tokens([with_image]) == base + 255
    assert estimate_message_tokens([with_text_file]) == base + 100


def test_the_session_estimate_and_the_compaction_transcript_see_the_image() -> None:
    """The estimate of a session with an image on its surface counts the image by its rule
    (not its bytes as characters); compaction's transcript names the attachment, which the
    summary replaces."""
    from steerloop.context._estimate import estimate_tokens
    from steerloop.context._plan import transcript
    from steerloop.session import Session

    plain, pictured = Session._create("a"), Session._create("b")
    plain.append(user_message("x" * 400), surface_op="append")
    shot = ImageBlock("image/png", png(200, 200), name="shot.png")
    pictured.append(user_message([TextBlock("x" * 400), shot]), surface_op="append")
    assert estimate_tokens(pictured) == estimate_tokens(plain) + 255
    text = transcript(pictured, pictured.surface_seqs(), tool_result_chars=None)
    assert text == f"User: {'x' * 400}\n[attached {shot.describe()}]"
