"""Counting: token counters, offline tiktoken encodings, budgets and the usage breakdown."""
