"""LlamaIndex tests: known deprecation warnings raised inside the frameworks themselves."""

from __future__ import annotations

import pytest

# Raised inside llama-index-workflows: its ``inspect.getmembers`` call touches pydantic's
# deprecated attributes (``__fields__``, ``model_computed_fields``...) on every workflow
# built, so the warnings are attributed to ``inspect``; nothing in contextfold triggers them.
# ReActAgent asks ``ctx.is_running`` inside its own step, which llama-index-workflows
# deprecates.
_THIRD_PARTY = (
    "ignore::pydantic.warnings.PydanticDeprecationWarning:inspect",
    "ignore:is_running called from within a step:DeprecationWarning",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Apply the filters to this directory's tests only."""
    for item in items:
        if "llamaindex" in item.nodeid.split("/"):
            for spec in _THIRD_PARTY:
                item.add_marker(pytest.mark.filterwarnings(spec))
