"""SQL tables (SQLAlchemy Core). The Alembic revisions under ``migrations/`` are the schema
authority; a test checks these definitions and the migrated schema agree.

The full-text index (``messages_fts``) is dialect-specific (SQLite FTS5, PostgreSQL tsvector)
and lives outside this metadata, created by the migration and written by ``store._search``.
"""

from __future__ import annotations

import sqlalchemy as sa

metadata = sa.MetaData(
    naming_convention={
        "ix": "ix_%(table_name)s_%(column_0_N_name)s",
        "uq": "uq_%(table_name)s_%(column_0_N_name)s",
        "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
        "pk": "pk_%(table_name)s",
    }
)

ID = sa.String(26)
TS = sa.DateTime(timezone=True)

threads = sa.Table(
    "threads",
    metadata,
    sa.Column("id", ID, primary_key=True),
    sa.Column("kind", sa.String(16), nullable=False),
    sa.Column("title", sa.Text, nullable=False, server_default=""),
    sa.Column("status", sa.String(16), nullable=False),
    sa.Column("parent_id", ID, sa.ForeignKey("threads.id"), nullable=True),
    sa.Column("forked_from_id", ID, sa.ForeignKey("threads.id"), nullable=True),
    sa.Column("forked_at_seq", sa.Integer, nullable=True),
    sa.Column("job_id", ID, nullable=False),
    sa.Column("task", sa.JSON, nullable=True),
    sa.Column("system_prompt", sa.Text, nullable=True),
    sa.Column("tools", sa.JSON, nullable=False),
    sa.Column("model", sa.String(200), nullable=True),
    sa.Column("result", sa.JSON, nullable=True),
    sa.Column("error", sa.Text, nullable=True),
    sa.Column("version", sa.Integer, nullable=False, server_default="1"),
    sa.Column("head_seq", sa.Integer, nullable=False, server_default="0"),
    # tool_use ids of the newest message still waiting for their results (the pairing
    # invariant's state, kept so an append validates without reading the previous message)
    sa.Column("pending_tool_ids", sa.JSON, nullable=False),
    sa.Column("lease_owner", sa.String(200), nullable=True),
    sa.Column("lease_expires_at", TS, nullable=True),
    sa.Column("created_at", TS, nullable=False),
    sa.Column("updated_at", TS, nullable=False),
    # the source an imported thread stands for (NULL for threadloom's own): unique, so two
    # imports of one session at once cannot both create its thread (migration 0005)
    sa.Column("source_key", sa.Text, nullable=True),
    # the thread this one continues after a handoff (SPEC "Jobs larger than one context"):
    # unique, so a thread has at most one successor (migration 0006)
    sa.Column("continues_id", ID, sa.ForeignKey("threads.id"), nullable=True),
    sa.Index(None, "job_id"),
    sa.Index(None, "parent_id"),
    sa.Index(None, "forked_from_id"),
    sa.Index(None, "status"),
    sa.Index(None, "source_key", unique=True),
    sa.Index(None, "continues_id", unique=True),
)

# append-only in the database too: migration 0003 adds triggers rejecting UPDATE and DELETE (and,
# on PostgreSQL, TRUNCATE) of messages
messages = sa.Table(
    "messages",
    metadata,
    sa.Column("thread_id", ID, sa.ForeignKey("threads.id"), primary_key=True),
    sa.Column("seq", sa.Integer, primary_key=True),
    sa.Column("role", sa.String(16), nullable=False),
    # JSON text of the content blocks, built into models on read (``_stored``)
    sa.Column("content", sa.Text, nullable=False),
    sa.Column("format", sa.SmallInteger, nullable=False, server_default="1"),
    sa.Column("created_at", TS, nullable=False),
)

usage = sa.Table(
    "usage",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("thread_id", ID, sa.ForeignKey("threads.id"), nullable=False),
    sa.Column("seq", sa.Integer, nullable=True),
    sa.Column("model", sa.String(200), nullable=False),
    sa.Column("input_tokens", sa.BigInteger, nullable=False),
    sa.Column("output_tokens", sa.BigInteger, nullable=False),
    sa.Column("cache_read_input_tokens", sa.BigInteger, nullable=False),
    sa.Column("cache_creation_input_tokens", sa.BigInteger, nullable=False),
    sa.Column("cost_usd", sa.Float, nullable=False),
    sa.Column("created_at", TS, nullable=False),
    sa.Index(None, "thread_id"),
)

dispatches = sa.Table(
    "dispatches",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("lead_id", ID, sa.ForeignKey("threads.id"), nullable=False),
    sa.Column("tool_use_id", sa.String(200), nullable=False),
    sa.Column("task_index", sa.Integer, nullable=False),
    sa.Column("task_key", sa.String(200), nullable=True),
    sa.Column("worker_id", ID, sa.ForeignKey("threads.id"), nullable=False),
    sa.Column("status", sa.String(16), nullable=False),
    sa.Column("created_at", TS, nullable=False),
    sa.Column("updated_at", TS, nullable=False),
    sa.UniqueConstraint("lead_id", "tool_use_id", "task_index"),
    sa.Index(None, "worker_id"),
)

checkpoints = sa.Table(
    "checkpoints",
    metadata,
    # a snapshot of the files a thread worked on, taken after the tool results at ``seq`` were
    # stored; ``commit`` is opaque to the store (the orchestrator keeps git object ids here)
    sa.Column("thread_id", ID, sa.ForeignKey("threads.id"), primary_key=True),
    sa.Column("seq", sa.Integer, primary_key=True),
    sa.Column("commit", sa.String(64), nullable=False),
    sa.Column("created_at", TS, nullable=False),
)

# the whole text of tool outputs too large to keep inline in their message (``store._outputs``):
# UTF-8 in chunks of about 1 MiB, each ending at a character boundary, ``start`` its first
# character's offset in the output; written in the same transaction as the message, append-only
# like it (migration 0004's triggers). No foreign key to ``messages``: the chunks are written
# before their message row in that transaction (the row holds what streaming them computed)
outputs = sa.Table(
    "outputs",
    metadata,
    sa.Column("thread_id", ID, primary_key=True),
    sa.Column("seq", sa.Integer, primary_key=True),
    sa.Column("tool_use_id", sa.Text, primary_key=True),
    sa.Column("chunk", sa.Integer, primary_key=True),
    sa.Column("start", sa.BigInteger, nullable=False),
    sa.Column("data", sa.LargeBinary, nullable=False),
)

FTS_TABLE = "messages_fts"
