"""Helpers shared by the store tests (the fixtures are in conftest.py)."""

from __future__ import annotations

import os
import uuid
from typing import Any

import pytest

import contextfold as cf
from contextfold.stores import BaseStore

BACKENDS = ["memory", "sqlite", "postgres"]
SQL_BACKENDS = ["sqlite", "postgres"]



def postgres_url() -> str:
    """The test server's URL; skip (locally) or fail (in CI) when there is none."""
    url = os.environ.get("CONTEXTFOLD_TEST_POSTGRES_URL")
    if not url:
        reason = ("CONTEXTFOLD_TEST_POSTGRES_URL is not set; "
                  "`source .ci/services/postgres.sh` starts a local server")
        if os.environ.get("CI"):
            pytest.fail(reason)
        pytest.skip(reason)
    return url


class PostgresSchema:
    """A throwaway schema; stores opened through it read and write only there."""

    def __init__(self, url: str) -> None:
        import sqlalchemy as sa

        self.url = url
        self.name = "cf_test_" + uuid.uuid4().hex[:12]
        self.admin = sa.create_engine(url)
        with self.admin.begin() as conn:
            conn.execute(sa.text(f'CREATE SCHEMA "{self.name}"'))

    def options(self) -> dict[str, Any]:
        return {"connect_args": {"options": f"-c search_path={self.name}"}}

    def open(self, **kwargs: Any) -> cf.PostgresStore:
        return cf.PostgresStore(self.url, engine_options=self.options(), **kwargs)

    def execute(self, sql: str, params: dict[str, Any] | None = None) -> list[Any]:
        import sqlalchemy as sa

        with self.admin.begin() as conn:
            conn.execute(sa.text(f'SET LOCAL search_path = "{self.name}"'))
            result = conn.execute(sa.text(sql), params or {})
            return list(result.fetchall()) if result.returns_rows else []

    def drop(self) -> None:
        import sqlalchemy as sa

        with self.admin.begin() as conn:
            conn.execute(sa.text(f'DROP SCHEMA "{self.name}" CASCADE'))
        self.admin.dispose()



def raw_sql(store: BaseStore, schema: PostgresSchema | None, sql: str,
            params: dict[str, Any] | None = None) -> list[Any]:
    """Run SQL straight against a SQL store's database (named ``:params``)."""
    if isinstance(store, cf.SQLiteStore):
        import sqlite3

        conn = sqlite3.connect(store.path, isolation_level=None)
        try:
            return conn.execute(sql, params or {}).fetchall()
        finally:
            conn.close()
    assert schema is not None
    return schema.execute(sql, params)
