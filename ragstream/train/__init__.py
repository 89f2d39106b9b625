"""Training: the models this project ships and the ones `ragstream tune` fits per index.

- `answer_judge`: builds the shipped answer judge (`make answer-judge`).
- `answer_judge_data`: the answer judge's training pairs, from SQuAD 2.0 train articles.
- `crossencoder`: the one cross-encoder trainer, and its int8 ONNX export.
- `decision`: fits the calibrated answerability decision (`make decision`).
- `embedder`: contrastive fine-tuning of a sentence-transformers embedder.
- `judge`: builds the shipped support judge (`make judge`).
- `judge_data`: the support judge's training pairs, from SciFact train claims.
- `kinds_fit`: the decision's fit over every kind of unanswerable question at once.
- `tune`: `ragstream tune`: a reranker trained on the index's own retrieval.
- `tune_decision`: `ragstream tune --what decision`: the decision refitted on a user's index.
- `tune_embedder`: `ragstream tune --what embedder`: the live embedder fine-tuned.
"""
