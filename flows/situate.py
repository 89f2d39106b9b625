"""The situate step of the sync flow: each chunk's `context` gets its LLM-written
situating sentence after the header, paying the endpoint only for content never seen.

Where a sentence comes from, in order (the first that has it wins):
1. a stored live point of the batch's documents with the same content hash — exactly what
   that point's vector embeds (kept and moved chunks, and a hash that changes occurrence);
2. the situate cache, by content hash (a chunk moved between files, a re-sync after a crash,
   a document deleted and restored);
3. the endpoint, once per distinct hash, written to the cache before anything is indexed.
With a healthy cache, (3) happens only for the chunks the batch really has to encode: a
vector reusable by content hash was written with a sentence the cache already holds.

Failure policy: a document is indexed with *all* its sentences or not at all in this pass.
If one of its chunks cannot get one (the endpoint failed after its retries, or replied
nothing), the document becomes a dead letter (stage `embed`, reason naming the endpoint
error) *without* a file fingerprint, so the next sync retries it even if the file did not
change; its previously indexed version stays live and searchable, and the sentences that
did succeed are cached, so the retry pays only for what failed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ragstream.connectors.situate_cache import SituateCache
from ragstream.core.models import Chunk, IndexedChunk, ParsedDocument
from ragstream.core.settings import Settings
from ragstream.core.telemetry import span
from ragstream.operators.chunk import TokenCounter
from ragstream.operators.situate import (
    SituateError,
    Situater,
    SituateUnavailable,
    situated_context,
    situation_of,
)

DocToSituate = tuple[ParsedDocument, Sequence[Chunk], Sequence[IndexedChunk]]


def situate_model(settings: Settings) -> str:
    """The model that writes the sentences: `chunk.situate_model`, else `generator.model`."""
    return settings.chunk.situate_model or settings.generator.model


def open_situate(settings: Settings) -> SituateStep | None:
    """The step when `chunk.situate` is on (None when off). Fails fast, before any store is
    opened, when it is on without an endpoint: silently indexing without the sentences
    would build an index that claims them."""
    if not settings.chunk.situate:
        return None
    g = settings.generator
    if not g.base_url:
        raise SituateUnavailable(
            "chunk.situate needs an OpenAI-compatible endpoint: set generator.base_url "
            "(RAGSTREAM_GENERATOR__BASE_URL) or switch chunk.situate off"
        )
    situater = Situater(
        g.base_url, situate_model(settings), g.api_key, g.timeout_s, settings.chunk.situate_tokens
    )
    return SituateStep(situater, SituateCache(settings.state_dir))


@dataclass
class SituateStep:
    situater: Situater
    cache: SituateCache

    def apply(self, docs: Sequence[DocToSituate], count: TokenCounter) -> list[list[Chunk] | str]:
        """For each (document, its new chunks, its stored live points): the chunks with header
        + sentence in `context`, or the reason the document could not be situated."""
        with span("ingest.situate", docs=len(docs), model=self.situater.model) as sp:
            stored: dict[str, str] = {}
            for _, _, points in docs:
                for point in points:
                    if sentence := situation_of(point.context):
                        stored.setdefault(point.content_hash, sentence)
            hashes = {c.content_hash for _, chunks, _ in docs for c in chunks}
            cached = self.cache.get(h for h in hashes if h not in stored)
            jobs: dict[str, tuple[ParsedDocument, Chunk]] = {}
            for doc, chunks, _ in docs:
                for c in chunks:
                    if c.content_hash not in stored and c.content_hash not in cached:
                        jobs.setdefault(c.content_hash, (doc, c))
            replies = self.situater.sentences(list(jobs.values()), count)
            results = dict(zip(jobs, replies, strict=True))
            generated = {h: r for h, r in results.items() if isinstance(r, str)}
            failed = {h: r for h, r in results.items() if isinstance(r, SituateError)}
            self.cache.put(generated, self.situater.identity)  # paid for: kept before use
            sentences = {**cached, **generated, **stored}
            out = [_situated(chunks, sentences, failed) for _, chunks, _ in docs]
            sp.set_attribute("chunks_in", sum(len(chunks) for _, chunks, _ in docs))
            sp.set_attribute("reused", len(hashes & stored.keys()))
            sp.set_attribute("cached", len(cached))
            sp.set_attribute("generated", len(generated))
            sp.set_attribute("failed", len(failed))
            sp.set_attribute("docs_failed", sum(isinstance(r, str) for r in out))
        return out

    def close(self) -> None:
        self.situater.close()
        self.cache.close()


def _situated(
    chunks: Sequence[Chunk], sentences: dict[str, str], failed: dict[str, SituateError]
) -> list[Chunk] | str:
    errors = [failed[c.content_hash] for c in chunks if c.content_hash in failed]
    if errors:
        return (
            f"situating sentence missing for {len(errors)} of {len(chunks)} chunks "
            f"(retried on the next sync): {errors[0]}"
        )
    return [
        c.model_copy(update={"context": situated_context(c.context, sentences[c.content_hash])})
        for c in chunks
    ]
