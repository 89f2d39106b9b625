"""Evaluation: BEIR datasets through the real ingest, retrieval ablations, answer checks."""
