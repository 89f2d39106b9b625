"""Scans built in the test itself: typed lines rendered to a page image (PIL), saved as an
image file or as an image-only PDF, degraded the way a bad scan or fax is (blur, a low
resolution, noise, faint ink), and the bad inputs OCR must survive (a decompression bomb, a
password-protected PDF). Nothing here is a fixture file: every byte is made here.
"""

from __future__ import annotations

import os
import struct
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw, ImageFilter, ImageFont

FONTS = Path("/usr/share/fonts/truetype")
SANS = FONTS / "dejavu" / "DejaVuSans.ttf"
SERIF = FONTS / "liberation" / "LiberationSerif-Regular.ttf"

REPORT = [
    "Quarterly Maintenance Report",
    "Pump station 4 was inspected on 3 March by the field crew.",
    "Valve 17 showed corrosion and was replaced.",
    "Pressure readings stayed within the normal limits.",
    "No leaks were found along the main supply line.",
    "The next inspection is due in September.",
]


def render_page(
    lines: list[str],
    dpi: int = 150,
    font: Path = SANS,
    points: float = 11.0,
    size_in: tuple[float, float] = (8.27, 11.69),
) -> Image.Image:
    """An A4 page (by default) at `dpi` with `lines` typed in `points`-sized text, greyscale;
    its resolution is recorded so a PNG or PDF saved from it keeps it."""
    width, height = round(size_in[0] * dpi), round(size_in[1] * dpi)
    page = Image.new("L", (width, height), 255)
    draw = ImageDraw.Draw(page)
    face = ImageFont.truetype(str(font), round(points * dpi / 72))
    y, margin = dpi, dpi  # one-inch margins
    for line in lines:
        draw.text((margin, y), line, fill=0, font=face)
        y += round(points * 1.8 * dpi / 72)
    page.info["dpi"] = (dpi, dpi)
    return page


@dataclass(frozen=True)
class Degradation:
    """How badly a page is scanned: a Gaussian blur of `blur` pixels at the page's own
    resolution, then a resample to `scale` of it (the scan's resolution), ink at `contrast`
    of full black, and Gaussian noise of sigma `noise` grey levels."""

    name: str
    scale: float = 1.0
    blur: float = 0.0
    noise: float = 0.0
    contrast: float = 1.0


def degrade(page: Image.Image, how: Degradation, seed: int = 0) -> Image.Image:
    """`page` scanned as badly as `how` says; its recorded resolution scales with it."""
    dpi = page.info.get("dpi", (150, 150))[0]
    if how.blur:
        page = page.filter(ImageFilter.GaussianBlur(how.blur))
    if how.scale != 1.0:
        size = (round(page.width * how.scale), round(page.height * how.scale))
        page = page.resize(size, Image.Resampling.BOX)
    pixels = 255 - (255 - np.asarray(page, dtype=np.float32)) * how.contrast
    if how.noise:
        pixels += np.random.default_rng(seed).normal(0, how.noise, pixels.shape)
    out = Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8))
    out.info["dpi"] = (round(dpi * how.scale), round(dpi * how.scale))
    return out


def save_png(page: Image.Image, path: Path) -> Path:
    page.save(path, dpi=page.info.get("dpi", (150, 150)))
    return path


def save_pdf(pages: list[Image.Image], path: Path) -> Path:
    """An image-only PDF, one page per image, each at its own resolution (PIL's writer)."""
    dpi = pages[0].info.get("dpi", (150, 150))[0]
    pages[0].save(path, "PDF", resolution=dpi, save_all=True, append_images=pages[1:])
    return path


def bomb_png(width: int = 50_000, height: int = 50_000) -> bytes:
    """A one-colour 1-bit PNG of width × height pixels: ~400 kB on disk, 2.5 GB decoded."""

    def chunk(kind: bytes, body: bytes) -> bytes:
        crc = struct.pack(">I", zlib.crc32(kind + body))
        return struct.pack(">I", len(body)) + kind + body + crc

    row = b"\x00" + b"\xff" * ((width + 7) // 8)
    packer = zlib.compressobj(9)
    block, parts = row * 1000, []
    for _ in range(height // 1000):
        parts.append(packer.compress(block))
    parts.append(packer.flush())
    header = struct.pack(">IIBBBBB", width, height, 1, 0, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", b"".join(parts))
        + (chunk(b"IEND", b""))
    )


def locked_pdf() -> bytes:
    """A one-page PDF under the standard security handler with an unknown user password:
    no reader opens it without the password."""
    secret = f"/O <{os.urandom(32).hex()}> /U <{os.urandom(32).hex()}>".encode()
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] >>",
        b"<< /Filter /Standard /V 1 /R 2 " + secret + b" /P -4 >>",
    ]
    out, offsets = bytearray(b"%PDF-1.4\n"), []
    for number, body in enumerate(objects, 1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % number + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % offset for offset in offsets)
    doc_id = b"<00112233445566778899aabbccddeeff>"
    out += b"trailer\n<< /Size %d /Root 1 0 R /Encrypt 4 0 R /ID [%s %s] >>\n" % (
        len(objects) + 1,
        doc_id,
        doc_id,
    )
    out += b"startxref\n%d\n%%%%EOF\n" % xref
    return bytes(out)
