"""The ledger's state of a file from what the audit knows of it (`connectors.audit.file_state`):
a file whose permissions could not be read is `owner-only`, with the reason its chunks store,
and a redaction of the same file is still named; the drift and dead-letter states come first."""

from __future__ import annotations

from ragstream.connectors.audit import DocView, file_state
from ragstream.core.models import DeadLetter, Redaction
from tests.unit.connectors.test_lexical import chunk

DOC = "src:a.md"
WHY = "reading the ACL of /data/a.md: [Errno 13] Permission denied"


def view(*reasons: str, redacted: bool = False, dead: bool = False) -> DocView:
    points = [chunk(f"p{i}", "text", DOC, readers_reason=r) for i, r in enumerate(reasons)]
    out = DocView(DOC, points=points)
    if redacted:
        out.redaction = Redaction(doc_id=DOC, path="/data/a.md", kinds=("aws_key",))
    if dead:
        out.dead = DeadLetter(doc_id=DOC, path="/data/a.md", stage="parse", reason="x", at=0.0)
    return out


def test_a_file_stamped_for_its_owner_alone_is_owner_only_with_the_stored_reason() -> None:
    state, reason = file_state(view("", WHY), {})
    assert state == "owner-only"
    assert reason == f"permissions unreadable, readable by its owner only: {WHY}"


def test_plain_and_redacted_files_keep_their_states() -> None:
    assert file_state(view("", ""), {}) == ("indexed", "")
    assert file_state(view("", redacted=True), {}) == ("redacted", "secrets redacted: aws_key")


def test_owner_only_names_a_redaction_of_the_same_file_and_yields_to_drift() -> None:
    state, reason = file_state(view(WHY, redacted=True), {})
    assert state == "owner-only" and reason.endswith("; secrets redacted: aws_key")
    assert WHY in reason
    assert file_state(view(WHY), {"stale": "a newer version"}) == ("stale", "a newer version")
    assert file_state(view(WHY, dead=True), {})[0] == "dead"
