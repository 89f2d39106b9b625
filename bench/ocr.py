"""OCR accuracy and speed, per engine side by side, on scans built from text we know.

Accuracy and speed. Paragraphs of the shared documents (`../shared/data/docs/md`, markdown
syntax stripped) are typed onto A4 pages (11 pt, one-inch margins) at 150 and 300 dpi in two
fonts (DejaVu Sans, Liberation Serif), and each page is saved in four conditions: clean
(PNG), noise (Gaussian, sigma 24 grey levels), skew (rotated 2 degrees) and jpeg (quality 30).
The clean pages are also saved as one multi-page image-only PDF per (dpi, font), which the
parse operator renders at `parse.ocr_dpi` before reading. Every file goes through the
product's own path, `operators.parse.parse_file` (decode, flatten, OCR, lines to
paragraphs), with no cache; the text of its blocks is compared with the typed text:

- CER = character edit distance / typed characters (whitespace collapsed),
- WER = word edit distance / typed words,

per condition, plus pages per second (one page at a time, as one parse worker reads) and
the peak RSS of a process that only does this. Each engine runs in its own subprocess, so
the RSS figures do not mix.

End to end. Four typed office documents (`bench/data/ocr_scans.txt`) are scanned at 150 dpi
in four different ways (a PDF, a noisy PNG, a skewed JPEG, a 300-dpi TIFF in the serif font),
put in one folder with eight text documents of the shared corpus as distractors, synced by
the real flow and asked the 22 questions of `bench/data/ocr_questions.tsv`. A question
counts as answered and cited when the answer holds the expected words and its first
citation is that scan, page 1, `source: "ocr"`.

Degraded scans (`--degraded tesseract`). The same four documents, all as 150-dpi PNGs,
scanned worse and worse (`degraded_levels`: 75, 60, 54 and 50 dpi with a light blur, then a
150-dpi page blurred 2.2, 2.6 and 3 pixels; faint ink and a little noise throughout), each
level synced into the same folder with the distractors and asked the same 22 questions once
per `query.ocr_min_confidence` of `--degraded-floors` (0 = the weak-evidence rule off). Per
level: the scans' mean OCR confidence and CER; per floor: questions answered, answered with
the gold value (and cited from the scan), answers with a claim marked `weak_evidence`,
refusals, the refusals of questions answered with the gold value with the rule off (what
the rule costs), and answers without the gold value not marked weak (what it lets through).

    nice -n 10 .venv/bin/python bench/ocr.py [--pages 2] [--engines tesseract,rapidocr]
        [--e2e-engines tesseract] [--degraded tesseract] [--degraded-floors 0.6,0]
        [--out bench/out/ocr.json]

The figures and the command that produced them are in docs/ocr.md.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image, ImageDraw, ImageFont

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.harness.scans import Degradation, save_png
from tests.harness.scans import degrade as scan_badly

REPO = Path(__file__).resolve().parents[1]
DOCS = Path(os.environ.get("RAGSTREAM_SHARED_DATA", REPO.parent / "shared" / "data")) / "docs"
DATA = REPO / "bench" / "data"
FONTS = {
    "sans": Path("/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf"),
    "serif": Path("/usr/share/fonts/truetype/liberation/LiberationSerif-Regular.ttf"),
}
DPIS = (150, 300)
DEGRADED_SCALES = (0.5, 0.4, 0.36, 0.33)  # of 150 dpi: 75, 60, 54 and 50 dpi scans
DEGRADED_BLURS = (2.2, 2.6, 3.0)  # Gaussian blur radius in pixels of a 150-dpi page
CONDITIONS = ("clean", "noise", "skew", "jpeg")
POINTS = 11.0
A4 = (8.27, 11.69)
DISTRACTORS = (
    "md/docling_concepts_chunking.md",
    "md/docling_concepts_architecture.md",
    "md/docling_concepts_OCR.md",
    "md/docling_faq_index.md",
    "md/docling_usage_supported_formats.md",
    "md/docling_getting_started_installation.md",
    "html/python311_tutorial_appetite.html",
    "pdf/docling__2305.03393v1-pg9.pdf",
)


# --- text we know --------------------------------------------------------------------------


def paragraphs(docs: Path) -> list[str]:
    """Prose paragraphs of the shared Markdown documents, markdown syntax stripped."""
    out = []
    for path in sorted((docs / "md").glob("*.md")):
        text = re.sub(r"```.*?```", "", path.read_text(encoding="utf-8"), flags=re.S)
        for block in re.split(r"\n\s*\n", text):
            if re.match(r"\s*(#|\||!|<|    |\t|[-*] |\d+\. )", block):
                continue
            block = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", block)  # links, images
            block = re.sub(r"[`*_]", "", block)
            words = block.split()
            if len(words) >= 20 and all(ord(c) < 128 for c in block):
                out.append(" ".join(words))
    return out


def wrap(paras: list[str], font: ImageFont.FreeTypeFont, width: float, rows: int) -> list[str]:
    """The lines of one page: paragraphs wrapped to `width`, a blank line between them."""
    lines: list[str] = []
    for para in paras:
        line = ""
        for word in para.split():
            candidate = f"{line} {word}".strip()
            if font.getlength(candidate) <= width:
                line = candidate
            else:
                lines.append(line)
                line = word
        lines += [line, ""]
        if len(lines) >= rows:
            break
    return [ln for ln in lines[:rows]]


def render(lines: list[str], dpi: int, font_path: Path) -> Image.Image:
    width, height = round(A4[0] * dpi), round(A4[1] * dpi)
    page = Image.new("L", (width, height), 255)
    draw = ImageDraw.Draw(page)
    font = ImageFont.truetype(str(font_path), round(POINTS * dpi / 72))
    pitch = round(POINTS * 1.45 * dpi / 72)
    for row, line in enumerate(lines):
        draw.text((dpi, dpi + row * pitch), line, fill=0, font=font)
    return page


def degrade(page: Image.Image, condition: str, seed: int) -> Image.Image:
    if condition == "noise":
        rng = np.random.default_rng(seed)
        pixels = np.asarray(page, dtype=np.float32) + rng.normal(0, 24, page.size[::-1])
        return Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8))
    if condition == "skew":
        return page.rotate(2.0, resample=Image.Resampling.BICUBIC, fillcolor=255)
    return page


def save(page: Image.Image, path: Path, dpi: int, condition: str) -> Path:
    if condition == "jpeg":
        path = path.with_suffix(".jpg")
        page.save(path, quality=30, dpi=(dpi, dpi))
    else:
        page.save(path, dpi=(dpi, dpi))
    return path


def build_set(out: Path, pages: int) -> list[dict[str, Any]]:
    """Every scan file with its condition and typed text (the manifest the workers read)."""
    paras = paragraphs(DOCS)
    manifest = []
    for font_name, font_path in FONTS.items():
        for dpi in DPIS:
            font = ImageFont.truetype(str(font_path), round(POINTS * dpi / 72))
            width = (A4[0] - 2) * dpi
            rows = int((A4[1] - 2) * 72 / (POINTS * 1.45))
            clean_pages, clean_texts, cursor = [], [], 0
            for n in range(pages):
                lines = wrap(paras[cursor:], font, width, rows)
                # paragraphs begun on this page; one cut at the page's end is not continued
                cursor += sum(1 for ln in lines if not ln) + (1 if lines and lines[-1] else 0)
                page = render(lines, dpi, font_path)
                text = " ".join(" ".join(lines).split())
                clean_pages.append(page)
                clean_texts.append(text)
                for condition in CONDITIONS:
                    name = f"{font_name}-{dpi}-{condition}-{n}"
                    path = save(degrade(page, condition, n), out / f"{name}.png", dpi, condition)
                    manifest.append(
                        dict(path=str(path), condition=condition, dpi=dpi, font=font_name,
                             kind="image", pages=1, text=text)
                    )  # fmt: skip
            pdf = out / f"{font_name}-{dpi}-clean.pdf"
            clean_pages[0].save(
                pdf, "PDF", resolution=dpi, save_all=True, append_images=clean_pages[1:]
            )
            manifest.append(
                dict(path=str(pdf), condition="clean", dpi=dpi, font=font_name, kind="pdf",
                     pages=pages, text=" ".join(clean_texts))
            )  # fmt: skip
    return manifest


# --- scoring -------------------------------------------------------------------------------


def levenshtein(a: list[int], b: list[int]) -> int:
    """Edit distance, one numpy row at a time: the left-neighbour term of a row is a running
    minimum (D[j] = min over k <= j of t[k] + j - k), so each row is three vector ops."""
    if len(a) < len(b):
        a, b = b, a
    bs = np.asarray(b, dtype=np.int64)
    idx = np.arange(len(b) + 1, dtype=np.int64)
    prev = idx.copy()
    t = np.empty(len(b) + 1, dtype=np.int64)
    for i, x in enumerate(a, 1):
        t[0] = i
        np.minimum(prev[1:] + 1, prev[:-1] + (bs != x), out=t[1:])
        prev = np.minimum.accumulate(t - idx) + idx
    return int(prev[-1])


def error_rates(truth: str, read: str) -> tuple[float, float]:
    truth, read = " ".join(truth.split()), " ".join(read.split())
    cer = levenshtein([ord(c) for c in truth], [ord(c) for c in read]) / max(len(truth), 1)
    vocab: dict[str, int] = {}
    tw = [vocab.setdefault(w, len(vocab)) for w in truth.split()]
    rw = [vocab.setdefault(w, len(vocab)) for w in read.split()]
    return cer, levenshtein(tw, rw) / max(len(tw), 1)


# --- one engine (a subprocess) -------------------------------------------------------------


def run_engine(engine: str, manifest_path: Path) -> dict[str, Any]:
    from ragstream.core.models import FileFingerprint
    from ragstream.operators.ocr import OcrOptions, engine_for
    from ragstream.operators.parse import ParseError, parse_file

    options = OcrOptions(engine=engine)  # type: ignore[arg-type]
    started = time.monotonic()
    engine_for(options.engine, options.languages)  # load before the clock
    load_s = time.monotonic() - started
    rows = []
    for item in json.loads(manifest_path.read_text()):
        path = Path(item["path"])
        fp = FileFingerprint(size=path.stat().st_size, mtime_ns=0)
        began = time.monotonic()
        try:
            doc = parse_file(path, f"b:{path.name}", "b", fp, None, ocr=options)
            read = " ".join(b.text for b in doc.blocks)
        except ParseError:
            read = ""
        seconds = time.monotonic() - began
        cer, wer = error_rates(item["text"], read)
        rows.append({**{k: item[k] for k in ("condition", "dpi", "font", "kind", "pages")},
                     "cer": cer, "wer": wer, "seconds": seconds})  # fmt: skip
    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {"engine": engine, "load_s": load_s, "rss_mb": rss_mb, "rows": rows}


def summarize(result: dict[str, Any]) -> list[dict[str, Any]]:
    """Per (kind, dpi, condition): CER, WER and pages/s over fonts and pages."""
    groups: dict[tuple[str, int, str], list[dict[str, Any]]] = {}
    for row in result["rows"]:
        groups.setdefault((row["kind"], row["dpi"], row["condition"]), []).append(row)
    out = []
    for (kind, dpi, condition), rows in sorted(groups.items()):
        pages = sum(r["pages"] for r in rows)
        out.append({
            "engine": result["engine"], "kind": kind, "dpi": dpi, "condition": condition,
            "files": len(rows), "pages": pages,
            "cer": float(np.mean([r["cer"] for r in rows])),
            "cer_max": float(np.max([r["cer"] for r in rows])),
            "wer": float(np.mean([r["wer"] for r in rows])),
            "pages_per_s": pages / sum(r["seconds"] for r in rows),
        })  # fmt: skip
    return out


# --- end to end ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Scan:
    stem: str
    lines: list[str]


def scans() -> list[Scan]:
    out, current = [], None
    for line in (DATA / "ocr_scans.txt").read_text(encoding="utf-8").splitlines():
        if line.startswith("#") or not line.strip():
            continue
        if found := re.fullmatch(r"== (\S+) ==", line):
            current = Scan(found.group(1), [])
            out.append(current)
        elif current is not None:
            current.lines.append(line)
    return out


def build_folder(root: Path) -> dict[str, str]:
    """The four scans, each in its own way, and the distractors; stem -> file name."""
    root.mkdir(parents=True)
    names = {}
    for scan, how in zip(scans(), ("pdf", "noise", "skew-jpeg", "tiff-300-serif"), strict=True):
        dpi = 300 if how.startswith("tiff") else 150
        font = FONTS["serif" if "serif" in how else "sans"]
        page = render([*scan.lines[:1], "", *scan.lines[1:]], dpi, font)
        if how == "pdf":
            name = f"{scan.stem}.pdf"
            page.save(root / name, "PDF", resolution=dpi)
        elif how == "noise":
            name = f"{scan.stem}.png"
            degrade(page, "noise", 7).save(root / name, dpi=(dpi, dpi))
        elif how == "skew-jpeg":
            name = f"{scan.stem}.jpg"
            degrade(page, "skew", 0).save(root / name, quality=30, dpi=(dpi, dpi))
        else:
            name = f"{scan.stem}.tiff"
            page.save(root / name, dpi=(dpi, dpi))
        names[scan.stem] = name
    for rel in DISTRACTORS:
        shutil.copy(DOCS / rel, root / Path(rel).name)
    return names


def ask_questions(settings: Any, root: Path, names: dict[str, str]) -> list[dict[str, Any]]:
    """The scan questions through the query engine: per question whether it was answered
    with the expected words, cited from its scan (page 1, OCR), leaned on weak evidence (and
    the lowest OCR confidence of the text its claims lean on), or refused (by which check)."""
    from ragstream.core.answers import QueryRequest
    from ragstream.query.engine import QueryEngine

    rows = []
    lines = (DATA / "ocr_questions.tsv").read_text(encoding="utf-8").splitlines()[1:]
    with QueryEngine.open(settings) as eng:
        for line in lines:
            stem, question, expected = line.split("\t")
            answer = eng.answer(QueryRequest(query=question))
            first = answer.citations[0] if answer.citations else None
            answered = answer.refusal is None and expected.lower() in answer.text.lower()
            cited = (
                first is not None
                and first.doc_id == f"{root.name}:{names[stem]}"
                and first.page == 1
                and first.source == "ocr"
            )
            refusal = answer.refusal
            read = {c.cid: c.ocr_confidence for c in answer.citations if c.source == "ocr"}
            leaned = [read[c.support_cid] for c in answer.claims if read.get(c.support_cid or "")]
            rows.append({"question": question, "expected": expected, "answered": answered,
                         "cited": cited, "weak": any(c.weak_evidence for c in answer.claims),
                         "confidence": min(leaned, default=None),
                         "refusal": refusal.reason if refusal else None,
                         "check": refusal.check if refusal else None,
                         "text": answer.text[:200]})  # fmt: skip
    return rows


def run_e2e(engine: str, work: Path) -> dict[str, Any]:
    from ragstream import api
    from ragstream.core.settings import Settings

    root = work / f"e2e-{engine}"
    names = build_folder(root)
    settings = Settings(data_dir=work / f"e2e-{engine}-data", parse={"ocr_engine": engine})
    settings = settings.with_paths([root])
    report = api.sync([root], settings=settings)
    rows = ask_questions(settings, root, names)
    good = sum(r["answered"] and r["cited"] for r in rows)
    return {
        "engine": engine,
        "dead_letters": [d.reason for d in report.dead_letters],
        "questions": len(rows),
        "answered_and_cited": good,
        "answered": sum(r["answered"] for r in rows),
        "weak_evidence": sum(r["weak"] for r in rows),
        "rows": rows,
    }


# --- degraded scans: where Tesseract's confidence falls, and what the weak-evidence rule does


def degraded_levels() -> list[Degradation]:
    """A graded series from clean to unreadable: a lower scan resolution, then a heavier
    blur; every degraded level also has faint ink (60 % black) and a little noise (sigma 4:
    stronger noise on a low-resolution page makes Tesseract find no text at all, a cliff
    rather than a grade)."""
    faint = {"noise": 4.0, "contrast": 0.6}
    return [
        Degradation("clean 150 dpi"),
        *(Degradation(f"{round(150 * s)} dpi, blur 1", s, 1.0, **faint) for s in DEGRADED_SCALES),
        *(Degradation(f"150 dpi, blur {b:g}", 1.0, b, **faint) for b in DEGRADED_BLURS),
    ]


def read_scans(root: Path, names: dict[str, str], settings: Any) -> tuple[float, float]:
    """(mean OCR confidence, mean CER) of the folder's scans, read through the data dir's OCR
    cache (what the sync just read: no page is read again); a scan OCR finds nothing in
    counts 0 and 1."""
    from ragstream.core.models import FileFingerprint
    from ragstream.flows.runtime import ocr_cache, ocr_options
    from ragstream.operators.ocr import mean_confidence
    from ragstream.operators.parse import ParseError, parse_file

    confidences, cers = [], []
    for scan in scans():
        path = root / names[scan.stem]
        fp = FileFingerprint(size=path.stat().st_size, mtime_ns=0)
        try:
            doc = parse_file(path, "b:x", "b", fp, None, ocr_options(settings), ocr_cache(settings))
            read = " ".join(b.text for b in doc.blocks)
            lines = [(b.text, b.confidence or 0.0) for b in doc.blocks]
            confidence = mean_confidence(lines) or 0.0
        except ParseError:
            read, confidence = "", 0.0
        confidences.append(confidence)
        cers.append(error_rates(" ".join(scan.lines), read)[0])
    return float(np.mean(confidences)), float(np.mean(cers))


def save_degraded(root: Path, how: Degradation) -> dict[str, str]:
    """The four scans at 150 dpi (the fourth in the serif font) scanned as `how` says, as PNGs
    over the last level's; stem -> file name."""
    names = {}
    for n, scan in enumerate(scans()):
        font = FONTS["serif" if n == 3 else "sans"]
        page = render([*scan.lines[:1], "", *scan.lines[1:]], 150, font)
        page.info["dpi"] = (150, 150)
        names[scan.stem] = f"{scan.stem}.png"
        save_png(scan_badly(page, how, seed=n), root / names[scan.stem])
    return names


