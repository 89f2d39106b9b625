"""Evaluation: BEIR and SQuAD-format datasets through the real ingest and query path.

- `answer_ablation`: the assembly ablation, measured on answers.
- `answer_eval`: answer-level checks: gold context, and abstention.
- `beir`: BEIR-format datasets: loading, slicing, indexing a corpus as files.
- `conversations`: conversational retrieval (mtrag-un) by rewrite mode, last turn alone vs rewrite.
- `datasets`: a dataset indexed, opened and evaluated in each mode of `ragstream eval`.
- `evaluation`: retrieval scoring and ablation rows over an open retriever, the reports.
- `failures`: the failure report: the first stage that broke per failing query.
- `kind_sets`: the shared data sets' questions of every kind, each on its own opened index.
- `kinds`: every kind of answerable and unanswerable question, read through an open engine.
- `negate`: negating a statement by rule (the contradictions the support judge learns and
  the verifier is measured on).
- `opened`: the one way eval and train open an index: the served index's engine, log off.
- `plots`: the retrieval report as PNGs (matplotlib).
- `squad`: SQuAD 2.0-format datasets, with and without answers, split by article.
- `squad_eval`: answer-level evaluation of a SQuAD-format question set.
"""
