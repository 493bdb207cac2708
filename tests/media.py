"""Real image and PDF bytes for the tests: PNGs of any size made with zlib, a PDF with pypdf."""

from __future__ import annotations

import io
import random
import struct
import zlib


def png(width: int = 2, height: int = 2, *, seed: int = 0, noise: bool = False) -> bytes:
    """A valid RGB PNG; ``noise`` fills it with random pixels (incompressible: its size is
    about ``3 * width * height`` bytes)."""
    rng = random.Random(seed)
    rows = bytearray()
    for y in range(height):
        rows.append(0)  # filter: none
        if noise:
            rows.extend(rng.randbytes(3 * width))
        else:
            for x in range(width):
                rows.extend(((x + seed) % 256, (y + seed) % 256, seed % 256))

    def chunk(kind: bytes, body: bytes) -> bytes:
        crc = zlib.crc32(kind + body) & 0xFFFFFFFF
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", crc)

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(bytes(rows), 9))
        + chunk(b"IEND", b"")
    )


def pdf(pages: int = 1) -> bytes:
    """A valid PDF of ``pages`` blank Letter pages."""
    import pypdf

    writer = pypdf.PdfWriter()
    for _ in range(pages):
        writer.add_blank_page(612, 792)
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()
