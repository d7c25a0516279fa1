"""The engine: ``compact``/``acompact``, the per-conversation ``Compactor`` with its
incremental state, compaction results and events, and overflow recognition."""
