"""A parsing process imports docling without transformers (docling asks for it only to
annotate its VLM options), and reads every format as a process that holds it does: the same
blocks."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from ragstream.core.models import FileFingerprint
from ragstream.operators.parse import parse_file
from tests.conftest import DOCS

FILES = [
    "md/docling_concepts_chunking.md",
    "html/python311_tutorial_appetite.html",
    "docx/docling__word_tables.docx",
    "pdf/docling__2305.03393v1-pg9.pdf",
    "pptx/" + sorted(p.name for p in (DOCS / "pptx").iterdir())[0],
]
PROBE = """
import json, sys
from pathlib import Path
from ragstream.core.models import FileFingerprint
from ragstream.operators.parse import parse_file
blocks = {}
for name in sys.argv[1:]:
    doc = parse_file(Path(name), name, "docs", FileFingerprint(size=1, mtime_ns=1))
    blocks[name] = [[b.kind, b.text] for b in doc.blocks]
print(json.dumps({"blocks": blocks, "transformers": "transformers" in sys.modules}))
"""


@pytest.mark.slow  # a fresh process that imports docling
def test_a_parsing_process_reads_every_format_without_transformers_and_as_with_it() -> None:
    import transformers  # noqa: F401  held here, as by a process that embeds with torch

    paths = [str(DOCS / f) for f in FILES]
    repo = Path(__file__).resolve().parents[3]
    run = subprocess.run(
        [sys.executable, "-c", PROBE, *paths], cwd=repo, capture_output=True, text=True
    )
    assert run.returncode == 0, run.stderr[-3000:]
    fresh = json.loads(run.stdout.strip().splitlines()[-1])
    assert fresh["transformers"] is False
    for name in paths:
        here = parse_file(Path(name), name, "docs", FileFingerprint(size=1, mtime_ns=1))
        assert fresh["blocks"][name] == [[b.kind, b.text] for b in here.blocks], name
        assert here.blocks, name
