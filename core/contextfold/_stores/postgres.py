"""``PostgresStore``: one PostgreSQL database shared by many workers (extra ``postgres``).

SQLAlchemy Core with psycopg, loaded only when a store is built: importing contextfold
never imports SQLAlchemy, and without it ``PostgresStore(...)`` raises
``MissingExtraError`` naming ``pip install "contextfold[postgres]"``.

- Positions come from a per-conversation counter row bumped with
  ``INSERT ... ON CONFLICT DO UPDATE ... RETURNING``: the row lock serialises concurrent
  appends to one conversation, so positions are unique, gap-free and in commit order, while
  appends to different conversations never wait on each other.
- Full-text search over generated ``tsvector`` columns (English configuration, GIN
  indexes), queried with ``plainto_tsquery`` (user text is never parsed as operators),
  ranked by ``ts_rank_cd``, snippets from ``ts_headline``.
- Migrations run under a transaction-scoped advisory lock, so workers starting together
  apply each one once.
- Token counts are kept in their own table beside the messages (``_counts.py``); counts
  added after the messages were stored are a cache, committed with
  ``synchronous_commit = off`` (a crash of the server may lose the last ones, which are
  then counted again).
- SQLAlchemy errors become ``StoreError`` in ``_guard``, the one boundary.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Literal

from .._messages.model import Message
from .._optional import require
from ..errors import ConfigurationError, StoreError
from .base import BaseStore, SearchHit, SearchKind, Tracer
from .codec import decode_row, indexable, search_text, stored_digest, stored_form
from .counts import StoredCounts, digests_of, held_counts, restore_rows, stored_counts_of
from .migrations import LATEST, MIGRATIONS, MIGRATIONS_TABLE_POSTGRES, T, check_version

if TYPE_CHECKING:
    from sqlalchemy.engine import Connection, Engine

__all__ = ["PostgresStore", "postgres_search_sql"]

_MIGRATION_LOCK = 0x636F6E7466  # "contf": one advisory lock id for schema changes

_BUMP = f"""INSERT INTO {T.counters} ("conversation_id", "next_position") VALUES (:cid, :n)
    ON CONFLICT ("conversation_id") DO UPDATE
    SET "next_position" = {T.counters}."next_position" + EXCLUDED."next_position"
    RETURNING "next_position\""""
_INSERT = f"""INSERT INTO {T.messages} ("conversation_id", "position", "message_id", "role",
    "source", "sender_id", "created_at", "search_text", "reasoning", "body", "digest")
    VALUES (:cid, :position, :message_id, :role, :source, :sender_id, :created_at,
    :search_text, :reasoning, :body, :digest)"""
_RANGE = f"""SELECT "id", "body", "position" FROM {T.messages} WHERE "conversation_id" = :cid
    ORDER BY "position\""""
_RECENT = f"""SELECT "id", "body", "position" FROM (SELECT "id", "body", "position"
    FROM {T.messages} WHERE "conversation_id" = :cid ORDER BY "position" DESC LIMIT :limit)
    AS r ORDER BY "position\""""

# Token counts (``_counts.py``): each statement handles a whole batch (arrays unnested).
_INSERT_COUNTS = f"""INSERT INTO {T.token_counts} ("message", "counter", "tokens")
    SELECT m."id", k."counter", k."tokens" FROM unnest(CAST(:positions AS bigint[]),
        CAST(:counters AS text[]), CAST(:tokens AS bigint[])) AS k("position", "counter", "tokens")
    JOIN {T.messages} AS m ON m."conversation_id" = :cid AND m."position" = k."position"
    ON CONFLICT ("message", "counter") DO NOTHING"""
_SELECT_COUNTS = f"""SELECT c."message", c."counter", c."tokens" FROM {T.token_counts} AS c
    JOIN {T.messages} AS m ON m."id" = c."message"
    WHERE m."conversation_id" = :cid AND m."position" >= :first"""
_PUT_COUNTS = f"""INSERT INTO {T.token_counts} ("message", "counter", "tokens")
    SELECT m."id", k."counter", k."tokens" FROM unnest(CAST(:ids AS text[]),
        CAST(:digests AS text[]), CAST(:counters AS text[]), CAST(:tokens AS bigint[]))
        AS k("message_id", "digest", "counter", "tokens")
    JOIN {T.messages} AS m ON m."conversation_id" = :cid AND m."message_id" = k."message_id"
        AND m."digest" = k."digest"
    ON CONFLICT ("message", "counter") DO NOTHING"""
_UNDIGESTED = f"""SELECT "id", "body" FROM {T.messages} WHERE "conversation_id" = :cid
    AND "digest" IS NULL AND "message_id" = ANY(CAST(:ids AS text[]))"""
