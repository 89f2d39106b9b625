"""Floor 2: where documents come from (fs source) and where chunks go (vector + lexical stores)."""
