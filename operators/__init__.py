"""Floor 2: the pure-ish transformations of ingest: parse, chunk, hash, diff, embed."""
