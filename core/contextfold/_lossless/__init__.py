"""Lossless compaction: handles to every original (``read_original``), clearing and
deduplication passes, and importance learned from what the agent reads back."""