_SET_DIGESTS = f"""UPDATE {T.messages} AS m SET "digest" = k."digest"
    FROM unnest(CAST(:rows AS bigint[]), CAST(:digests AS text[])) AS k("id", "digest")
    WHERE m."id" = k."id\""""
_STORED_COUNTS = f"""SELECT m."id", m."message_id", m."digest", c."counter", c."tokens",
    CASE WHEN strpos(m."message_id", ' ') > 0 OR strpos(m."message_id", chr(65533)) > 0
        THEN m."body" END
    FROM {T.messages} AS m LEFT JOIN {T.token_counts} AS c ON c."message" = m."id"
    WHERE m."conversation_id" = :cid"""
_SYSTEM = f"""SELECT "id", "body" FROM {T.messages} WHERE "conversation_id" = :cid
    AND "role" IN ('system', 'developer') ORDER BY "position" LIMIT 1"""
_LATEST_BROADCAST = f"""SELECT "id", "body" FROM {T.messages} WHERE "conversation_id" = :cid
    AND "source" = 'broadcast' ORDER BY "position" DESC LIMIT 1"""

_SEARCH: dict[SearchKind, tuple[str, str, str, str]] = {
    "messages": (T.messages, "conversation_id", "search_tsv", "search_text"),
    "reasoning": (T.messages, "conversation_id", "reasoning_tsv", "reasoning"),
    "broadcasts": (T.broadcasts, "swarm_id", "search_tsv", "search_text"),
}


def postgres_search_sql(kind: SearchKind, window: int | None = None, terms: int = 1) -> str:
    """The ranked search statement for ``kind``; binds ``:q0`` ... ``:q{terms-1}`` (each term
    a phrase, all required, as in every store), ``:owner``, ``:limit``.

    Matches come from the GIN index (``id + 0`` keeps the planner from walking the primary
    key backwards through every row instead). With ``window``, only the owner's ``window``
    most recent matches are ranked, as in ``SQLiteStore``. Bodies and headlines are read
    for the returned rows alone.
    """
    table, owner, tsv, text_column = _SEARCH[kind]
    query = " && ".join(f"phraseto_tsquery('english'::regconfig, :q{i})"
                        for i in range(max(1, terms)))
    recent = "" if window is None else f' ORDER BY t."id" + 0 DESC LIMIT {int(window)}'
    return f"""SELECT t."id", t."{owner}", t."position", t."body", r."rank",
    ts_headline('english'::regconfig, t."{text_column}", r."q",
        'StartSel=[, StopSel=], MaxWords=24, MinWords=8, MaxFragments=1')
    FROM (SELECT m."id", m."q", ts_rank_cd(m."{tsv}", m."q") AS "rank"
        FROM (SELECT t."id", t."{tsv}", q."q" FROM {table} AS t,
            (SELECT {query}) AS q("q")
            WHERE t."{owner}" = :owner AND t."{tsv}" @@ q."q"{recent}) AS m
        ORDER BY "rank" DESC, m."id" DESC LIMIT :limit) AS r
    JOIN {table} AS t ON t."id" = r."id"
    ORDER BY r."rank" DESC, r."id" DESC"""


