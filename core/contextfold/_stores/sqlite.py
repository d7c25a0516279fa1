"""``SQLiteStore``: the default store, an embedded SQLite file through stdlib ``sqlite3``.

- WAL journal with ``synchronous=FULL``: ``append`` is durable when it returns, readers
  never block the writer, and a killed process leaves every committed message readable.
- One ``BEGIN IMMEDIATE`` transaction per ``append``: positions come from the table under
  the write lock, so many processes can append to one file without losing or reordering.
- Every value is bound, every identifier quoted; the optional ``tracer(sql, params)`` sees
  every statement before it runs.
- FTS5 indexes (Porter stemming) over message text and over reasoning, ranked by BM25.
  Each query term is quoted as an FTS5 phrase, so operators in user text are plain words.
- Token counts are kept in their own table beside the messages (``_counts.py``); counts
  added after the messages were stored are a cache, committed without waiting for the
  disk (``synchronous=NORMAL`` for that transaction: a killed process keeps them, a power
  loss may lose the last ones, which are then counted again).
- ``sqlite3.Error`` becomes ``StoreError`` in ``_guard``, the one boundary.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Literal

from .._messages.model import Message
from ..errors import ConfigurationError, StoreError
from .base import BaseStore, SearchHit, SearchKind, Tracer
from .codec import decode_row, indexable, search_text, stored_digest, stored_form
from .counts import StoredCounts, digests_of, held_counts, restore_rows, stored_counts_of
from .migrations import MIGRATIONS, MIGRATIONS_TABLE_SQLITE, T, check_version
from .snippet import make_snippet, snippet_pattern

__all__ = ["SQLiteStore", "fts_query", "search_sql"]

_INSERT_MESSAGE = f"""INSERT INTO {T.messages} ("conversation_id", "position", "message_id",
    "role", "source", "sender_id", "created_at", "search_text", "reasoning", "body",
    "digest") VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"""
_NEXT_POSITION = f"""SELECT COALESCE(MAX("position"), -1) + 1 FROM {T.messages}
    WHERE "conversation_id" = ?"""
_SELECT_ALL = f"""SELECT "id", "body", "position" FROM {T.messages}
    WHERE "conversation_id" = ? ORDER BY "position\""""
_SELECT_RECENT = f"""SELECT "id", "body", "position" FROM (SELECT "id", "body", "position"
    FROM {T.messages} WHERE "conversation_id" = ? ORDER BY "position" DESC LIMIT ?)
    ORDER BY "position\""""

# Token counts (``_counts.py``): binds in the order of each statement's placeholders.
_INSERT_COUNT = f"""INSERT INTO {T.token_counts} ("message", "counter", "tokens")
    SELECT "id", ?, ? FROM {T.messages} WHERE "conversation_id" = ? AND "position" = ?
    ON CONFLICT ("message", "counter") DO NOTHING"""
_SELECT_COUNTS = f"""SELECT c."message", c."counter", c."tokens" FROM {T.token_counts} AS c
    JOIN {T.messages} AS m ON m."id" = c."message"
    WHERE m."conversation_id" = ? AND m."position" >= ?"""
_PUT_COUNT = f"""INSERT INTO {T.token_counts} ("message", "counter", "tokens")
    VALUES (?, ?, ?) ON CONFLICT ("message", "counter") DO NOTHING"""
_ROWS_OF = f"""SELECT "id", "message_id", "digest",
    CASE WHEN "digest" IS NULL THEN "body" END FROM {T.messages}
    WHERE "conversation_id" = ? AND "message_id" IN (SELECT "value" FROM json_each(?))"""
_SET_DIGEST = f'UPDATE {T.messages} SET "digest" = ? WHERE "id" = ?'
_STORED_COUNTS = f"""SELECT m."id", m."message_id", m."digest", c."counter", c."tokens",
    CASE WHEN instr(m."message_id", char(65533)) > 0 THEN m."body" END
    FROM {T.messages} AS m LEFT JOIN {T.token_counts} AS c ON c."message" = m."id"
    WHERE m."conversation_id" = ?"""
_CLEAR_COUNTS = f"""DELETE FROM {T.token_counts} WHERE "message" IN
    (SELECT "id" FROM {T.messages} WHERE "conversation_id" = ?)"""
_SELECT_SYSTEM = f"""SELECT "id", "body" FROM {T.messages} WHERE "conversation_id" = ?
    AND "role" IN ('system', 'developer') ORDER BY "position" LIMIT 1"""
