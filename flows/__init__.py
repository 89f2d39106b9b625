"""Floor 3: bytewax dataflows that combine connectors and operators (sync, later reindex)."""
