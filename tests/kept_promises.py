"""The promise every hostile input must leave intact: a valid request within the budget or
a typed refusal, and the caller's messages unchanged either way."""

from __future__ import annotations

from collections.abc import Callable

import contextfold as cf
from contextfold.errors import ContextfoldError
from contextfold.testing import assert_valid_within


def _snapshot(messages: list[cf.Message]) -> list[tuple[str, str]]:
    return [(m.id, m.fingerprint) for m in messages]


def assert_promises_kept(run: Callable[[], cf.CompactionResult], history: list[cf.Message],
                         budget: cf.Budget, counter: cf.TokenCounter) -> None:
    """Run ``run``: a typed refusal or a valid output within ``budget``, and ``history``
    as it was."""
    before = _snapshot(history)
    try:
        result = run()
    except ContextfoldError:
        pass  # a typed refusal is a kept promise
    else:
        assert_valid_within(result.messages, budget, counter)
    assert _snapshot(history) == before, "the caller's messages changed"
