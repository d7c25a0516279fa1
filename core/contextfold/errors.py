"""The one exception hierarchy of contextfold.

Developer mistakes (wrong configuration, wrong input shapes) are kept apart from
failures at run time (a budget that cannot be met, a summarizer that fails, a
storage backend that breaks)::

    ContextfoldError
    ├── ConfigurationError          a parameter or combination is invalid (also ValueError)
    ├── ConversionError             input messages cannot be converted (also ValueError)
    │   └── TranscriptError         a transcript file cannot be read (names file and position)
    ├── MissingExtraError           an optional dependency is not installed (also ImportError)
    ├── CompactionError             compaction could not produce a valid result
    │   ├── BudgetExceededError     even the protected minimum does not fit the budget
    │   ├── NoProgressError         a forced compaction could not shrink the context
    │   └── ContextOverflowError    the provider rejected the input as too long, also after
    │                               compacting below the limit it stated (wraps its error)
    ├── SummarizerError             a summarizer failed (after its retries)
    └── StoreError                  a history store failed
        ├── CorruptRowError         a stored row cannot be decoded
        └── SchemaVersionError      the database was written by a newer schema

Backend exceptions (``sqlite3.Error``, SQLAlchemy errors, provider errors) are
mapped to these at one boundary each, with the original kept as ``__cause__``.
"""

from __future__ import annotations

__all__ = [
    "BudgetExceededError",
    "CompactionError",
    "ConfigurationError",
    "ContextOverflowError",
    "ContextfoldError",
    "ConversionError",
    "CorruptRowError",
    "MissingExtraError",
    "NoProgressError",
    "SchemaVersionError",
    "StoreError",
    "SummarizerError",
    "TranscriptError",
]


class ContextfoldError(Exception):
    """Base class of every error raised by contextfold."""


class ConfigurationError(ContextfoldError, ValueError):
    """A parameter is out of range or parameters contradict each other.

    Raised when an object is built, never later: ``Budget(trigger=1.5)`` fails at once.
    """


class ConversionError(ContextfoldError, ValueError):
    """Input messages could not be converted.

    Attributes:
        index: position of the offending message in the input, when known.
        field: the offending field (``"role"``, ``"tool_calls[0].function.arguments"``...).
    """

    def __init__(self, reason: str, *, index: int | None = None, field: str | None = None) -> None:
        self.reason = reason
        self.index = index
        self.field = field
        where = []
        if index is not None:
            where.append(f"message {index}")
        if field is not None:
            where.append(f"field {field!r}")
        prefix = f"{', '.join(where)}: " if where else ""
        super().__init__(prefix + reason)


class TranscriptError(ConversionError):
    """A transcript file cannot be read or converted.

    Attributes:
        path: the file.
        position: where in it (``"line 12"``, ``"record 3, message 5"``).
    """

    def __init__(self, reason: str, *, path: str, position: str | None = None) -> None:
        self.path = path
        self.position = position
        where = f"{path}, {position}" if position else path
        super().__init__(f"{where}: {reason}")


class MissingExtraError(ContextfoldError, ImportError):
    """An optional dependency is missing; the message names the exact install line."""

    def __init__(self, package: str, extra: str, feature: str) -> None:
        self.package = package
        self.extra = extra
        super().__init__(
            f"{feature} needs the {package!r} package, which is not installed. "
            f'Install it with: pip install "contextfold[{extra}]"'
        )


class CompactionError(ContextfoldError):
    """Compaction could not produce a valid result."""


class BudgetExceededError(CompactionError):
    """Even the protected minimum does not fit the budget.

    Attributes:
        needed: tokens the protected minimum takes.
        available: tokens the budget allows.
        what: a description of what did not fit.
    """

    def __init__(self, what: str, *, needed: int, available: int) -> None:
        self.what = what
        self.needed = needed
        self.available = available
        super().__init__(f"{what} needs {needed} tokens but the budget allows {available}")


class NoProgressError(CompactionError):
    """A forced compaction could not shrink the context, so retrying would loop."""


class ContextOverflowError(CompactionError):
    """The provider rejected the input as longer than its context window, and the retry
    after compacting below the limit it stated was rejected too (or compaction could not
    shrink the input any further).

    Attributes:
        provider_error: the provider's own error (also the ``__cause__``).
    """

    def __init__(self, message: str, *, provider_error: BaseException) -> None:
        super().__init__(message)
        self.provider_error = provider_error


class SummarizerError(ContextfoldError):
    """A summarizer failed after its retries."""


class StoreError(ContextfoldError):
    """A history store operation failed."""


class CorruptRowError(StoreError):
    """A stored row could not be decoded. Rows are never skipped silently."""


class SchemaVersionError(StoreError):
    """The database was written by a newer schema version than this library knows."""