_SELECT_LATEST_BROADCAST = f"""SELECT "id", "body" FROM {T.messages}
    WHERE "conversation_id" = ? AND "source" = 'broadcast' ORDER BY "position" DESC LIMIT 1"""

_TABLES: dict[SearchKind, tuple[str, str, str]] = {
    "messages": (T.messages_fts, T.messages, "conversation_id"),
    "reasoning": (T.reasoning_fts, T.messages, "conversation_id"),
    "broadcasts": (T.broadcasts_fts, T.broadcasts, "swarm_id"),
}


def fts_query(terms: Sequence[str]) -> str:
    """An FTS5 query matching every term literally: each is quoted as a phrase."""
    return " ".join('"' + t.replace('"', '""') + '"' for t in terms)


def search_sql(kind: SearchKind, window: int | None = None) -> str:
    """Ranks matches by BM25, best first; binds (fts query, owner id, limit).

    With ``window``, only the owner's ``window`` most recent matches are ranked, so the
    cost stays flat however many old messages a common word matches. Only row ids and
    ranks are read here: snippets and bodies come afterwards for the winners alone
    (``SQLiteStore._search``).
    """
    fts, table, owner = _TABLES[kind]
    matches = f"""SELECT {fts}.rowid AS "id", bm25({fts}) AS "rank" FROM {fts}
    JOIN {table} AS t ON t."id" = {fts}.rowid WHERE {fts} MATCH ? AND t."{owner}" = ?"""
    if window is None:
        return f"""{matches} ORDER BY "rank", {fts}.rowid DESC LIMIT ?"""
    return f"""SELECT "id", "rank" FROM ({matches} ORDER BY {fts}.rowid DESC
    LIMIT {int(window)}) ORDER BY "rank", "id" DESC LIMIT ?"""


