"""What an image or a file costs in tokens, by the providers' published rules.

Images (dimensions read from the header with ``imagesize``):

* Anthropic, "Vision" guide (docs.anthropic.com/en/docs/build-with-claude/vision): an image
  costs about ``width * height / 750`` tokens after it is scaled down to fit 1568 px on its
  long edge and about 1.15 megapixels, so at most about 1,600 tokens.
* OpenAI, "Images and vision" guide (platform.openai.com/docs/guides/images-vision), detail
  ``high``/``auto`` for GPT-4o, GPT-4.1 and the o-series: scaled to fit 2048 x 2048, then
  its short side to 768 px; 85 tokens plus 170 per 512 px tile.

An estimate does not know which provider the next request goes to, so it takes the larger
of the two: counting short is what overflows a context window.

PDFs (pages counted with ``pypdf``): Anthropic's "PDF support" guide puts each page at
1,500 to 3,000 tokens of text plus the page as an image; OpenAI sends the extracted text and
an image of each page too. A page is counted at the middle of that range plus one image at
the 1,600-token ceiling. Text files are read as their text (sent as text everywhere).
"""

from __future__ import annotations

import io
import math
from collections import OrderedDict

import imagesize

from ..messages import FileBlock, ImageBlock, is_text_media_type

__all__ = ["IMAGE_CEILING", "PDF_PAGE_TOKENS", "binary_chars", "binary_tokens"]

IMAGE_CEILING = 1_600
"""The tokens of an image whose size is not known (Anthropic's ceiling)."""
PDF_PAGE_TOKENS = 2_250 + IMAGE_CEILING
"""The tokens of one PDF page: the middle of 1,500-3,000 text tokens, plus its image."""
_PDF_BYTES_PER_PAGE = 64 * 1024  # a page count without the bytes at hand: a rough guess

_cache: OrderedDict[str, int] = OrderedDict()  # blob hash -> tokens (the bytes seen once)


def _anthropic(width: int, height: int) -> int:
    scale = min(1.0, 1568 / max(width, height), math.sqrt(1_150_000 / (width * height)))
    return math.ceil(width * scale * height * scale / 750)


def _openai(width: int, height: int) -> int:
    scale = min(1.0, 2048 / max(width, height))
    w, h = width * scale, height * scale
    scale = min(1.0, 768 / min(w, h))
    w, h = w * scale, h * scale
    return 85 + 170 * math.ceil(w / 512) * math.ceil(h / 512)


def image_tokens(width: int, height: int) -> int:
    """The larger of the Anthropic and OpenAI counts for an image of this size."""
    if width <= 0 or height <= 0:
        return IMAGE_CEILING
    return max(_anthropic(width, height), _openai(width, height))


def _pdf_pages(data: bytes) -> int | None:
    import pypdf  # lazily: only a PDF with its bytes in hand needs it

    try:
        return len(pypdf.PdfReader(io.BytesIO(data)).pages)
    except Exception:  # a malformed PDF (hostile input): estimate by size instead
        return None


def _measure(block: ImageBlock | FileBlock) -> int:
    data = block.data
    if isinstance(block, ImageBlock):
        if data is None:
            return IMAGE_CEILING
        try:
            width, height = imagesize.get(io.BytesIO(data))
        except Exception:
            return IMAGE_CEILING
        return image_tokens(int(width), int(height))
    pages = _pdf_pages(data) if data is not None else None
    if pages is None:
        pages = max(1, math.ceil((block.size or 0) / _PDF_BYTES_PER_PAGE))
    return max(1, pages) * PDF_PAGE_TOKENS


def binary_tokens(block: ImageBlock | FileBlock) -> int:
    """The tokens of an image or a PDF (0 for a text file: it counts as text)."""
    if isinstance(block, FileBlock) and is_text_media_type(block.media_type):
        return 0
    url = block.url if isinstance(block, ImageBlock) else None
    key = block.blob or url or ""
    cached = _cache.get(key)
    if cached is not None:
        return cached
    tokens = _measure(block)
    if key and block.data is not None:  # a fallback is not kept
        _cache[key] = tokens
        if len(_cache) > 4096:
            _cache.popitem(last=False)
    return tokens


def binary_chars(block: ImageBlock | FileBlock) -> int:
    """The characters of a text file (its UTF-8 size when the bytes are not at hand)."""
    if isinstance(block, FileBlock) and is_text_media_type(block.media_type):
        return len(block.data.decode("utf-8")) if block.data is not None else block.size or 0
    return 0
