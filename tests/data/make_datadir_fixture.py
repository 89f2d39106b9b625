"""Write `tests/data/datadir-format<N>.tar.gz`: a data dir of the current storage format over
a two-file folder this script writes, for the test that opens every kept format with this
ragstream (`tests/e2e/test_migrations.py`). Run once per storage format, when
`STORAGE_FORMAT` is raised, and commit the new file beside the older ones:

    .venv/bin/python tests/data/make_datadir_fixture.py

The tar holds `docs/` and `data/` (Qdrant Edge's files are sparse, so they are kept gzipped).
"""

from __future__ import annotations

import shutil
import tarfile
import tempfile
from pathlib import Path

from ragstream import api
from ragstream.core.settings import Settings
from ragstream.core.snapshot import STORAGE_FORMAT

DOCS = {
    "lighthouse.md": (
        "# The Skerrow lighthouse\n\n"
        "The Skerrow lighthouse stands on a basalt stack twelve miles off the coast. Its lamp "
        "was lit for the first time in 1874 and burned colza oil until 1906.\n\n"
        "## Keepers\n\n"
        "Three keepers lived on the rock in turns of six weeks. The relief boat came from "
        "Portnahaven whenever the swell allowed a landing at the east steps.\n"
    ),
    "tides.md": (
        "# Tides at Portnahaven\n\n"
        "Spring tides at Portnahaven rise about four metres. The strongest stream runs "
        "through the sound two hours before high water, at up to six knots.\n"
    ),
    # CJK text (from the format 3 fixture on; `make_datadir_fixture.py` copied into a
    # checkout of the format 2 ragstream wrote format 2's with it): the 2 -> 3 step must
    # re-tokenize it
    "汤.md": "# 扁豆汤\n\n扁豆汤是一道用扁豆和番茄慢慢炖成的家常汤。它在冬天最受欢迎。\n",
    "灯台.md": (
        "# 灯台の歴史\n\n岬の灯台は千八百七十四年に初めて点灯された。灯守は三人で交代した。\n"
    ),
}


def main() -> None:
    out = Path(__file__).with_name(f"datadir-format{STORAGE_FORMAT}.tar.gz")
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        docs = root / "docs"
        docs.mkdir()
        for name, text in DOCS.items():
            (docs / name).write_text(text, encoding="utf-8")
        api.sync([docs], settings=Settings(data_dir=root / "data"))
        (root / "data" / "state" / "ingest.lock").unlink(missing_ok=True)
        shutil.rmtree(root / "data" / "logs", ignore_errors=True)
        with tarfile.open(out, "w:gz") as tar:
            tar.add(docs, arcname="docs")
            tar.add(root / "data", arcname="data")
    print(out, out.stat().st_size)


if __name__ == "__main__":
    main()
