"""Compaction policies: one module per strategy, each a pure function of (messages, context)."""
