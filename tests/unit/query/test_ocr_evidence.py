"""OCR text as evidence: a claim supported by OCR text read with a low confidence counts
less (its support score is scaled by confidence / `query.ocr_min_confidence`) and is marked
`weak_evidence`; text read cleanly, or from a file's own text, counts in full. Real embedder;
the last test reads a badly scanned page with real Tesseract.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from ragstream.core.answers import SourceChunk
from ragstream.core.models import FileFingerprint, TextOrigin
from ragstream.core.settings import QuerySettings
from ragstream.operators.embed import Embedder, load_embedder
from ragstream.operators.parse import parse_file
from ragstream.query.verify import ocr_weight, verify
from tests.harness.scans import REPORT, Degradation, degrade, render_page, save_png

TEXT = "Valve 17 showed corrosion and was replaced. The next inspection is due in September."
CLAIM = "The next inspection is due in September [S1]."
PARAPHRASE = "Valve 17 was swapped out because it had corroded [S1]."


@pytest.fixture(scope="module")
def embedder() -> Embedder:
    return load_embedder("minilm-l6")


def source(origin: TextOrigin, confidence: float | None, text: str = TEXT) -> SourceChunk:
    return SourceChunk(
        cid="S1",
        point_id="p1",
        doc_id="scans:report.png",
        path="report.png",
        page=1,
        char_start=0,
        char_end=len(text),
        text=text,
        score=1.0,
        source=origin,
        bbox=(0.1, 0.1, 0.6, 0.2) if origin == "ocr" else None,
        ocr_confidence=confidence,
    )


def test_weight_rule() -> None:
    assert ocr_weight(source("text", None), 0.6) == 1.0
    assert ocr_weight(source("ocr", 0.9), 0.6) == 1.0
    assert ocr_weight(source("ocr", 0.3), 0.6) == pytest.approx(0.5)
    assert ocr_weight(source("ocr", 0.3), 0.0) == 1.0  # the rule off


def test_low_confidence_ocr_is_weaker_evidence(embedder: Embedder) -> None:
    clean = verify(
        CLAIM + " " + PARAPHRASE, [source("ocr", 0.95)], embedder, ocr_min_confidence=0.6
    )
    weak = verify(CLAIM + " " + PARAPHRASE, [source("ocr", 0.3)], embedder, ocr_min_confidence=0.6)
    off = verify(CLAIM + " " + PARAPHRASE, [source("ocr", 0.3)], embedder)
    assert [c.score for c in off.claims] == [c.score for c in clean.claims]
    assert all(c.supported and not c.weak_evidence for c in clean.claims)
    for strong, faint in zip(clean.claims, weak.claims, strict=True):
        assert faint.weak_evidence and faint.score == pytest.approx(strong.score * 0.5, abs=1e-3)
    # halved: a verbatim copy still reaches the 0.5 support floor, a paraphrase no longer does
    assert [c.supported for c in weak.claims] == [True, False]
    assert weak.grounding == 0.5 and clean.grounding == 1.0


# a fax-grade scan: about 54 dpi, blurred, faint ink, a little noise (bench/ocr.py --degraded)
FAX = Degradation("fax", scale=0.36, blur=1.0, noise=4.0, contrast=0.6)
FLOOR = QuerySettings().ocr_min_confidence  # the default rule


@pytest.mark.parametrize(("how", "weak"), [(Degradation("clean"), False), (FAX, True)])
def test_an_answer_from_a_badly_scanned_page_is_weak_evidence(
    embedder: Embedder, tmp_path: Path, how: Degradation, weak: bool
) -> None:
    """The extractive answer copies the OCR'd sentence that holds "September": from a clean
    scan it is full evidence; from a fax-grade one Tesseract reads it below the default
    floor, and the same verbatim claim is supported with its score scaled by
    confidence / floor, weak."""
    png = save_png(degrade(render_page(REPORT, dpi=150), how), tmp_path / "report.png")
    doc = parse_file(png, "scans:report.png", "scans", FileFingerprint(size=1, mtime_ns=1))
    block = next(b for b in doc.blocks if "September" in b.text)
    assert block.confidence is not None and (block.confidence < FLOOR) == weak, block
    sentence = next(s for s in block.text.split(". ") if "September" in s).rstrip(".")
    checked = verify(
        f"{sentence} [S1].", [source("ocr", block.confidence, block.text)], embedder,
        ocr_min_confidence=FLOOR,
    )  # fmt: skip
    (claim,) = checked.claims
    assert claim.supported and claim.weak_evidence == weak, claim
    assert claim.score <= min(1.0, block.confidence / FLOOR) + 1e-3
