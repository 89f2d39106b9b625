"""An LLM-written sentence that situates a chunk in its document (optional).

A chunk cut from the middle of a document rarely says what it is about ("The second run
halved it."). Anthropic's *contextual retrieval* asks an LLM, given the document and the
chunk, for a short context that situates the chunk, and indexes it with the chunk. Here the
sentence goes into the chunk's `context` after the contextual header, so the dense side
embeds it (`operators.chunk.embedding_text`) and BM25 indexes it
(`connectors.lexical.lexical_text`); the shown and cited `text` never contains it.

`context` layout: the header on the first line (possibly empty), the situating sentence
after the first newline (absent when situating is off). The header and the sentence are
each one line, so `situation_of` can always split them apart.

Cost control, and why each piece is so:
- The sentence is a function of the chunk's content hash: it is asked for once per hash and
  kept in `connectors.situate_cache` (the flows step wires the two). The hash covers the
  chunk text, its header and the chunker key, which carries `situate_identity` (model,
  prompt version, sentence cap): changing any of them changes every hash, so the index is
  re-situated and re-embedded as a whole, never mixed.
- The document is sent as an excerpt of at most `DOC_CHARS` characters (its head plus the
  region around the chunk), not whole: the head says what the document is, the region what
  the chunk continues. The reply is capped (request `max_tokens`, then `max_tokens` embedder
  tokens, one line), and the chunk budget shrinks by that cap so header + sentence + text
  still fit the embedder.
- Transient endpoint errors (connection, timeout, 408/409/429/5xx) are retried by the
  openai client itself, with exponential backoff that honours `Retry-After`
  (`RETRIES` extra attempts); anything else, or an empty reply, raises `SituateError`. The
  caller never indexes a chunk without its sentence: the flows step dead-letters the whole
  document instead (its previous version stays searchable) and the next sync retries it.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

from ragstream.core.models import Chunk, ParsedDocument
from ragstream.operators.chunk import BLOCK_SEPARATOR, TokenCounter
from ragstream.operators.llm import openai_client

PROMPT_VERSION = "1"  # bump when the prompt changes: it is in every content hash when on
DOC_CHARS = 6000  # document excerpt sent with each chunk (~1.5k tokens)
RETRIES = 3  # extra attempts the openai client makes on a transient error
CONCURRENCY = 4  # requests in flight at once (local servers batch them; 429s are retried)
_GAP = "\n[…]\n"

SYSTEM = "You write one short sentence of context for a passage of a document, for search."
USER = (
    "<document>\n{document}\n</document>\n"
    "Here is the chunk we want to situate within the whole document:\n"
    "<chunk>\n{chunk}\n</chunk>\n"
    "Please give a short succinct context to situate this chunk within the overall document "
    "for the purposes of improving search retrieval of the chunk. Answer only with the "
    "succinct context (one sentence) and nothing else."
)

_LABEL = re.compile(r"^\s*(?:context|situating context|sentence)\s*:\s*", re.I)
_QUOTES = "\"'`“”‘’"


class SituateUnavailable(ValueError):
    """`chunk.situate` is on but no OpenAI-compatible endpoint is configured."""


class SituateError(RuntimeError):
    """The endpoint failed after its retries, or replied with nothing usable."""


def situate_identity(model: str, max_tokens: int) -> str:
    """Everything that changes a sentence: part of the chunker key when situating is on."""
    return f"{model}|prompt{PROMPT_VERSION}|tokens{max_tokens}"


def situated_context(header: str, sentence: str) -> str:
    """A chunk's `context` with its sentence: header line, newline, sentence (see above)."""
    return f"{header}\n{sentence}"


def situation_of(context: str) -> str:
    """The situating sentence of a `context` ('' when it has none)."""
    return context.partition("\n")[2]


def document_text(doc: ParsedDocument) -> str:
    """The text chunk char spans point into: non-empty blocks joined by `BLOCK_SEPARATOR`."""
    return BLOCK_SEPARATOR.join(b.text for b in doc.blocks if b.text.strip())


