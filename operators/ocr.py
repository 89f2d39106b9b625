"""OCR operator: a page image → text lines with their boxes and confidences, offline.

Two engines sit behind one `OcrEngine` protocol: Tesseract (through `tesserocr`, in-process,
language data from the system's `tesseract-ocr` packages, installed by `make install`) and
RapidOCR (`rapidocr-onnxruntime`, its detection and recognition ONNX models inside the
wheel). Neither downloads anything at run time; an engine whose data is missing raises
`OcrError` with what to install, which the parse operator turns into a dead letter.

Decoding is bounded before it starts: an image's size is read from its header and checked
against a pixel limit before a pixel is decoded (a 50,000 × 50,000 one-colour PNG is a few
hundred kilobytes on disk and 2.5 GB in memory), and a multi-page TIFF is read only up to a
page limit. Every page OCR'd is counted (`ocr_runs`), and results are cached by the content
hash of the page's pixels and the engine's identity (`OcrCache`, persisted by the flow), so an
unchanged scan is never read twice.

>>> from PIL import Image, ImageDraw
>>> page = Image.new("L", (600, 80), 255)
>>> ImageDraw.Draw(page).text((10, 30), "Valve 17 was replaced", fill=0, font_size=28)
>>> [line.text for line in ocr_page(page, engine_for("tesseract", "eng")).lines]
['Valve 17 was replaced']
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import threading
import warnings
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass
from functools import lru_cache
from importlib import metadata
from io import BytesIO
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol

import xxhash

if TYPE_CHECKING:
    from PIL.Image import Image

OcrMode = Literal["auto", "off", "force"]
EngineName = Literal["tesseract", "rapidocr"]
IMAGE_TYPES = {".png": "png", ".jpg": "jpeg", ".jpeg": "jpeg", ".tif": "tiff", ".tiff": "tiff"}
IMAGE_TYPES |= {".bmp": "bmp", ".webp": "webp", ".gif": "gif"}
OCR_FORMAT = 1  # the cached page layout below; a change makes every cached page a miss
_TESSDATA_DIRS = (
    "/usr/share/tesseract-ocr/5/tessdata",
    "/usr/share/tesseract-ocr/4.00/tessdata",
    "/usr/share/tessdata",
    "/usr/local/share/tessdata",
    "/opt/homebrew/share/tessdata",
)

# pages OCR'd by this process, per engine identity (tests and benchmarks read it)
_RUNS: Counter[str] = Counter()
_RUNS_LOCK = threading.Lock()


class OcrError(Exception):
    """An image that cannot be OCR'd (too large, corrupt) or an engine that cannot run."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True)
class OcrLine:
    """One recognised text line: pixel box with a top-left origin, confidence in 0..1."""

    text: str
    left: float
    top: float
    right: float
    bottom: float
    confidence: float


@dataclass(frozen=True)
class OcrPage:
    """What an engine read on one page image of `width` × `height` pixels."""

    width: int
    height: int
    lines: tuple[OcrLine, ...]

    def to_json(self) -> str:
        return json.dumps({"v": OCR_FORMAT, **asdict(self)}, separators=(",", ":"))

    @staticmethod
    def from_json(raw: str) -> OcrPage | None:
        """The page a cache row holds; None for a row of another layout (a miss)."""
        data = json.loads(raw)
        if data.get("v") != OCR_FORMAT:
            return None
        lines = tuple(OcrLine(**line) for line in data["lines"])
        return OcrPage(width=data["width"], height=data["height"], lines=lines)

    @property
    def confidence(self) -> float | None:
        """Mean line confidence weighted by characters; None for a page without text."""
        return mean_confidence((ln.text, ln.confidence) for ln in self.lines)


def mean_confidence(lines: Iterable[tuple[str, float]]) -> float | None:
    """The mean of (text, confidence) lines' confidences weighted by their characters; None
    when they hold no character.

    >>> mean_confidence([("Valve 17", 0.9), ("ok", 0.4)])
    0.8
    """
    read = [(len(text), confidence) for text, confidence in lines]
    chars = sum(n for n, _ in read)
    return round(sum(n * c for n, c in read) / chars, 4) if chars else None


class OcrEngine(Protocol):
    """Reads one page image. `identity` names everything that decides its output."""

    @property
    def identity(self) -> str: ...

    def read(self, image: Image, dpi: float | None = None) -> list[OcrLine]: ...


class OcrCache(Protocol):
    """Persisted OCR output by key (`connectors.ocr_cache.OcrPageCache` in the flow)."""

    def get(self, key: str) -> str | None: ...

    def put(self, key: str, value: str) -> None: ...


@dataclass(frozen=True)
class OcrOptions:
    """The `parse.*` OCR settings as the parse operator applies them."""

    mode: OcrMode = "auto"
    engine: EngineName = "tesseract"
    languages: str = "eng"
    dpi: int = 200  # PDF pages are rendered at this resolution for OCR
    max_page_pixels: int = 40_000_000
    max_pages: int = 200