def run_degraded(engine: str, work: Path, floors: list[float]) -> dict[str, Any]:
    """Each level: its scans replace the last level's in one folder with the distractors
    (only the scans are re-read), synced, then the questions asked once per
    `query.ocr_min_confidence` in `floors` (0 = the rule off)."""
    from ragstream import api
    from ragstream.core.settings import Settings

    root = work / f"degraded-{engine}"
    root.mkdir(parents=True)
    for rel in DISTRACTORS:
        shutil.copy(DOCS / rel, root / Path(rel).name)
    levels = []
    for how in degraded_levels():
        names = save_degraded(root, how)
        data = work / f"degraded-{engine}-data"
        settings = Settings(data_dir=data, parse={"ocr_engine": engine}).with_paths([root])
        report = api.sync([root], settings=settings)
        confidence, cer = read_scans(root, names, settings)
        runs = {}
        for floor in floors:
            asked = settings.model_copy(
                update={"query": settings.query.model_copy(update={"ocr_min_confidence": floor})}
            )
            runs[str(floor)] = ask_questions(asked, root, names)
        levels.append({"level": how.name, "confidence": confidence, "cer": cer,
                       "dead_letters": len(report.dead_letters), "runs": runs})  # fmt: skip
        print(f"{how.name}: confidence {confidence:.2f}, CER {cer:.3f}", file=sys.stderr)
    return {"engine": engine, "floors": floors, "levels": levels}


