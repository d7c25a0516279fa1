"""Recognising a context-overflow error in LangChain (the threshold design's third layer of
defence).

The rules live in the core
([`contextfold.integration.overflow_of`][contextfold.integration.overflow_of]: OpenAI's
``context_length_exceeded``, Anthropic's ``prompt is too long`` and other providers' wording,
searched along the exception chain); this module adds langchain-core's ``ContextOverflowError``,
which current partner packages raise (for example langchain-openai's
``OpenAIContextOverflowError``).
"""

from __future__ import annotations

from contextfold.integration import OVERFLOW_PHRASES, overflow_figures
from contextfold.integration import is_context_overflow as _is_overflow

__all__ = ["OVERFLOW_PHRASES", "is_context_overflow", "overflow_classes", "overflow_figures"]


def overflow_classes() -> tuple[type[BaseException], ...]:
    """langchain-core's typed overflow errors (none before ``ContextOverflowError`` existed)."""
    try:
        from langchain_core.exceptions import ContextOverflowError
    except ImportError:  # langchain-core before ContextOverflowError existed
        return ()
    return (ContextOverflowError,)


def is_context_overflow(error: BaseException) -> bool:
    """True when ``error`` (or an error it was raised from) says the input was too long.

    Example::

        try:
            model.invoke(messages)
        except Exception as exc:
            if is_context_overflow(exc):
                ...  # compact with force=True and retry
    """
    return _is_overflow(error, overflow_classes())