def document_excerpt(text: str, start: int, end: int, budget: int = DOC_CHARS) -> str:
    """At most ~`budget` chars of the document around the chunk at [start, end) (pure).

    A short document goes whole; a long one as its first half-budget (what the document is)
    plus a window centred on the chunk (what the chunk continues), gaps marked `[…]`.

    >>> document_excerpt("abcdefghij", 2, 4, budget=20)
    'abcdefghij'
    >>> document_excerpt("0123456789" * 3, 20, 22, budget=10)
    '01234\\n[…]\\n90123\\n[…]\\n'
    """
    if len(text) <= budget:
        return text
    if end <= budget:
        return text[:budget] + _GAP
    head = budget // 2
    room = budget - head
    lo = max(head, (start + end) // 2 - room // 2)
    hi = min(len(text), lo + room)
    lo = max(head, hi - room)
    gap_before = _GAP if lo > head else ""
    return text[:head] + gap_before + text[lo:hi] + (_GAP if hi < len(text) else "")


def parse_sentence(reply: str, max_tokens: int, count: TokenCounter) -> str:
    """The reply's first line of text, without a leading label or quotes, cut at a word
    boundary to at most `max_tokens` embedder tokens (pure given `count`). Models asked for
    "only the context" still add an explanation line now and then: it is dropped."""
    body = _LABEL.sub("", reply.strip())
    line = next((x for x in body.splitlines() if x.strip()), "")
    words = line.strip().strip(_QUOTES).split()
    kept, used = [], 0
    for word, n in zip(words, count(words), strict=True):
        if used + n > max_tokens:
            break
        kept.append(word)
        used += n
    return " ".join(kept).strip(_QUOTES)


class Situater:
    """Asks an OpenAI-compatible endpoint for the situating sentence of chunks."""

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key: str = "",
        timeout_s: float = 60.0,
        max_tokens: int = 48,
        retries: int = RETRIES,
        concurrency: int = CONCURRENCY,
    ) -> None:
        self._client = openai_client(base_url, api_key, timeout_s=timeout_s, max_retries=retries)
        self.base_url, self.model, self.max_tokens = base_url, model, max_tokens
        self.concurrency = concurrency

    @property
    def identity(self) -> str:
        return situate_identity(self.model, self.max_tokens)

    def sentence(self, document: str, chunk: str, count: TokenCounter) -> str:
        """One chunk's sentence. `document` is the excerpt to send (`document_excerpt`)."""
        return self._parse(self._ask(document, chunk), count)

    def sentences(
        self, jobs: Sequence[tuple[ParsedDocument, Chunk]], count: TokenCounter
    ) -> list[str | SituateError]:
        """The sentence of each (document, chunk), `concurrency` requests at a time; a failed
        one is returned as its error, so one bad chunk does not lose the others' (paid) work.
        Only the requests run in threads: the tokenizer behind `count` stays on this one."""
        texts = {doc.doc_id: document_text(doc) for doc, _ in jobs}
        prompts = [
            (document_excerpt(texts[doc.doc_id], c.char_start, c.char_end), c.text)
            for doc, c in jobs
        ]

        def ask(prompt: tuple[str, str]) -> str | SituateError:
            try:
                return self._ask(*prompt)
            except SituateError as err:
                return err

        if len(prompts) <= 1:
            replies = [ask(p) for p in prompts]
        else:
            with ThreadPoolExecutor(max_workers=self.concurrency) as pool:
                replies = list(pool.map(ask, prompts))
        out: list[str | SituateError] = []
        for reply in replies:
            try:
                out.append(reply if isinstance(reply, SituateError) else self._parse(reply, count))
            except SituateError as err:
                out.append(err)
        return out

    def _ask(self, document: str, chunk: str) -> str:
        import openai

        try:
            reply = self._client.chat.completions.create(
                model=self.model,
                messages=[
                    {"role": "system", "content": SYSTEM},
                    {"role": "user", "content": USER.format(document=document, chunk=chunk)},
                ],
                # the LLM's tokens are not the embedder's: room for ~2x, then cut exactly
                max_tokens=2 * self.max_tokens,
                temperature=0.0,
            )
            return reply.choices[0].message.content or ""
        except (openai.OpenAIError, IndexError, AttributeError) as exc:
            raise SituateError(
                f"situating failed ({self.model} at {self.base_url}): {type(exc).__name__}: {exc}"
            ) from exc

    def _parse(self, reply: str, count: TokenCounter) -> str:
        sentence = parse_sentence(reply, self.max_tokens, count)
        if not sentence:
            raise SituateError(f"situating failed ({self.model}): empty reply {reply!r}")
        return sentence

    def close(self) -> None:
        self._client.close()
