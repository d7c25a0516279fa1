"""Summaries: the summarizer protocol, the service that answers policies' requests
(cache, split, retry, verify, fall back), the prompt, and the extractive summarizer."""