# --- engines -----------------------------------------------------------------------------


def tessdata_dir() -> Path | None:
    """Where Tesseract's language data is: `$TESSDATA_PREFIX`, what the `tesseract` binary
    reports, or a standard system folder; None when none holds any `.traineddata`."""
    env = os.environ.get("TESSDATA_PREFIX")
    candidates = [Path(env), Path(env) / "tessdata"] if env else []
    binary = shutil.which("tesseract")
    if binary:
        try:
            out = subprocess.run(
                [binary, "--list-langs"], capture_output=True, text=True, timeout=10
            )
            found = re.search(r'"([^"]+)"', out.stdout + out.stderr)
            if found:
                candidates.append(Path(found.group(1)))
        except (OSError, subprocess.SubprocessError):
            pass
    candidates += [Path(d) for d in _TESSDATA_DIRS]
    return next((d for d in candidates if d.is_dir() and any(d.glob("*.traineddata"))), None)


class TesseractEngine:
    """Tesseract 5 in-process through tesserocr: one API object per thread (an API is not
    thread-safe; recognition releases the GIL, so threads do run in parallel)."""

    def __init__(self, languages: str) -> None:
        import tesserocr

        data = tessdata_dir()
        if data is None:
            raise OcrError(
                "OCR unavailable: no Tesseract language data found (install tesseract-ocr "
                "and tesseract-ocr-eng: `make install`)"
            )
        wanted = [lang for lang in languages.split("+") if lang]
        missing = [lang for lang in wanted if not (data / f"{lang}.traineddata").is_file()]
        if missing or not wanted:
            raise OcrError(
                f"OCR unavailable: no Tesseract data for {'+'.join(missing) or 'no language'} "
                f"in {data} (install tesseract-ocr-<lang>; parse.ocr_languages={languages!r})"
            )
        self._data, self._languages = data, "+".join(wanted)
        self._local = threading.local()
        sizes = "-".join(str((data / f"{lang}.traineddata").stat().st_size) for lang in wanted)
        version = tesserocr.tesseract_version().split()[1]
        self.identity = f"tesseract-{version}:{self._languages}:{sizes}"

    def _api(self) -> Any:
        api = getattr(self._local, "api", None)
        if api is None:
            import tesserocr

            api = tesserocr.PyTessBaseAPI(
                path=f"{self._data}/", lang=self._languages, psm=tesserocr.PSM.AUTO
            )
            self._local.api = api
        return api

    def read(self, image: Image, dpi: float | None = None) -> list[OcrLine]:
        from tesserocr import RIL, iterate_level

        api = self._api()
        api.SetImage(image)
        if dpi and 70 <= dpi <= 2400:
            api.SetSourceResolution(round(dpi))
        api.Recognize()
        lines = []
        iterator = api.GetIterator()
        if iterator is not None:
            for item in iterate_level(iterator, RIL.TEXTLINE):
                try:
                    text = " ".join((item.GetUTF8Text(RIL.TEXTLINE) or "").split())
                except RuntimeError:  # tesserocr's "No text returned": an empty region
                    continue
                box = item.BoundingBox(RIL.TEXTLINE)
                if text and box:
                    conf = max(0.0, min(1.0, item.Confidence(RIL.TEXTLINE) / 100))
                    left, top, right, bottom = (float(v) for v in box)
                    lines.append(OcrLine(text, left, top, right, bottom, round(conf, 4)))
        api.Clear()
        return lines


class RapidOcrEngine:
    """RapidOCR (PP-OCRv4 detection + recognition, ONNX Runtime), models from its wheel.
    Its recogniser reads Chinese and Latin script whatever `languages` says."""

    def __init__(self) -> None:
        try:
            from rapidocr_onnxruntime import RapidOCR
        except ImportError as err:
            raise OcrError(
                "OCR unavailable: parse.ocr_engine=rapidocr needs rapidocr-onnxruntime "
                "(pip install -r requirements-dev.txt)"
            ) from err
        self._engine = RapidOCR()
        self._lock = threading.Lock()  # one RapidOCR object, not documented thread-safe
        self.identity = f"rapidocr-{metadata.version('rapidocr-onnxruntime')}:PP-OCRv4"

    def read(self, image: Image, dpi: float | None = None) -> list[OcrLine]:
        import numpy as np

        pixels = np.asarray(image.convert("RGB"))
        with self._lock:
            result, _ = self._engine(pixels)
        lines = []
        for quad, text, score in result or []:
            xs, ys = [float(p[0]) for p in quad], [float(p[1]) for p in quad]
            text = " ".join(str(text).split())
            if text:
                conf = round(max(0.0, min(1.0, float(score))), 4)
                lines.append(OcrLine(text, min(xs), min(ys), max(xs), max(ys), conf))
        # reading order: top to bottom by line centre, left to right within a visual line
        return sorted(lines, key=lambda ln: (round((ln.top + ln.bottom) / 2 / 8), ln.left))