def degraded_table(result: dict[str, Any]) -> str:
    """Per level and floor: answered, with the gold value, cited, weak, refused, and what the
    rule cost (answered with the gold value with the rule off, refused with it on) and let
    through (answered without the gold value and not marked weak)."""
    floors = result["floors"]
    off = next((str(f) for f in floors if f == 0), None)
    out = ["| level | mean confidence | CER | ocr_min_confidence | answered | with the gold "
           "value | and cited | weak evidence | refused | refused, answered with the rule "
           "off | wrong and not weak |", "|" + "---|" * 11]  # fmt: skip
    for level in result["levels"]:
        for floor in floors:
            rows = level["runs"][str(floor)]
            base = level["runs"][off] if off is not None else rows
            answered = [r for r in rows if r["refusal"] is None]
            cost = sum(
                r["refusal"] is not None and b["answered"] for r, b in zip(rows, base, strict=True)
            )
            wrong = sum(not r["answered"] and not r["weak"] for r in answered)
            out.append(
                f"| {level['level']} | {level['confidence']:.2f} | {100 * level['cer']:.1f} % "
                f"| {floor:g} | {len(answered)} | {sum(r['answered'] for r in rows)} | "
                f"{sum(r['answered'] and r['cited'] for r in rows)} | "
                f"{sum(r['weak'] for r in answered)} | {len(rows) - len(answered)} | {cost} "
                f"| {wrong} |"
            )
    return "\n".join(out)


