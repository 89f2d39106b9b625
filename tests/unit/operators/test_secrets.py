"""Secrets never reach the index: excluded files, redacted content, visible in status."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ragstream import api
from ragstream.connectors.protocols import SearchFilter
from ragstream.core.settings import Settings
from ragstream.flows.runtime import open_runtime
from ragstream.operators.secrets import PATTERNS, redact
from ragstream.service import ingest

AWS_ID = "AKIA" + "Q" * 16
PEM = "-----BEGIN RSA PRIVATE KEY-----\nMIIEpAIBAAKCAQEA7\nabc\n-----END RSA PRIVATE KEY-----"
SAMPLES = {
    "private-key": PEM,
    "aws-access-key-id": AWS_ID,
    "aws-secret-access-key": "aws_secret_access_key = " + "a" * 40,
    "github-token": "ghp_" + "b" * 36,
    "slack-token": "xoxb-1234567890-abcdef",
    "openai-key": "sk-proj-" + "c" * 40,
    "google-api-key": "AIza" + "d" * 35,
    "stripe-key": "sk_live_" + "e" * 24,
    "jwt": "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N",
}


def test_each_kind_is_redacted() -> None:
    for kind, secret in SAMPLES.items():
        text, found = redact(f"before {secret} after")
        assert found == [kind], kind
        assert secret not in text and f"[REDACTED:{kind}]" in text
        assert text.startswith("before ") and text.endswith(" after")


@given(st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=200))
def test_prose_without_secret_shapes_is_untouched(text: str) -> None:
    if not any(p.search(text) for _, p in PATTERNS):
        assert redact(text) == (text, [])


@pytest.mark.slow
def test_secret_files_are_excluded_and_contents_redacted(tmp_path: Path) -> None:
    root = tmp_path / "repo"
    (root / ".git").mkdir(parents=True)
    (root / ".git" / "notes.md").write_text("# git internals\n\nnot a document\n")
    (root / ".env.md").write_text(f"AWS={AWS_ID}\n")
    (root / ".env").write_text(f"AWS={AWS_ID}\n")
    (root / "id_rsa.md").write_text(PEM)
    (root / "deploy.md").write_text(
        f"# Deploy\n\nUse the key {AWS_ID} for the bucket.\n\n{PEM}\n\nThen run the job.\n"
    )
    settings = Settings(data_dir=tmp_path / "data")
    report = api.sync([root], settings=settings)
    assert report.docs_seen == 1 and report.secrets_redacted == 2
    with open_runtime(settings.with_paths([root])) as rt:
        texts = " ".join(c.text for c in rt.vectors.live_chunks("repo:deploy.md"))
        assert AWS_ID not in texts and "PRIVATE KEY" not in texts
        assert "[REDACTED:aws-access-key-id]" in texts and "Then run the job." in texts
        assert not rt.lexical.search(AWS_ID, 5, SearchFilter())
    status = ingest.status(settings=settings)
    assert [(r.doc_id, sorted(r.kinds)) for r in status.redactions] == [
        ("repo:deploy.md", ["aws-access-key-id", "private-key"])
    ]
    (root / "deploy.md").write_text("# Deploy\n\nThe key now lives in the vault.\n")
    api.sync([root], settings=settings)
    assert ingest.status(settings=settings).redactions == []
