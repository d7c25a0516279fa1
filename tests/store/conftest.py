"""Store fixtures: one contract suite over the memory, SQLite and PostgreSQL backends.

PostgreSQL cases need ``CONTEXTFOLD_TEST_POSTGRES_URL`` (``.ci/services/postgres.sh`` starts
a server and sets it). Locally they skip with that reason; in CI (``CI`` set) they fail.
Each PostgreSQL test gets its own schema, so tests never see each other's rows.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from store_helpers import BACKENDS, PostgresSchema, postgres_url

import contextfold as cf
from contextfold.stores import BaseStore


@pytest.fixture
def pg_schema() -> Iterator[PostgresSchema]:
    schema = PostgresSchema(postgres_url())
    yield schema
    schema.drop()


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def open_store(backend: str, tmp_path: Any, request: pytest.FixtureRequest
               ) -> Iterator[Callable[..., BaseStore]]:
    """Opens a store of the current backend; every call opens the same database again."""
    opened: list[BaseStore] = []
    schema: PostgresSchema | None = None
    if backend == "postgres":
        schema = request.getfixturevalue("pg_schema")
    memory = cf.MemoryStore()

    def factory(**kwargs: Any) -> BaseStore:
        store: BaseStore
        if backend == "memory":
            return memory
        if backend == "sqlite":
            store = cf.SQLiteStore(tmp_path / "history.db", **kwargs)
        else:
            assert schema is not None
            store = schema.open(**kwargs)
        opened.append(store)
        return store

    yield factory
    for store in opened:
        store.close()


@pytest.fixture
def store(open_store: Callable[..., BaseStore]) -> BaseStore:
    return open_store()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every test that reaches PostgreSQL carries the ``postgres`` marker, so
    ``-m postgres`` / ``-m "not postgres"`` select exactly them."""
    for item in items:
        params = getattr(item, "callspec", None)
        uses_pg = "pg_schema" in getattr(item, "fixturenames", ()) or (
            params is not None and params.params.get("backend") == "postgres"
        )
        if uses_pg:
            item.add_marker(pytest.mark.postgres)