class SQLiteStore(BaseStore):
    """The history store in one SQLite file (``":memory:"`` for a throwaway database).

    Args:
        path: the database file; created with its schema when missing.
        tracer: called with ``(sql, params)`` before every statement.
        timeout: seconds to wait for another process's write lock.
        search_window: searches rank (BM25) the conversation's most recent
            ``search_window`` matches, so latency stays flat as the history grows;
            ``None`` ranks every match.

    One connection is shared by the store's threads behind a lock; open one store per
    process (SQLite itself serialises writers across processes).
    """

    def __init__(
        self, path: str | Path = ":memory:", *, tracer: Tracer | None = None,
        timeout: float = 30.0, search_window: int | None = 1_000,
    ) -> None:
        if search_window is not None and (
                not isinstance(search_window, int) or search_window < 1):
            raise ConfigurationError(f"search_window must be None or >= 1, got {search_window!r}")
        self.path = str(path)
        self.search_window = search_window
        self.tracer = tracer
        self._lock = threading.RLock()
        with _guard():
            self._conn = sqlite3.connect(
                self.path, timeout=timeout, isolation_level=None, check_same_thread=False
            )
        try:
            # Nothing is written before the schema check: a database from a newer
            # contextfold is refused untouched (no journal-mode change, no table).
            self._check_recorded_version()
            for pragma in ("PRAGMA synchronous = FULL", "PRAGMA cache_size = -32000"):
                self._exec(pragma)
            self._use_wal(timeout)
            self._migrate()
        except BaseException:
            self._conn.close()
            raise

    def __repr__(self) -> str:
        return f"SQLiteStore({self.path!r})"

    def close(self) -> None:
        """Close the connection."""
        with self._lock:
            self._conn.close()

    # -- plumbing -------------------------------------------------------------------------

    def _exec(self, sql: str, params: Sequence[Any] = ()) -> sqlite3.Cursor:
        if self.tracer is not None:
            self.tracer(sql, tuple(params))
        with self._lock, _guard():
            return self._conn.execute(sql, params)

    def _rows(self, sql: str, params: Sequence[Any] = ()) -> list[Any]:
        with self._lock, _guard():
            return self._exec(sql, params).fetchall()

    @contextmanager
    def _write(self) -> Iterator[None]:
        """One write transaction, taking SQLite's write lock at once."""
        with self._lock:
            self._exec("BEGIN IMMEDIATE")
            try:
                yield
                self._exec("COMMIT")
            except BaseException:
                if self._conn.in_transaction:
                    self._exec("ROLLBACK")
                raise

    @contextmanager
    def _cache_write(self) -> Iterator[None]:
        """A write transaction whose commit does not wait for the disk (WAL with
        ``synchronous=NORMAL``): for what may be lost to a power cut and made again."""
        with self._lock:
            self._exec("PRAGMA synchronous = NORMAL")
            try:
                with self._write():
                    yield
            finally:
                self._exec("PRAGMA synchronous = FULL")

    def _check_recorded_version(self) -> None:
        """Refuse a newer schema with reads only."""
        exists = self._rows("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?",
                            (T.migrations.strip('"'),))
        if exists:
            check_version(self._rows(f'SELECT MAX("version") FROM {T.migrations}')[0][0],
                          self.path)

    def _use_wal(self, timeout: float) -> None:
        """Switch to WAL once. Several processes opening a new file at once race for the
        switch, and SQLite answers the losers "database is locked" without waiting on its
        busy timeout: they wait here instead, until the winner has switched."""
        deadline = time.monotonic() + timeout
        delay = 0.01
        while True:
            mode = self._rows("PRAGMA journal_mode")[0][0]
            if str(mode).lower() == "wal":
                return
            try:
                self._exec("PRAGMA journal_mode = WAL")
                return
            except StoreError as exc:
                if "locked" not in str(exc) or time.monotonic() >= deadline:
                    raise
            time.sleep(delay)
            delay = min(delay * 2, 0.5)

    def _migrate(self) -> None:
        self._exec(MIGRATIONS_TABLE_SQLITE)
        for migration in MIGRATIONS:
            with self._write():
                newest = self._rows(f'SELECT MAX("version") FROM {T.migrations}')[0][0]
                check_version(newest, self.path)
                if newest is not None and newest >= migration.version:
                    continue
                for statement in migration.sqlite:
                    self._exec(statement)
                self._exec(
                    f'INSERT INTO {T.migrations} ("version", "name", "applied_at") '
                    "VALUES (?, ?, ?)",
                    (migration.version, migration.name, _now()),
                )
        check_version(self._rows(f'SELECT MAX("version") FROM {T.migrations}')[0][0],
                      self.path)

    def _decode(self, table: str, rows: Iterable[Any]) -> list[Message]:
        return [decode_row(table, row[0], row[1]) for row in rows]

    # -- history --------------------------------------------------------------------------

    def _append(self, conversation_id: str, messages: list[Message]) -> None:
        encoded = [_encode(m) for m in messages]
        with self._write():
            self._insert(conversation_id, encoded)

    def _insert(self, conversation_id: str, encoded: list[_Encoded]) -> None:
        start = self._rows(_NEXT_POSITION, (conversation_id,))[0][0]
        params = [(conversation_id, start + i, *row) for i, (row, _) in enumerate(encoded)]
        counts = [(name, tokens, conversation_id, start + i)
                  for i, (_, held) in enumerate(encoded) for name, tokens in held.items()]
        self._executemany(_INSERT_MESSAGE, params)
        if counts:
            self._executemany(_INSERT_COUNT, counts)

    def _executemany(self, sql: str, params: list[tuple[Any, ...]]) -> None:
        if self.tracer is not None:
            self.tracer(sql, params)
        with _guard():
            self._conn.executemany(sql, params)

    def _load(self, conversation_id: str, limit: int | None) -> list[Message]:
        with self._lock:
            self._exec("BEGIN")  # one snapshot for the messages and their counts
            try:
                if limit is None:
                    rows = self._rows(_SELECT_ALL, (conversation_id,))
                else:
                    rows = self._rows(_SELECT_RECENT, (conversation_id, limit))
                counts = self._rows(_SELECT_COUNTS, (conversation_id, rows[0][2])) \
                    if rows else []
            finally:
                self._exec("COMMIT")
        messages = self._decode(T.messages, rows)
        restore_rows(T.token_counts, {row[0]: m for row, m in zip(rows, messages, strict=True)},
                     counts)
        return messages

    def _put_counts(self, conversation_id: str,
                    batch: list[tuple[Message, dict[str, int]]]) -> None:
        wanted = _wanted(batch)
        if not wanted:
            return
        ids = json.dumps(sorted({key for key, _ in wanted}))
        with self._cache_write():
            rows = self._rows(_ROWS_OF, (conversation_id, ids))
            found = dict(digests_of((row[0], row[3]) for row in rows if row[2] is None))
            if found:  # rows of schema 1 get their digest, once
                self._executemany(_SET_DIGEST, [(d, row_id) for row_id, d in found.items()])
            self._executemany(_PUT_COUNT, [
                (row_id, name, tokens) for row_id, key, digest, _ in rows
                for name, tokens in wanted.get((key, digest or found[row_id]), {}).items()])

    def _stored_counts(self, conversation_id: str) -> StoredCounts:
        return stored_counts_of(self._rows(_STORED_COUNTS, (conversation_id,)))

    def _system_message(self, conversation_id: str) -> Message | None:
        found = self._decode(T.messages, self._rows(_SELECT_SYSTEM, (conversation_id,)))
        return found[0] if found else None

    def _clear(self, conversation_id: str) -> None:
        with self._write():
            self._exec(_CLEAR_COUNTS, (conversation_id,))
            self._exec(f'DELETE FROM {T.messages} WHERE "conversation_id" = ?',
                       (conversation_id,))
            self._exec(f'DELETE FROM {T.originals} WHERE "conversation_id" = ?',
                       (conversation_id,))
            self._exec(f'DELETE FROM {T.states} WHERE "conversation_id" = ?',
                       (conversation_id,))

    # -- search ---------------------------------------------------------------------------

    def _search(
        self, kind: SearchKind, owner: str, terms: list[str], limit: int
    ) -> list[SearchHit]:
        _, table, _ = _TABLES[kind]
        text = "reasoning" if kind == "reasoning" else "search_text"
        with self._lock:
            self._exec("BEGIN")  # one snapshot for both statements
            try:
                ranked = self._rows(search_sql(kind, self.search_window),
                                    (fts_query(terms), owner, limit))
                marks = ", ".join("?" * len(ranked))
                rows = self._rows(
                    f'SELECT "id", "position", "body", "{text}" FROM {table} '
                    f'WHERE "id" IN ({marks})', [r[0] for r in ranked]) if ranked else []
            finally:
                self._exec("COMMIT")
        by_id = {row[0]: row for row in rows}
        pattern = snippet_pattern(terms)
        prefix = "b" if kind == "broadcasts" else "m"
        hits = []
        for row_id, rank in ranked:
            if row_id not in by_id:
                continue
            _, position, body, indexed = by_id[row_id]
            message = decode_row(table, row_id, body)
            hits.append(SearchHit(
                message=message, conversation_id=owner, position=position,
                role=message.role, source=message.source,
                snippet=make_snippet(indexed or "", pattern), created_at=message.created_at,
                score=-float(rank), handle=f"{prefix}:{row_id}",
            ))
        return hits

    def _fetch(self, kind: Literal["m", "b"], row_id: int) -> tuple[str, Message] | None:
        table, owner = (T.messages, "conversation_id") if kind == "m" else \
            (T.broadcasts, "swarm_id")
        rows = self._rows(f'SELECT "id", "body", "{owner}" FROM {table} WHERE "id" = ?',
                          (row_id,))
        if not rows:
            return None
        return rows[0][2], decode_row(table, rows[0][0], rows[0][1])

    # -- broadcasts -----------------------------------------------------------------------

    def _join_swarm(self, conversation_id: str, swarm_id: str) -> None:
        self._exec(
            f'INSERT OR IGNORE INTO {T.members} ("swarm_id", "conversation_id") VALUES (?, ?)',
            (swarm_id, conversation_id),
        )

    def _swarm_members(self, swarm_id: str) -> list[str]:
        rows = self._rows(f'SELECT "conversation_id" FROM {T.members} WHERE "swarm_id" = ? '
                          'ORDER BY "conversation_id"', (swarm_id,))
        return [r[0] for r in rows]

    def _swarms_of(self, conversation_id: str) -> list[str]:
        rows = self._rows(f'SELECT "swarm_id" FROM {T.members} WHERE "conversation_id" = ? '
                          'ORDER BY "swarm_id"', (conversation_id,))
        return [r[0] for r in rows]

    def _broadcast(self, swarm_id: str, message: Message, recipients: list[str]) -> None:
        encoded, _ = _encode(message)
        with self._write():
            position = self._rows(
                f'SELECT COALESCE(MAX("position"), -1) + 1 FROM {T.broadcasts} '
                'WHERE "swarm_id" = ?', (swarm_id,))[0][0]
            self._exec(
                f'INSERT INTO {T.broadcasts} ("swarm_id", "position", "sender_id", '
                '"created_at", "search_text", "body") VALUES (?, ?, ?, ?, ?, ?)',
                (swarm_id, position, message.sender_id or "", encoded[4], message.text,
                 encoded[7]),
            )
            for conversation_id in recipients:
                self._join_swarm(conversation_id, swarm_id)
                self._insert(conversation_id, [(encoded, {})])

    def _latest_broadcast(self, conversation_id: str) -> Message | None:
        found = self._decode(T.messages,
                             self._rows(_SELECT_LATEST_BROADCAST, (conversation_id,)))
        return found[0] if found else None

    def _latest_commander_broadcast(self, swarm_ids: Iterable[str]) -> Message | None:
        swarms = list(swarm_ids)
        marks = ", ".join("?" for _ in swarms)
        rows = self._rows(
            f'SELECT "id", "body" FROM {T.broadcasts} WHERE "swarm_id" IN ({marks}) '
            """AND "sender_id" = '' ORDER BY "id" DESC LIMIT 1""", swarms)
        found = self._decode(T.broadcasts, rows)
        return found[0] if found else None

    # -- summaries and originals ----------------------------------------------------------

    def _get_summary(self, key: str) -> str | None:
        rows = self._rows(f'SELECT "text" FROM {T.summaries} WHERE "key" = ?', (key,))
        return str(rows[0][0]) if rows else None

    def _put_summary(self, key: str, text: str) -> None:
        self._exec(
            f'INSERT INTO {T.summaries} ("key", "text", "updated_at") VALUES (?, ?, ?) '
            'ON CONFLICT ("key") DO UPDATE SET "text" = excluded."text", '
            '"updated_at" = excluded."updated_at"', (key, text, _now()))

    def _put_original(self, conversation_id: str, handle: str, text: str) -> None:
        self._exec(
            f'INSERT INTO {T.originals} ("conversation_id", "handle", "text") VALUES (?, ?, ?) '
            'ON CONFLICT ("conversation_id", "handle") DO UPDATE SET "text" = excluded."text"',
            (conversation_id, handle, text))

    def _get_original(self, conversation_id: str, handle: str) -> str | None:
        rows = self._rows(
            f'SELECT "text" FROM {T.originals} WHERE "conversation_id" = ? AND "handle" = ?',
            (conversation_id, handle))
        return str(rows[0][0]) if rows else None

    # -- compaction state ---------------------------------------------------------------

    def _get_state(self, conversation_id: str) -> tuple[int, str] | None:
        rows = self._rows(f'SELECT "version", "state" FROM {T.states} '
                          'WHERE "conversation_id" = ?', (conversation_id,))
        return (int(rows[0][0]), str(rows[0][1])) if rows else None

    def _put_state(self, conversation_id: str, state: str, after: int) -> bool:
        # one statement either way: the row's version decides, under the write lock. A state
        # lost to a power cut is made again by the next call: no wait for the disk
        with self._cache_write():
            if after == 0:
                cursor = self._exec(
                    f'INSERT INTO {T.states} ("conversation_id", "version", "state", '
                    '"updated_at") VALUES (?, 1, ?, ?) ON CONFLICT ("conversation_id") DO NOTHING',
                    (conversation_id, state, _now()))
            else:
                cursor = self._exec(
                    f'UPDATE {T.states} SET "version" = ?, "state" = ?, "updated_at" = ? '
                    'WHERE "conversation_id" = ? AND "version" = ?',
                    (after + 1, state, _now(), conversation_id, after))
            return cursor.rowcount == 1


