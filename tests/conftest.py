"""Shared fixtures. Everything runs offline: no hub calls, ever."""

from __future__ import annotations

import os

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
os.environ["TOKENIZERS_PARALLELISM"] = "false"

from pathlib import Path

import pytest

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data"
if not SHARED.exists():  # CI clones the repo elsewhere with shared/ beside it
    SHARED = Path(os.environ.get("RAGSTREAM_SHARED_DATA", "../shared/data")).resolve()
DOCS = SHARED / "docs"
SCIFACT = SHARED / "scifact"


@pytest.fixture(scope="session")
def shared_docs() -> Path:
    assert DOCS.is_dir(), f"shared documents not found at {DOCS}"
    return DOCS


@pytest.fixture(scope="session")
def scifact_dir() -> Path:
    assert SCIFACT.is_dir(), f"SciFact not found at {SCIFACT}"
    return SCIFACT