class PostgresStore(BaseStore):
    """The history store in PostgreSQL, safe for many concurrent writers.

    Args:
        url: a SQLAlchemy URL; ``postgresql://`` and ``postgres://`` use psycopg.
        tracer: called with ``(sql, params)`` before every statement.
        engine_options: extra keyword arguments for ``sqlalchemy.create_engine``.
        search_window: searches rank the conversation's most recent ``search_window``
            matches, so latency stays flat as the history grows; ``None`` ranks every match.
    """

    def __init__(
        self, url: str, *, tracer: Tracer | None = None,
        engine_options: Mapping[str, Any] | None = None, search_window: int | None = 1_000,
    ) -> None:
        if search_window is not None and (
                not isinstance(search_window, int) or search_window < 1):
            raise ConfigurationError(f"search_window must be None or >= 1, got {search_window!r}")
        self.search_window = search_window
        sa = require("sqlalchemy", extra="postgres", feature="PostgresStore")
        url = _psycopg_url(url)
        if url.startswith("postgresql+psycopg:"):
            require("psycopg", extra="postgres", feature="PostgresStore")
        self._text = sa.text
        self._sa_error: type[Exception] = sa.exc.SQLAlchemyError
        self.tracer = tracer
        self._closed = False
        options = {"pool_pre_ping": True, **dict(engine_options or {})}
        with self._guard():
            self._engine: Engine = sa.create_engine(url, **options)
        if tracer is not None:
            def before(conn: Any, cursor: Any, statement: str, params: Any,
                       context: Any, executemany: bool) -> None:
                tracer(statement, params)
            sa.event.listen(self._engine, "before_cursor_execute", before)
        self._url = self._engine.url.render_as_string(hide_password=True)
        try:
            self._migrate()
        except BaseException:
            self._engine.dispose()
            raise

    def __repr__(self) -> str:
        return f"PostgresStore({self._url!r})"

    def close(self) -> None:
        """Dispose of the connection pool; the store is unusable afterwards."""
        self._closed = True
        self._engine.dispose()

    # -- plumbing -------------------------------------------------------------------------

    @contextmanager
    def _guard(self) -> Iterator[None]:
        """The one boundary where SQLAlchemy (and driver) errors become ``StoreError``."""
        try:
            yield
        except self._sa_error as exc:
            raise StoreError(f"PostgreSQL: {exc}") from exc
        except UnicodeEncodeError as exc:
            raise StoreError(f"PostgreSQL: text is not valid Unicode: {exc}") from exc

    @contextmanager
    def _begin(self) -> Iterator[Connection]:
        if self._closed:
            raise StoreError("this PostgresStore is closed")
        with self._guard(), self._engine.begin() as conn:
            yield conn

    def _rows(self, sql: str, **params: Any) -> list[Any]:
        with self._begin() as conn:
            return list(conn.execute(self._text(sql), params).fetchall())

    def _migrate(self) -> None:
        for migration in MIGRATIONS:
            with self._begin() as conn:
                conn.execute(self._text("SELECT pg_advisory_xact_lock(:k)"),
                             {"k": _MIGRATION_LOCK})
                conn.execute(self._text(MIGRATIONS_TABLE_POSTGRES))
                newest = conn.execute(
                    self._text(f'SELECT MAX("version") FROM {T.migrations}')).scalar()
                check_version(newest, self._url)
                if newest is not None and newest >= migration.version:
                    continue
                for statement in migration.postgres:
                    conn.execute(self._text(statement))
                conn.execute(
                    self._text(f'INSERT INTO {T.migrations} ("version", "name") '
                               "VALUES (:v, :name)"),
                    {"v": migration.version, "name": migration.name})
        newest = self._rows(f'SELECT MAX("version") FROM {T.migrations}')[0][0]
        check_version(newest, self._url)
        assert newest is None or newest <= LATEST

    # -- history --------------------------------------------------------------------------

    def _append(self, conversation_id: str, messages: list[Message]) -> None:
        encoded = [_encode(m) for m in messages]
        with self._begin() as conn:
            self._insert(conn, conversation_id, encoded)

    def _insert(self, conn: Connection, conversation_id: str, encoded: list[_Encoded]) -> None:
        end = conn.execute(self._text(_BUMP), {"cid": conversation_id, "n": len(encoded)}
                           ).scalar_one()
        start = end - len(encoded)
        conn.execute(self._text(_INSERT), [
            {"cid": conversation_id, "position": start + i, **row}
            for i, (row, _) in enumerate(encoded)
        ])
        counts = [(start + i, name, tokens)
                  for i, (_, held) in enumerate(encoded) for name, tokens in held.items()]
        if counts:
            positions, counters, tokens = (list(column) for column in zip(*counts, strict=True))
            conn.execute(self._text(_INSERT_COUNTS), {
                "cid": conversation_id, "positions": positions, "counters": counters,
                "tokens": tokens})

    def _load(self, conversation_id: str, limit: int | None) -> list[Message]:
        with self._begin() as conn:
            if limit is None:
                rows = conn.execute(self._text(_RANGE), {"cid": conversation_id}).fetchall()
            else:
                rows = conn.execute(self._text(_RECENT),
                                    {"cid": conversation_id, "limit": limit}).fetchall()
            counts = conn.execute(self._text(_SELECT_COUNTS), {
                "cid": conversation_id, "first": rows[0][2]}).fetchall() if rows else []
        messages = [decode_row(T.messages, r[0], r[1]) for r in rows]
        restore_rows(T.token_counts, {r[0]: m for r, m in zip(rows, messages, strict=True)},
                     counts)
        return messages

    def _put_counts(self, conversation_id: str,
                    batch: list[tuple[Message, dict[str, int]]]) -> None:
        rows = [(_no_nul(m.id), digest, name, tokens) for m, held in batch
                if (digest := stored_digest(m)) is not None for name, tokens in held.items()]
        if not rows:
            return
        ids, digests, counters, tokens = (list(column) for column in zip(*rows, strict=True))
        with self._begin() as conn:
            conn.execute(self._text("SET LOCAL synchronous_commit = off"))
            old = digests_of(conn.execute(self._text(_UNDIGESTED), {
                "cid": conversation_id, "ids": sorted(set(ids))}).fetchall())
            if old:  # rows of schema 1 get their digest, once
                conn.execute(self._text(_SET_DIGESTS), {
                    "rows": [row_id for row_id, _ in old], "digests": [d for _, d in old]})
            conn.execute(self._text(_PUT_COUNTS), {
                "cid": conversation_id, "ids": ids, "digests": digests, "counters": counters,
                "tokens": tokens})

    def _stored_counts(self, conversation_id: str) -> StoredCounts:
        return stored_counts_of(self._rows(_STORED_COUNTS, cid=conversation_id))

    def _first(self, table: str, sql: str, **params: Any) -> Message | None:
        rows = self._rows(sql, **params)
        return decode_row(table, rows[0][0], rows[0][1]) if rows else None

    def _system_message(self, conversation_id: str) -> Message | None:
        return self._first(T.messages, _SYSTEM, cid=conversation_id)

    def _clear(self, conversation_id: str) -> None:
        with self._begin() as conn:  # the messages' counts go with them (ON DELETE CASCADE)
            for table in (T.counters, T.messages, T.originals, T.states):
                conn.execute(self._text(f'DELETE FROM {table} WHERE "conversation_id" = :cid'),
                             {"cid": conversation_id})

    # -- search ---------------------------------------------------------------------------

    def _search(
        self, kind: SearchKind, owner: str, terms: list[str], limit: int
    ) -> list[SearchHit]:
        phrases = {f"q{i}": t.replace("\x00", " ") for i, t in enumerate(terms)}
        rows = self._rows(postgres_search_sql(kind, self.search_window, len(terms)),
                          owner=owner, limit=limit, **phrases)
        table = _SEARCH[kind][0]
        prefix = "b" if kind == "broadcasts" else "m"
        hits = []
        for row_id, owner_id, position, body, rank, snippet in rows:
            message = decode_row(table, row_id, body)
            hits.append(SearchHit(
                message=message, conversation_id=owner_id, position=int(position),
                role=message.role, source=message.source, snippet=snippet or "",
                created_at=message.created_at, score=float(rank), handle=f"{prefix}:{row_id}",
            ))
        return hits

    def _fetch(self, kind: Literal["m", "b"], row_id: int) -> tuple[str, Message] | None:
        table, owner = (T.messages, "conversation_id") if kind == "m" else \
            (T.broadcasts, "swarm_id")
        if row_id > 2**63 - 1:
            return None
        rows = self._rows(f'SELECT "id", "body", "{owner}" FROM {table} WHERE "id" = :id',
                          id=row_id)
        return (rows[0][2], decode_row(table, rows[0][0], rows[0][1])) if rows else None

    # -- broadcasts -----------------------------------------------------------------------

    def _join(self, conn: Connection, conversation_id: str, swarm_id: str) -> None:
        conn.execute(self._text(
            f'INSERT INTO {T.members} ("swarm_id", "conversation_id") VALUES (:s, :c) '
            "ON CONFLICT DO NOTHING"), {"s": swarm_id, "c": conversation_id})

    def _join_swarm(self, conversation_id: str, swarm_id: str) -> None:
        with self._begin() as conn:
            self._join(conn, conversation_id, swarm_id)

    def _swarm_members(self, swarm_id: str) -> list[str]:
        return [r[0] for r in self._rows(
            f'SELECT "conversation_id" FROM {T.members} WHERE "swarm_id" = :s '
            'ORDER BY "conversation_id"', s=swarm_id)]

    def _swarms_of(self, conversation_id: str) -> list[str]:
        return [r[0] for r in self._rows(
            f'SELECT "swarm_id" FROM {T.members} WHERE "conversation_id" = :c '
            'ORDER BY "swarm_id"', c=conversation_id)]

    def _broadcast(self, swarm_id: str, message: Message, recipients: list[str]) -> None:
        row, _ = _encode(message)
        with self._begin() as conn:
            conn.execute(self._text("SELECT pg_advisory_xact_lock(hashtextextended(:k, 0))"),
                         {"k": "contextfold-swarm:" + swarm_id})
            conn.execute(self._text(
                f'INSERT INTO {T.broadcasts} ("swarm_id", "position", "sender_id", '
                '"created_at", "search_text", "body") SELECT :s, COALESCE(MAX("position"), '
                f'-1) + 1, :sender, :created_at, :search_text, :body FROM {T.broadcasts} '
                'WHERE "swarm_id" = :s'),
                {"s": swarm_id, "sender": message.sender_id or "",
                 "created_at": row["created_at"], "search_text": row["search_text"],
                 "body": row["body"]})
            for conversation_id in recipients:
                self._join(conn, conversation_id, swarm_id)
                self._insert(conn, conversation_id, [(row, {})])

    def _latest_broadcast(self, conversation_id: str) -> Message | None:
        return self._first(T.messages, _LATEST_BROADCAST, cid=conversation_id)

    def _latest_commander_broadcast(self, swarm_ids: Iterable[str]) -> Message | None:
        return self._first(
            T.broadcasts,
            f'SELECT "id", "body" FROM {T.broadcasts} WHERE "swarm_id" = ANY(:swarms) '
            """AND "sender_id" = '' ORDER BY "id" DESC LIMIT 1""", swarms=list(swarm_ids))

    # -- summaries and originals ----------------------------------------------------------

    def _get_summary(self, key: str) -> str | None:
        rows = self._rows(f'SELECT "text" FROM {T.summaries} WHERE "key" = :k', k=key)
        return str(rows[0][0]) if rows else None

    def _put_summary(self, key: str, text: str) -> None:
        with self._begin() as conn:
            conn.execute(self._text(
                f'INSERT INTO {T.summaries} ("key", "text") VALUES (:k, :t) '
                'ON CONFLICT ("key") DO UPDATE SET "text" = EXCLUDED."text", '
                '"updated_at" = now()'), {"k": key, "t": text})

    def _put_original(self, conversation_id: str, handle: str, text: str) -> None:
        with self._begin() as conn:
            conn.execute(self._text(
                f'INSERT INTO {T.originals} ("conversation_id", "handle", "text") '
                "VALUES (:c, :h, :t) ON CONFLICT (\"conversation_id\", \"handle\") "
                'DO UPDATE SET "text" = EXCLUDED."text"'),
                {"c": conversation_id, "h": handle, "t": text})

    def _get_original(self, conversation_id: str, handle: str) -> str | None:
        rows = self._rows(f'SELECT "text" FROM {T.originals} WHERE "conversation_id" = :c '
                          'AND "handle" = :h', c=conversation_id, h=handle)
        return str(rows[0][0]) if rows else None

    # -- compaction state ---------------------------------------------------------------

    def _get_state(self, conversation_id: str) -> tuple[int, str] | None:
        rows = self._rows(f'SELECT "version", "state" FROM {T.states} '
                          'WHERE "conversation_id" = :c', c=conversation_id)
        return (int(rows[0][0]), str(rows[0][1])) if rows else None

    def _put_state(self, conversation_id: str, state: str, after: int) -> bool:
        # one statement either way: the row's version decides, under its row lock
        params = {"c": conversation_id, "v": after + 1, "s": state, "a": after}
        with self._begin() as conn:
            if after == 0:
                result = conn.execute(self._text(
                    f'INSERT INTO {T.states} ("conversation_id", "version", "state") '
                    'VALUES (:c, :v, :s) ON CONFLICT ("conversation_id") DO NOTHING'), params)
            else:
                result = conn.execute(self._text(
                    f'UPDATE {T.states} SET "version" = :v, "state" = :s, "updated_at" = now() '
                    'WHERE "conversation_id" = :c AND "version" = :a'), params)
            return int(result.rowcount) == 1


_Encoded = tuple[dict[str, Any], dict[str, int]]


def _encode(message: Message) -> _Encoded:
    """Column values for ``_INSERT`` and the counts to keep with the row (those the message
    holds, when the row holds it as it is). NUL, which PostgreSQL text cannot hold, is
    dropped from the indexed and queried copies (the JSON body keeps the exact message)."""
    body, digest, same = stored_form(message)
    return {
        "message_id": _no_nul(message.id),
        "role": message.role,
        "source": _no_nul(message.source),
        "sender_id": _no_nul(message.sender_id),
        "created_at": message.created_at.isoformat() if message.created_at else None,
        "search_text": _no_nul(search_text(message)),
        "reasoning": _no_nul(message.reasoning),
        "body": body,
        "digest": digest,
    }, held_counts(message) if same else {}


def _no_nul(text: str | None) -> str | None:
    text = indexable(text)
    return text.replace("\x00", " ") if text else text


def _psycopg_url(url: str) -> str:
    if not isinstance(url, str) or not url:
        raise ConfigurationError(f"PostgresStore needs a database URL, got {url!r}")
    for prefix in ("postgresql://", "postgres://"):
        if url.startswith(prefix):
            return "postgresql+psycopg://" + url[len(prefix):]
    return url
