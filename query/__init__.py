"""Floor 3: the query path, from a question to a verified answer or a refusal.

- `answerable`: answerability evidence: do the retrieved chunks hold what is asked?
- `assemble`: reranked chunks to a token-bounded, spotlighted prompt with citation ids.
- `conversation`: follow-ups: history bounds, the standalone test, the offline and LLM rewrite.
- `decision`: the calibrated answerability decision over the judge's and index's signals.
- `engine`: runs a request through a named pipeline, blocking or awaited, on one side.
- `freshness`: which file version an answer quotes, and whether the file changed since.
- `fuse`: rank fusion of the retrieval legs (RRF, DBSF).
- `gate`: the sufficiency gate: refuse before generating when the evidence is too weak.
- `generate`: answer generation: an OpenAI-compatible client, or the offline extractive one.
- `models`: the models the query path reads, loaded once and shared by engines.
- `pipelines`: the named pipelines (the stage order, written once) and their runner.
- `polarity`: does a claim say the opposite of the sentence it copies?
- `recency`: a preference for recent documents: a score that halves every half-life of age.
- `refusal`: every rule by which the query path refuses to answer.
- `rerank`: cross-encoder reranking of the fused candidates to the k best.
- `retrieve`: hybrid retrieval: dense and BM25 legs under one filter, then fusion.
- `scales`: the cosine scale each side's embedder is read on, measured and kept.
- `shapes`: conversions between the engine's values and the query contract's types.
- `stages`: what each stage of an answer computes, and the refusal rules it applies.
- `transforms`: query transforms an LLM writes (keywords, HyDE, decomposition).
- `verify`: citation verification: is every answer sentence backed by a chunk it cites?
"""
