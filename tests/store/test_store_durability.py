"""Durability and concurrency with real processes: SIGKILL mid-write, many writers at once."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from store_helpers import PostgresSchema, raw_sql

import contextfold as cf
from contextfold._stores.migrations import MIGRATIONS

# One append = one batch of two messages: after a crash a batch is all there or absent.
WRITER = """
import sys
import contextfold as cf

backend, target, writer, batches = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
if backend == "sqlite":
    store = cf.SQLiteStore(target)
else:
    url, schema = target.split("|")
    store = cf.PostgresStore(
        url, engine_options={"connect_args": {"options": f"-c search_path={schema}"}})
print("ready", flush=True)
sys.stdin.readline()  # start together
for i in range(batches):
    store.append("shared", [
        cf.Message("user", f"{writer} batch {i} first", id=f"{writer}-{i}-0"),
        cf.Message("assistant", f"{writer} batch {i} second", id=f"{writer}-{i}-1",
                   reasoning=f"thinking {writer} {i}"),
    ])
    print(i, flush=True)
"""


def _spawn(backend: str, target: str, writer: str, batches: int) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", WRITER, backend, target, writer, str(batches)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )


def _run_writers(backend: str, target: str, writers: int, batches: int) -> None:
    procs = [_spawn(backend, target, f"w{k}", batches) for k in range(writers)]
    for proc in procs:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    for proc in procs:  # all connected: release them together
        assert proc.stdin is not None
        proc.stdin.write("go\n")
        proc.stdin.flush()
    for proc in procs:
        proc.communicate(timeout=120)
        assert proc.returncode == 0


def _check_batches(messages: list[cf.Message], writers: list[str], batches: int) -> None:
    """Every batch present exactly once, its two messages adjacent, each writer in order."""
    ids = [m.id for m in messages]
    assert len(ids) == len(set(ids)) == len(writers) * batches * 2
    for index in range(0, len(ids), 2):
        first, second = ids[index], ids[index + 1]
        assert first.endswith("-0") and second == first[:-1] + "1"
    for writer in writers:
        mine = [i for i in ids if i.startswith(writer + "-")]
        assert mine == [f"{writer}-{b}-{k}" for b in range(batches) for k in (0, 1)]


def test_sigkill_mid_write_leaves_every_committed_batch(tmp_path: Path) -> None:
    path = str(tmp_path / "crash.db")
    proc = _spawn("sqlite", path, "w0", 5_000)
    assert proc.stdin is not None and proc.stdout is not None
    assert proc.stdout.readline().strip() == "ready"
    proc.stdin.write("go\n")
    proc.stdin.flush()
    acknowledged = -1
    while acknowledged < 200:
        acknowledged = int(proc.stdout.readline())
    os.kill(proc.pid, signal.SIGKILL)
    proc.communicate(timeout=30)
    assert proc.returncode == -signal.SIGKILL

    with cf.SQLiteStore(path) as store:
        loaded = store.load("shared")
        batches = len(loaded) // 2
        assert len(loaded) % 2 == 0, "a half-written batch is visible"
        assert batches > acknowledged, "an acknowledged append was lost"
        assert batches < 5_000, "the writer finished before it was killed"
        _check_batches(loaded, ["w0"], batches)
        assert raw_sql(store, None, "PRAGMA integrity_check") == [("ok",)]
        raw_sql(store, None, 'INSERT INTO "contextfold_messages_fts" '
                             "(\"contextfold_messages_fts\") VALUES ('integrity-check')")
        last = batches - 1
        hits = store.search_reasoning("shared", f"thinking w0 {last}")
        assert [h.position for h in hits][:1] == [2 * last + 1]


def test_four_processes_appending_to_one_sqlite_file_lose_nothing(tmp_path: Path) -> None:
    path = str(tmp_path / "shared.db")
    _run_writers("sqlite", path, writers=4, batches=40)
    with cf.SQLiteStore(path) as store:
        _check_batches(store.load("shared"), [f"w{k}" for k in range(4)], 40)
        assert raw_sql(store, None, "PRAGMA integrity_check") == [("ok",)]


def test_eight_processes_appending_to_postgres_lose_nothing(pg_schema: PostgresSchema) -> None:
    pg_schema.open().close()  # schema in place before the writers start
    _run_writers("postgres", f"{pg_schema.url}|{pg_schema.name}", writers=8, batches=15)
    store = pg_schema.open()
    try:
        loaded = store.load("shared")
        _check_batches(loaded, [f"w{k}" for k in range(8)], 15)
        positions = [h.position for h in store.search_messages("shared", "batch", limit=1000)]
        assert sorted(positions) == list(range(len(loaded)))
    finally:
        store.close()


def test_concurrent_first_open_migrates_once(tmp_path: Path) -> None:
    path, writers = str(tmp_path / "fresh.db"), 3
    _run_writers("sqlite", path, writers=writers, batches=1)
    with cf.SQLiteStore(path) as store:
        rows = raw_sql(store, None, 'SELECT COUNT(*) FROM "contextfold_migrations"')
        assert rows == [(len(MIGRATIONS),)]  # each applied once
        assert len(store.load("shared")) == 2 * writers
