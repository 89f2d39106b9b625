"""Secrets never reach the index: well-known credential shapes are redacted before chunking.

Only patterns with a distinctive shape are matched (key headers, provider prefixes), so
prose is never mangled; each hit is replaced by `[REDACTED:<kind>]` and reported, so the
redaction is visible in the sync outcome and in `status`.

>>> redact("key AKIAABCDEFGHIJKLMNOP here")
('key [REDACTED:aws-access-key-id] here', ['aws-access-key-id'])
"""

from __future__ import annotations

import re

from ragstream.core.models import ParsedDocument

PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = (
    (
        "private-key",
        re.compile(
            r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----.*?"
            r"(?:-----END (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----|\Z)",
            re.DOTALL,
        ),
    ),
    ("aws-access-key-id", re.compile(r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b")),
    (
        "aws-secret-access-key",
        re.compile(r"(?i)aws_secret_access_key\s*[:=]\s*[\"']?[A-Za-z0-9/+=]{40}[\"']?"),
    ),
    ("github-token", re.compile(r"\b(?:ghp|gho|ghu|ghs|ghr)_[A-Za-z0-9]{36,}\b")),
    ("github-token", re.compile(r"\bgithub_pat_[A-Za-z0-9_]{40,}\b")),
    ("slack-token", re.compile(r"\bxox[abposr]-[A-Za-z0-9-]{10,}\b")),
    ("openai-key", re.compile(r"\bsk-(?:proj-)?[A-Za-z0-9_-]{32,}\b")),
    ("google-api-key", re.compile(r"\bAIza[0-9A-Za-z_-]{35}\b")),
    ("stripe-key", re.compile(r"\b[sr]k_live_[0-9A-Za-z]{20,}\b")),
    ("jwt", re.compile(r"\beyJ[A-Za-z0-9_-]{10,}\.eyJ[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,}")),
)


def redact(text: str) -> tuple[str, list[str]]:
    """The text with every recognized secret replaced, and the kinds found (in order)."""
    found: list[str] = []
    for kind, pattern in PATTERNS:
        text, n = pattern.subn(f"[REDACTED:{kind}]", text)
        found += [kind] * n
    return text, found


def redact_document(doc: ParsedDocument) -> tuple[ParsedDocument, tuple[str, ...]]:
    """The document with secrets redacted in every block, and the kinds found."""
    kinds: list[str] = []
    blocks = []
    for block in doc.blocks:
        text, found = redact(block.text)
        kinds += found
        blocks.append(block.model_copy(update={"text": text}) if found else block)
    if not kinds:
        return doc, ()
    return doc.model_copy(update={"blocks": tuple(blocks)}), tuple(kinds)
