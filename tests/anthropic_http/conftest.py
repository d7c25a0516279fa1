"""The real Anthropic clients keep pooled connections that only the garbage collector closes
(with a ResourceWarning). Collect after each test here, with that warning ignored, so a
later test never sees a socket these tests left behind."""

from __future__ import annotations

import gc
import warnings
from collections.abc import Iterator

import pytest


@pytest.fixture(autouse=True)
def _close_client_connections() -> Iterator[None]:
    yield
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)
        gc.collect()
