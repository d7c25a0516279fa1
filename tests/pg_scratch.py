"""A throwaway PostgreSQL schema named in a URL, for tests that open a store from a URL.

The test database is shared by every run on the machine: a store opened on its default
schema would migrate that schema to this checkout's version (and a checkout with an older
schema would then refuse it). The URL returned sets ``search_path`` to a new schema that is
dropped afterwards.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def scratch_schema(url: str) -> Iterator[str]:
    """``url`` with its connections' ``search_path`` set to a new schema, dropped on exit."""
    import sqlalchemy as sa

    schema = "cf_test_" + uuid.uuid4().hex[:12]
    admin = sa.create_engine(url)
    with admin.begin() as conn:
        conn.execute(sa.text(f'CREATE SCHEMA "{schema}"'))
    try:
        separator = "&" if "?" in url else "?"
        yield f"{url}{separator}options=-csearch_path%3D{schema}"
    finally:
        with admin.begin() as conn:
            conn.execute(sa.text(f'DROP SCHEMA "{schema}" CASCADE'))
        admin.dispose()