@lru_cache(maxsize=8)
def engine_for(name: EngineName, languages: str) -> OcrEngine:
    """One engine per (name, languages) and process: loading one takes a moment."""
    if name == "rapidocr":
        return RapidOcrEngine()
    return TesseractEngine(languages)


# --- images ------------------------------------------------------------------------------


def open_pages(
    data: bytes, max_pixels: int, max_pages: int
) -> Iterator[tuple[Image, float | None]]:
    """The pages of an image file with the resolution each declares, decoded one at a time,
    each checked before decoding: a TIFF's frames are pages, a GIF's first frame is its only
    page, EXIF rotation applied, transparency flattened onto white, everything greyscale."""
    from PIL import Image, ImageOps, UnidentifiedImageError

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            image = Image.open(BytesIO(data))
    except Image.DecompressionBombError as err:
        raise OcrError(f"image too large to OCR: {_pixels_of(err)}") from None
    except UnidentifiedImageError:
        raise OcrError("corrupt or unreadable image: not a recognised image format") from None
    except (OSError, SyntaxError, ValueError) as err:
        raise OcrError(f"corrupt or unreadable image: {_gist(err)}") from None
    frames = getattr(image, "n_frames", 1) if image.format in ("TIFF", "MPO") else 1
    if frames > max_pages:
        raise OcrError(f"{frames} pages to OCR, more than parse.ocr_max_pages ({max_pages})")
    for index in range(frames):
        try:
            image.seek(index)
            width, height = image.size
            if width * height > max_pixels:
                raise OcrError(
                    f"image too large to OCR: {width} × {height} = {width * height} pixels, "
                    f"more than parse.ocr_max_page_pixels ({max_pixels})"
                )
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", Image.DecompressionBombWarning)
                image.load()
                page = ImageOps.exif_transpose(image) or image
                dpi = image_dpi(image)
            yield flatten(page), dpi
        except OcrError:
            raise
        except (OSError, SyntaxError, ValueError, EOFError) as err:
            raise OcrError(f"corrupt or unreadable image: {_gist(err)}") from None


def flatten(image: Image) -> Image:
    """Greyscale on a white background (a transparent screenshot is otherwise black)."""
    from PIL import Image as PILImage

    if image.mode in ("RGBA", "LA", "PA") or "transparency" in image.info:
        rgba = image.convert("RGBA")
        white = PILImage.new("RGBA", rgba.size, (255, 255, 255, 255))
        image = PILImage.alpha_composite(white, rgba)
    if image.mode in ("I;16", "I;16B", "I;16L", "I"):
        image = image.point(lambda v: v / 256)  # 16-bit scans: keep the top 8 bits
    return image.convert("L")


def image_dpi(image: Image) -> float | None:
    """The resolution a file declares (PNG pHYs, JPEG JFIF, TIFF tags), if any."""
    dpi = image.info.get("dpi")
    try:
        return float(dpi[0]) if dpi else None
    except (TypeError, ValueError, IndexError):
        return None


def _pixels_of(err: Exception) -> str:
    found = re.search(r"\((\d+) pixels\)", str(err))
    size = f"{int(found.group(1))} pixels" if found else "too many pixels"
    return f"{size}, a decompression bomb or far beyond any page scan"


def _gist(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return text[0][:200] if text else type(err).__name__


# --- pages -------------------------------------------------------------------------------


def page_key(image: Image, identity: str) -> str:
    """The cache key of one page image: the hash of its pixels and the engine identity."""
    digest = xxhash.xxh3_128()
    digest.update(f"{image.mode}:{image.size}:{identity}:{OCR_FORMAT}".encode())
    digest.update(image.tobytes())
    return f"page:{digest.hexdigest()}"


def ocr_page(
    image: Image,
    engine: OcrEngine,
    cache: OcrCache | None = None,
    dpi: float | None = None,
) -> OcrPage:
    """One page image read by `engine`, or its cached result (keyed by its pixels)."""
    key = page_key(image, engine.identity) if cache is not None else ""
    if cache is not None and (raw := cache.get(key)) is not None:
        cached = OcrPage.from_json(raw)
        if cached is not None:
            return cached
    page = OcrPage(image.width, image.height, tuple(engine.read(image, dpi)))
    with _RUNS_LOCK:
        _RUNS[engine.identity] += 1
    if cache is not None:
        cache.put(key, page.to_json())
    return page


def ocr_runs() -> int:
    """Pages OCR'd by an engine in this process so far (cache hits are not runs)."""
    with _RUNS_LOCK:
        return sum(_RUNS.values())
