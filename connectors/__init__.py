"""Floor 2: where documents come from (sources) and where chunks go (vector + lexical stores).

- `audit`: the index audit, every source compared with both stores per document.
- `backends`: the Qdrant backend a store kind names (Edge or a server), imported on use.
- `data_format`: the data dir's storage format record, its check and forward migrations.
- `export_files`: export records as JSON lines or Parquet, written and read a batch at a time.
- `fields`: the catalogue of metadata fields: each field's type, fixed by its first reading.
- `fs`: the folder source: files listed by a walk, read whole, followed by watchdog.
- `git`: the git source: a repository's tree at a ref, read by blob id, the ref polled.
- `lexical`: persistent BM25 over chunk text (tantivy, or rank-bm25 as the oracle).
- `ocr_cache`: what OCR already read, by the content hash of a file or a page image.
- `protocols`: one protocol per store and one for a source, shared by every implementation.
- `qdrant_edge`: the embedded vector store, Qdrant Edge in-process.
- `qdrant_server`: the vector store of a Qdrant server, or qdrant-client's local mode.
- `retrieval_log`: the append-only JSON-lines log of every query.
- `s3`: the S3 source: the objects under a bucket's prefix, listed with ETags, polled.
- `situate_cache`: the situating sentences already paid for, by content hash.
- `snapshot_files`: a data dir as one checked snapshot file (Edge shards as shard snapshots).
- `source_input`: the sync flow's bytewax input: every source's catch-up scan, then changes.
- `sources`: the registry of kinds' openers; the configured sources by name, opened once.
- `sparse`: BM25 as a Qdrant sparse vector (the lexical leg inside the vector store).
- `state`: small JSON records in the data dir (dead letters, sync and reindex bookkeeping).
- `stores`: opening a store by its kind (the one place that picks an implementation).
- `vector_stores`: what the two Qdrant stores share (naming, payload, filters, retries).
"""
