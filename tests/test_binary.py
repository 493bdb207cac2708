"""``ImageBlock`` / ``FileBlock``: what a block accepts, its stored form, and hostile input
(a lying media type, bytes that are not what they claim, bad names and URLs, forged
references)."""

from __future__ import annotations

from pathlib import Path

import pytest

from steerloop import FileBlock, ImageBlock, TextBlock, user_message
from steerloop._media import blob_hash
from steerloop.messages import block_from_json, block_to_json, message_from_json, message_to_json

from .media import pdf, png

PNG = png(2, 2)


def test_stored_form_names_the_blob_and_round_trips() -> None:
    image = ImageBlock("image/png", PNG, name="a.png")
    assert block_to_json(image) == {
        "type": "image",
        "media_type": "image/png",
        "blob": blob_hash(PNG),
        "size": len(PNG),
        "name": "a.png",
    }
    back = block_from_json(block_to_json(image))
    assert back == image and back.data is None
    url = ImageBlock("image/jpeg", url="https://example.com/a.jpg")
    assert block_to_json(url) == {
        "type": "image",
        "media_type": "image/jpeg",
        "url": "https://example.com/a.jpg",
    }
    assert block_from_json(block_to_json(url)) == url
    doc = FileBlock("application/pdf", pdf(1), "spec.pdf")
    assert block_from_json(block_to_json(doc)) == doc
    message = user_message([TextBlock("see"), image, doc])
    assert message_from_json(message_to_json(message)) == message


def test_from_path_reads_the_type_from_the_bytes(tmp_path: Path) -> None:
    (tmp_path / "shot.jpg").write_bytes(PNG)  # a PNG whatever its suffix says
    image = ImageBlock.from_path(tmp_path / "shot.jpg")
    assert (image.media_type, image.name, image.data) == ("image/png", "shot.jpg", PNG)
    (tmp_path / "notes.md").write_text("# notes\n")
    assert FileBlock.from_path(tmp_path / "notes.md") == FileBlock(
        "text/markdown", b"# notes\n", "notes.md"
    )
    (tmp_path / "data").write_text("plain")
    assert FileBlock.from_path(tmp_path / "data").media_type == "text/plain"
    (tmp_path / "spec.bin").write_bytes(pdf(1))
    assert FileBlock.from_path(tmp_path / "spec.bin").media_type == "application/pdf"
    (tmp_path / "blob.bin").write_bytes(b"\xff\xfe\x00binary")
    with pytest.raises(ValueError, match="neither a PDF nor UTF-8 text"):
        FileBlock.from_path(tmp_path / "blob.bin")
    with pytest.raises(ValueError, match="is not a PNG, JPEG, GIF or WEBP image"):
        ImageBlock.from_path(tmp_path / "notes.md")
    (tmp_path / "big.png").write_bytes(png(64, 64, noise=True))
    with pytest.raises(ValueError, match=r"larger than 1\.0 KiB"):
        ImageBlock.from_path(tmp_path / "big.png", max_bytes=1024)


@pytest.mark.parametrize(
    ("make", "error"),
    [
        (lambda: ImageBlock("image/svg+xml", b"<svg/>"), "unsupported image type"),
        (lambda: ImageBlock("image/png", pdf(1)), r"image data is not image/png \(no image"),
        (
            lambda: ImageBlock("image/jpeg", PNG),
            r"image data is not image/jpeg \(it is image/png\)",
        ),
        (lambda: ImageBlock("image/png"), "needs data or url"),
        (lambda: ImageBlock("image/png", b""), "image data is empty"),
        (lambda: ImageBlock("image/png", "iVBOR"), "must be bytes"),  # type: ignore[arg-type]
        (lambda: ImageBlock("image/png", PNG, "https://x/y.png"), "data or url, not both"),
        (lambda: ImageBlock("image/png", url="file:///etc/passwd"), "http"),
        (lambda: ImageBlock("image/png", url="javascript:alert(1)"), "http"),
        (lambda: ImageBlock("image/png", PNG, name="../../x.png"), "plain file name"),
        (lambda: ImageBlock("image/png", PNG, name="a\x00b"), "plain file name"),
        (lambda: ImageBlock("image/png", PNG, blob="sha256:" + "0" * 64), "does not match"),
        (lambda: ImageBlock("image/png", blob="sha256:zz", size=1), "not a blob hash"),
        (lambda: ImageBlock("image/png", blob=blob_hash(PNG)), "needs its size"),
        (lambda: ImageBlock("image/png", blob=blob_hash(PNG), size=-1), "needs its size"),
        (lambda: ImageBlock("IMAGE/PNG\n", PNG), "not a media type"),
        (lambda: FileBlock("application/zip", b"PK"), "unsupported file type"),
        (lambda: FileBlock("application/pdf", b"%PS-Adobe"), "not a PDF"),
        (lambda: FileBlock("text/plain", b"\xff\xfe"), "not UTF-8"),
        (lambda: FileBlock("text/plain", b"a\x00b"), "NUL bytes"),
    ],
)
def test_hostile_blocks_are_refused(make: object, error: str) -> None:
    with pytest.raises(ValueError, match=error):
        make()  # type: ignore[operator]


def test_a_stored_reference_with_unknown_fields_or_a_url_file_is_refused() -> None:
    stored = block_to_json(ImageBlock("image/png", PNG))
    with pytest.raises(ValueError, match="unknown image block field"):
        block_from_json({**stored, "data": "iVBOR"})
    with pytest.raises(ValueError, match="a file block has no url"):
        block_from_json({"type": "file", "media_type": "text/plain", "url": "https://x"})
