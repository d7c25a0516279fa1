"""Schema migrations for the SQL stores, with quoted table names shared by both backends.

Each migration is a numbered list of statements per dialect. A store applies the ones its
database lacks at open, each in its own transaction together with the row that records it
in ``contextfold_migrations`` (version, name, time applied). A database whose recorded
version is newer than ``LATEST`` is refused with ``SchemaVersionError``: an older library
must not write into a schema it does not know.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import SchemaVersionError

__all__ = ["LATEST", "MIGRATIONS", "Migration", "T", "check_version", "quote_identifier"]


def quote_identifier(name: str) -> str:
    """``name`` as a double-quoted SQL identifier (inner quotes doubled)."""
    return '"' + name.replace('"', '""') + '"'


class T:
    """Quoted table and index names (one place, so no statement spells a name twice)."""

    migrations = quote_identifier("contextfold_migrations")
    messages = quote_identifier("contextfold_messages")
    messages_fts = quote_identifier("contextfold_messages_fts")
    reasoning_fts = quote_identifier("contextfold_reasoning_fts")
    broadcasts = quote_identifier("contextfold_broadcasts")
    broadcasts_fts = quote_identifier("contextfold_broadcasts_fts")
    members = quote_identifier("contextfold_swarm_members")
    summaries = quote_identifier("contextfold_summaries")
    originals = quote_identifier("contextfold_originals")
    counters = quote_identifier("contextfold_conversations")
    token_counts = quote_identifier("contextfold_token_counts")
    states = quote_identifier("contextfold_compaction_states")


@dataclass(frozen=True, slots=True)
class Migration:
    """One schema step."""

    version: int
    """Its number; applied in increasing order."""
    name: str
    """What it does, recorded with it."""
    sqlite: tuple[str, ...]
    """Statements for SQLite."""
    postgres: tuple[str, ...]
    """Statements for PostgreSQL."""


MIGRATIONS_TABLE_SQLITE = f"""CREATE TABLE IF NOT EXISTS {T.migrations} (
    "version" INTEGER PRIMARY KEY, "name" TEXT NOT NULL, "applied_at" TEXT NOT NULL)"""

MIGRATIONS_TABLE_POSTGRES = f"""CREATE TABLE IF NOT EXISTS {T.migrations} (
    "version" INTEGER PRIMARY KEY, "name" TEXT NOT NULL,
    "applied_at" TIMESTAMPTZ NOT NULL DEFAULT now())"""

_FTS = "tokenize='porter unicode61 remove_diacritics 2'"

_SQLITE_V1 = (
    f"""CREATE TABLE {T.messages} (
        "id" INTEGER PRIMARY KEY AUTOINCREMENT,
        "conversation_id" TEXT NOT NULL,
        "position" INTEGER NOT NULL,
        "message_id" TEXT NOT NULL,
        "role" TEXT NOT NULL,
        "source" TEXT,
        "sender_id" TEXT,
        "created_at" TEXT,
        "search_text" TEXT NOT NULL,
        "reasoning" TEXT,
        "body" TEXT NOT NULL,
        UNIQUE ("conversation_id", "position"))""",
    f"""CREATE INDEX "contextfold_messages_role" ON {T.messages}
        ("conversation_id", "role", "position")""",
    f"""CREATE INDEX "contextfold_messages_source" ON {T.messages}
        ("conversation_id", "source", "position")""",
    f"""CREATE VIRTUAL TABLE {T.messages_fts} USING fts5("search_text",
        content='contextfold_messages', content_rowid='id', {_FTS})""",
    f"""CREATE VIRTUAL TABLE {T.reasoning_fts} USING fts5("reasoning",
        content='contextfold_messages', content_rowid='id', {_FTS})""",
    f"""CREATE TRIGGER "contextfold_messages_ai" AFTER INSERT ON {T.messages} BEGIN
        INSERT INTO {T.messages_fts} (rowid, "search_text") VALUES (new."id", new."search_text");
        INSERT INTO {T.reasoning_fts} (rowid, "reasoning")
            SELECT new."id", new."reasoning" WHERE new."reasoning" IS NOT NULL;
        END""",
    f"""CREATE TRIGGER "contextfold_messages_ad" AFTER DELETE ON {T.messages} BEGIN
        INSERT INTO {T.messages_fts} ({T.messages_fts}, rowid, "search_text")
            VALUES ('delete', old."id", old."search_text");
        INSERT INTO {T.reasoning_fts} ({T.reasoning_fts}, rowid, "reasoning")
            SELECT 'delete', old."id", old."reasoning" WHERE old."reasoning" IS NOT NULL;
        END""",
    f"""CREATE TRIGGER "contextfold_messages_au" BEFORE UPDATE OF "search_text", "reasoning"
        ON {T.messages} BEGIN SELECT RAISE(ABORT, 'indexed message text is append-only'); END""",
    f"""CREATE TABLE {T.broadcasts} (
        "id" INTEGER PRIMARY KEY AUTOINCREMENT,
        "swarm_id" TEXT NOT NULL,
        "position" INTEGER NOT NULL,
        "sender_id" TEXT NOT NULL,
        "created_at" TEXT,
        "search_text" TEXT NOT NULL,
        "body" TEXT NOT NULL,
        UNIQUE ("swarm_id", "position"))""",
    f"""CREATE INDEX "contextfold_broadcasts_sender" ON {T.broadcasts}
        ("swarm_id", "sender_id", "id")""",
    f"""CREATE VIRTUAL TABLE {T.broadcasts_fts} USING fts5("search_text",
        content='contextfold_broadcasts', content_rowid='id', {_FTS})""",
    f"""CREATE TRIGGER "contextfold_broadcasts_ai" AFTER INSERT ON {T.broadcasts} BEGIN
        INSERT INTO {T.broadcasts_fts} (rowid, "search_text")
            VALUES (new."id", new."search_text");
        END""",
    f"""CREATE TRIGGER "contextfold_broadcasts_ad" AFTER DELETE ON {T.broadcasts} BEGIN
        INSERT INTO {T.broadcasts_fts} ({T.broadcasts_fts}, rowid, "search_text")
            VALUES ('delete', old."id", old."search_text");
        END""",
    f"""CREATE TABLE {T.members} (
        "swarm_id" TEXT NOT NULL, "conversation_id" TEXT NOT NULL,
        PRIMARY KEY ("swarm_id", "conversation_id")) WITHOUT ROWID""",
    f"""CREATE INDEX "contextfold_members_conversation" ON {T.members} ("conversation_id")""",
    f"""CREATE TABLE {T.summaries} (
        "key" TEXT PRIMARY KEY, "text" TEXT NOT NULL, "updated_at" TEXT NOT NULL)""",
    f"""CREATE TABLE {T.originals} (
        "conversation_id" TEXT NOT NULL, "handle" TEXT NOT NULL, "text" TEXT NOT NULL,
        PRIMARY KEY ("conversation_id", "handle")) WITHOUT ROWID""",
)

_PG_TSV = "to_tsvector('english'::regconfig, {})"
_PG_SEARCH_TSV = _PG_TSV.format('"search_text"')
_PG_REASONING_TSV = _PG_TSV.format("""coalesce("reasoning", '')""")

_POSTGRES_V1 = (
    f"""CREATE TABLE {T.counters} (
        "conversation_id" TEXT PRIMARY KEY, "next_position" BIGINT NOT NULL)""",
    f"""CREATE TABLE {T.messages} (
        "id" BIGSERIAL PRIMARY KEY,
        "conversation_id" TEXT NOT NULL,
        "position" BIGINT NOT NULL,
        "message_id" TEXT NOT NULL,
        "role" TEXT NOT NULL,
        "source" TEXT,
        "sender_id" TEXT,
        "created_at" TEXT,
        "search_text" TEXT NOT NULL,
        "reasoning" TEXT,
        "body" TEXT NOT NULL,
        "search_tsv" TSVECTOR GENERATED ALWAYS AS ({_PG_SEARCH_TSV}) STORED,
        "reasoning_tsv" TSVECTOR GENERATED ALWAYS AS
            ({_PG_REASONING_TSV}) STORED,
        UNIQUE ("conversation_id", "position"))""",
    f"""CREATE INDEX "contextfold_messages_role" ON {T.messages}
        ("conversation_id", "role", "position")""",
    f"""CREATE INDEX "contextfold_messages_source" ON {T.messages}
        ("conversation_id", "source", "position")""",
    f"""CREATE INDEX "contextfold_messages_tsv" ON {T.messages} USING GIN ("search_tsv")""",
    f"""CREATE INDEX "contextfold_reasoning_tsv" ON {T.messages} USING GIN ("reasoning_tsv")""",
    f"""CREATE TABLE {T.broadcasts} (
        "id" BIGSERIAL PRIMARY KEY,
        "swarm_id" TEXT NOT NULL,
        "position" BIGINT NOT NULL,
        "sender_id" TEXT NOT NULL,
        "created_at" TEXT,
        "search_text" TEXT NOT NULL,
        "body" TEXT NOT NULL,
        "search_tsv" TSVECTOR GENERATED ALWAYS AS ({_PG_SEARCH_TSV}) STORED,
        UNIQUE ("swarm_id", "position"))""",
    f"""CREATE INDEX "contextfold_broadcasts_sender" ON {T.broadcasts}
        ("swarm_id", "sender_id", "id")""",
    f"""CREATE INDEX "contextfold_broadcasts_tsv" ON {T.broadcasts} USING GIN ("search_tsv")""",
    f"""CREATE TABLE {T.members} (
        "swarm_id" TEXT NOT NULL, "conversation_id" TEXT NOT NULL,
        PRIMARY KEY ("swarm_id", "conversation_id"))""",
    f"""CREATE INDEX "contextfold_members_conversation" ON {T.members} ("conversation_id")""",
    f"""CREATE TABLE {T.summaries} (
        "key" TEXT PRIMARY KEY, "text" TEXT NOT NULL,
        "updated_at" TIMESTAMPTZ NOT NULL DEFAULT now())""",
    f"""CREATE TABLE {T.originals} (
        "conversation_id" TEXT NOT NULL, "handle" TEXT NOT NULL, "text" TEXT NOT NULL,
        PRIMARY KEY ("conversation_id", "handle"))""",
)

# Version 2: token counts kept with the messages (``_counts.py``), in their own table, one
# row per message row and counter name. Each message row gets the digest of its body, so
# that a count added later is kept only for the exact content it was made from (rows of
# version 1 get theirs the first time a count is added for them). A change to how
# contextfold's own counters count a message must come with a migration that deletes the
# kept counts of those counters.
_SQLITE_V2 = (
    f'ALTER TABLE {T.messages} ADD COLUMN "digest" TEXT',
    f"""CREATE TABLE {T.token_counts} (
        "message" INTEGER NOT NULL REFERENCES {T.messages} ("id") ON DELETE CASCADE,
        "counter" TEXT NOT NULL,
        "tokens" INTEGER NOT NULL,
        PRIMARY KEY ("message", "counter")) WITHOUT ROWID""",
)

_POSTGRES_V2 = (
    f'ALTER TABLE {T.messages} ADD COLUMN "digest" TEXT',
    f"""CREATE TABLE {T.token_counts} (
        "message" BIGINT NOT NULL REFERENCES {T.messages} ("id") ON DELETE CASCADE,
        "counter" TEXT NOT NULL,
        "tokens" BIGINT NOT NULL,
        PRIMARY KEY ("message", "counter"))""",
)

# Version 3: a conversation's compaction state beside its messages (what the next call
# builds on: the prefix as sent, calibration, the nudge counter), one row per conversation.
# "version" counts the writes: a writer replaces the row only if it is still the one it
# read, so of several workers compacting one conversation one wins and the others read it.
_SQLITE_V3 = (
    f"""CREATE TABLE {T.states} (
        "conversation_id" TEXT PRIMARY KEY,
        "version" INTEGER NOT NULL,
        "state" TEXT NOT NULL,
        "updated_at" TEXT NOT NULL) WITHOUT ROWID""",
)

_POSTGRES_V3 = (
    f"""CREATE TABLE {T.states} (
        "conversation_id" TEXT PRIMARY KEY,
        "version" BIGINT NOT NULL,
        "state" TEXT NOT NULL,
        "updated_at" TIMESTAMPTZ NOT NULL DEFAULT now())""",
)

MIGRATIONS: tuple[Migration, ...] = (
    Migration(1, "initial schema", _SQLITE_V1, _POSTGRES_V1),
    Migration(2, "token counts kept with messages", _SQLITE_V2, _POSTGRES_V2),
    Migration(3, "compaction state kept with conversations", _SQLITE_V3, _POSTGRES_V3),
)
"""Every migration, in order. Append new ones; never edit an applied one."""

LATEST = MIGRATIONS[-1].version
"""The newest schema version this library knows."""


def check_version(recorded: int | None, where: str) -> None:
    """Refuse a database whose recorded schema is newer than ``LATEST``."""
    if recorded is not None and recorded > LATEST:
        raise SchemaVersionError(
            f"{where} has schema version {recorded}, but this contextfold knows versions up "
            f"to {LATEST}; it was written by a newer contextfold. Upgrade contextfold to use it."
        )