# --- driver --------------------------------------------------------------------------------


def child(*args: str) -> dict[str, Any]:
    env = os.environ | {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    proc = subprocess.run(
        [sys.executable, __file__, *args], capture_output=True, text=True, env=env, check=False
    )
    if proc.returncode != 0:
        raise SystemExit(f"bench/ocr.py {' '.join(args)} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def table(rows: list[dict[str, Any]]) -> str:
    engines = sorted({r["engine"] for r in rows})
    keyed = {(r["engine"], r["kind"], r["dpi"], r["condition"]): r for r in rows}
    head = "| kind | dpi | condition | " + " | ".join(
        f"{e} CER | {e} WER | {e} pages/s" for e in engines
    )
    out = [head + " |", "|" + "---|" * (3 + 3 * len(engines))]
    for kind, dpi, condition in sorted({(r["kind"], r["dpi"], r["condition"]) for r in rows}):
        cells = []
        for e in engines:
            r = keyed.get((e, kind, dpi, condition))
            cells += (
                [f"{100 * r['cer']:.2f} %", f"{100 * r['wer']:.2f} %", f"{r['pages_per_s']:.2f}"]
                if r
                else ["-", "-", "-"]
            )
        out.append(f"| {kind} | {dpi} | {condition} | " + " | ".join(cells) + " |")
    return "\n".join(out)


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pages", type=int, default=2, help="pages per (font, dpi)")
    parser.add_argument("--engines", default="tesseract,rapidocr")
    parser.add_argument("--e2e-engines", default="tesseract", help="'' to skip")
    parser.add_argument(
        "--degraded", default="", help="engines of the degraded-scan row ('tesseract'); '' skips"
    )
    parser.add_argument(
        "--degraded-floors", default="0.6,0", help="query.ocr_min_confidence values to compare"
    )
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "out" / "ocr.json")
    parser.add_argument("--engine-worker", help=argparse.SUPPRESS)
    parser.add_argument("--e2e-worker", help=argparse.SUPPRESS)
    parser.add_argument("--degraded-worker", help=argparse.SUPPRESS)
    parser.add_argument("--manifest", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--work", type=Path, help=argparse.SUPPRESS)
    return parser.parse_args()


def print_results(
    rows: list[dict[str, Any]],
    results: list[dict[str, Any]],
    e2e: list[dict[str, Any]],
    degraded: list[dict[str, Any]],
) -> None:
    if rows:
        print(table(rows))
    for result in results:
        print(f"{result['engine']}: model load {result['load_s']:.2f} s, "
              f"peak RSS {result['rss_mb']:.0f} MB")  # fmt: skip
    for run in e2e:
        print(f"end to end ({run['engine']}): {run['answered_and_cited']} of {run['questions']} "
              f"scan questions answered and cited from the scan ({run['answered']} answered; "
              f"{run['weak_evidence']} with weak evidence); dead letters: "
              f"{run['dead_letters'] or 'none'}")  # fmt: skip
        for r in run["rows"]:
            if not (r["answered"] and r["cited"]):
                print(f"  missed: {r['question']!r} -> {r['refusal'] or r['text']!r}")
    for run in degraded:
        print(f"degraded scans ({run['engine']}), {len(scans())} scans a level:")
        print(degraded_table(run))


def main() -> None:
    args = arguments()
    floors = [float(f) for f in args.degraded_floors.split(",")]
    if args.engine_worker:
        print(json.dumps(run_engine(args.engine_worker, args.manifest)))
        return
    if args.e2e_worker:
        print(json.dumps(run_e2e(args.e2e_worker, args.work)))
        return
    if args.degraded_worker:
        print(json.dumps(run_degraded(args.degraded_worker, args.work, floors)))
        return
    engines = list(filter(None, args.engines.split(",")))
    with tempfile.TemporaryDirectory(prefix="ocr-bench-") as tmp:
        work = Path(tmp)
        (work / "set").mkdir()
        manifest = build_set(work / "set", args.pages) if engines else []
        (work / "manifest.json").write_text(json.dumps(manifest))
        print(f"scan set: {len(manifest)} files, {sum(m['pages'] for m in manifest)} pages",
              file=sys.stderr)  # fmt: skip
        results = []
        for engine in engines:
            result = child("--engine-worker", engine, "--manifest", str(work / "manifest.json"))
            results.append(result)
            print(f"{engine}: load {result['load_s']:.2f} s, peak RSS "
                  f"{result['rss_mb']:.0f} MB", file=sys.stderr)  # fmt: skip
        e2e = [child("--e2e-worker", e, "--work", str(work))
               for e in filter(None, args.e2e_engines.split(","))]  # fmt: skip
        floor_arg = ["--degraded-floors", args.degraded_floors]
        degraded = [child("--degraded-worker", e, "--work", str(work), *floor_arg)
                    for e in filter(None, args.degraded.split(","))]  # fmt: skip
    rows = [row for result in results for row in summarize(result)]
    print_results(rows, results, e2e, degraded)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    summary = {"cpus": os.cpu_count(), "loadavg": os.getloadavg(), "pages": args.pages,
               "summary": rows, "engines": results, "e2e": e2e,
               "degraded": degraded}  # fmt: skip
    args.out.write_text(json.dumps(summary, indent=1))
    print(f"written: {args.out}")


if __name__ == "__main__":
    main()
