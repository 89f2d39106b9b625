"""Floor 3: the ingest and reindex flows that combine connectors and operators.

- `indexer`: the sync flow's two batch steps: read + parse, then chunk, diff, embed, write.
- `reindex`: blue/green reindex: build beside, backfill, dual-write, gate, swap.
- `runtime`: opening and closing everything one ingest process owns.
- `sides`: the collections one process owns: the live side and a reindex's other side.
- `situate`: the situate step: each chunk's LLM-written sentence, cached by content hash.
- `sources`: the folders a sync pass reads, checked and recorded in the data dir.
- `sync`: the bytewax sync dataflow, its store owner, and `run_sync`.
"""
