"""Evaluation: BEIR and SQuAD-format datasets through the real ingest and query path.

- `answer_ablation`: the assembly ablation, measured on answers.
- `answer_eval`: answer-level checks: gold context, and abstention.
- `beir`: BEIR-format datasets: loading, slicing, indexing a corpus as files.
- `conversations`: conversational retrieval (mtrag-un) by rewrite mode, last turn alone vs rewrite.
- `evaluation`: retrieval evaluation and ablation rows (`ragstream eval`), saved reports.
- `kinds`: every kind of answerable and unanswerable question, read through the engine.
- `failures`: the failure report: the first stage that broke per failing query.
- `negate`: negating a statement by rule (the contradictions the support judge learns and
  the verifier is measured on).
- `plots`: the retrieval report as PNGs (matplotlib).
- `squad`: SQuAD 2.0-format datasets, with and without answers, split by article.
- `squad_eval`: answer-level evaluation of a SQuAD-format question set.
"""