_Encoded = tuple[tuple[Any, ...], dict[str, int]]


def _wanted(batch: list[tuple[Message, dict[str, int]]]) -> dict[tuple[str, str], dict[str, int]]:
    """The counts to keep by (id column, digest of the stored body); a message that does
    not read back as itself has no such row."""
    wanted: dict[tuple[str, str], dict[str, int]] = {}
    for message, held in batch:
        digest = stored_digest(message)
        if digest is not None:
            wanted.setdefault((indexable(message.id) or "", digest), {}).update(held)
    return wanted


def _encode(message: Message) -> _Encoded:
    """Column values after (conversation_id, position), in ``_INSERT_MESSAGE`` order, and
    the counts to keep with the row (those the message holds, when the row holds it as it
    is)."""
    created = message.created_at.isoformat() if message.created_at else None
    body, digest, same = stored_form(message)
    return (indexable(message.id), message.role, indexable(message.source),
            indexable(message.sender_id), created, search_text(message),
            indexable(message.reasoning), body, digest), held_counts(message) if same else {}


def _now() -> str:
    return datetime.now(timezone.utc).isoformat()


@contextmanager
def _guard() -> Iterator[None]:
    """The one boundary where ``sqlite3`` errors become ``StoreError``."""
    try:
        yield
    except sqlite3.Error as exc:
        raise StoreError(f"SQLite: {exc}") from exc
    except UnicodeEncodeError as exc:
        raise StoreError(f"SQLite: text is not valid Unicode: {exc}") from exc
