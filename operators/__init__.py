"""Floor 2: the transformations of ingest and the models the query path runs.

Ingest: parse, chunk, diff, embed (the content hash itself is `core.ids`).

- `answer_judge`: the trained answer judge (does this sentence hold the answer?).
- `chunk`: structure-aware, token-bounded, edit-stable chunking.
- `cosine_scale`: one embedder's cosines read on another's scale, measured on the index's chunks.
- `cross_encoder`: an int8 ONNX cross-encoder run with onnxruntime (no torch).
- `diff`: a document's fresh chunks against what the index holds: keep, move, add, tombstone.
- `docling_convert`: docling's conversion of one document, without torch or transformers.
- `embed`: embedders loaded offline, each with its exact version identity.
- `judge`: the trained support judge (does a sentence support or contradict a statement?).
- `llm`: the one OpenAI-compatible client constructor.
- `metadata`: a document's own metadata read at parse time (front matter, properties, file).
- `onnx_export`: plain sentence-transformers embedders exported to ONNX for onnxruntime.
- `ocr`: a page image to text lines with boxes and confidences (Tesseract, RapidOCR), offline.
- `padding`: length-sorted mini-batches for onnxruntime models.
- `parse`: one file on disk to a document of structural blocks (docling).
- `remote_embed`: embeddings from an OpenAI-compatible endpoint, with an identity probe.
- `secrets`: credential shapes redacted before chunking.
- `situate`: an LLM-written sentence that situates a chunk in its document.
"""
