"""threads, messages, usage, dispatches and the full-text index

Revision ID: 0001
Revises:
Create Date: 2026-12-02
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

ID = sa.String(26)
TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "threads",
        sa.Column("id", ID, nullable=False),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("title", sa.Text, nullable=False, server_default=""),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("parent_id", ID, nullable=True),
        sa.Column("forked_from_id", ID, nullable=True),
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
        sa.Column("pending_tool_ids", sa.JSON, nullable=False),
        sa.Column("lease_owner", sa.String(200), nullable=True),
        sa.Column("lease_expires_at", TS, nullable=True),
        sa.Column("created_at", TS, nullable=False),
        sa.Column("updated_at", TS, nullable=False),
        sa.ForeignKeyConstraint(["parent_id"], ["threads.id"], name="fk_threads_parent_id_threads"),
        sa.ForeignKeyConstraint(
            ["forked_from_id"], ["threads.id"], name="fk_threads_forked_from_id_threads"
        ),
        sa.PrimaryKeyConstraint("id", name="pk_threads"),
    )
    op.create_index("ix_threads_job_id", "threads", ["job_id"])
    op.create_index("ix_threads_parent_id", "threads", ["parent_id"])
    op.create_index("ix_threads_forked_from_id", "threads", ["forked_from_id"])
    op.create_index("ix_threads_status", "threads", ["status"])

    op.create_table(
        "messages",
        sa.Column("thread_id", ID, nullable=False),
        sa.Column("seq", sa.Integer, nullable=False),
        sa.Column("role", sa.String(16), nullable=False),
        sa.Column("content", sa.Text, nullable=False),
        sa.Column("format", sa.SmallInteger, nullable=False, server_default="1"),
        sa.Column("created_at", TS, nullable=False),
        sa.ForeignKeyConstraint(
            ["thread_id"], ["threads.id"], name="fk_messages_thread_id_threads"
        ),
        sa.PrimaryKeyConstraint("thread_id", "seq", name="pk_messages"),
    )

    op.create_table(
        "usage",
        sa.Column("id", sa.Integer, autoincrement=True, nullable=False),
        sa.Column("thread_id", ID, nullable=False),
        sa.Column("seq", sa.Integer, nullable=True),
        sa.Column("model", sa.String(200), nullable=False),
        sa.Column("input_tokens", sa.BigInteger, nullable=False),
        sa.Column("output_tokens", sa.BigInteger, nullable=False),
        sa.Column("cache_read_input_tokens", sa.BigInteger, nullable=False),
        sa.Column("cache_creation_input_tokens", sa.BigInteger, nullable=False),
        sa.Column("cost_usd", sa.Float, nullable=False),
        sa.Column("created_at", TS, nullable=False),
        sa.ForeignKeyConstraint(["thread_id"], ["threads.id"], name="fk_usage_thread_id_threads"),
        sa.PrimaryKeyConstraint("id", name="pk_usage"),
    )
    op.create_index("ix_usage_thread_id", "usage", ["thread_id"])

    op.create_table(
        "dispatches",
        sa.Column("id", sa.Integer, autoincrement=True, nullable=False),
        sa.Column("lead_id", ID, nullable=False),
        sa.Column("tool_use_id", sa.String(200), nullable=False),
        sa.Column("task_index", sa.Integer, nullable=False),
        sa.Column("task_key", sa.String(200), nullable=True),
        sa.Column("worker_id", ID, nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("created_at", TS, nullable=False),
        sa.Column("updated_at", TS, nullable=False),
        sa.ForeignKeyConstraint(["lead_id"], ["threads.id"], name="fk_dispatches_lead_id_threads"),
        sa.ForeignKeyConstraint(
            ["worker_id"], ["threads.id"], name="fk_dispatches_worker_id_threads"
        ),
        sa.PrimaryKeyConstraint("id", name="pk_dispatches"),
        sa.UniqueConstraint(
            "lead_id",
            "tool_use_id",
            "task_index",
            name="uq_dispatches_lead_id_tool_use_id_task_index",
        ),
    )
    op.create_index("ix_dispatches_worker_id", "dispatches", ["worker_id"])

    if op.get_bind().dialect.name == "sqlite":
        op.execute(
            "CREATE VIRTUAL TABLE messages_fts USING fts5("
            "text, thread_id UNINDEXED, seq UNINDEXED, tokenize = 'unicode61')"
        )
    else:
        op.execute(
            "CREATE TABLE messages_fts ("
            " thread_id VARCHAR(26) NOT NULL,"
            " seq INTEGER NOT NULL,"
            " text TEXT NOT NULL,"
            " tsv TSVECTOR GENERATED ALWAYS AS (to_tsvector('simple',"
            " regexp_replace(text, '[^[:alnum:]]+', ' ', 'g'))) STORED,"
            " PRIMARY KEY (thread_id, seq))"
        )
        op.execute("CREATE INDEX ix_messages_fts_tsv ON messages_fts USING GIN (tsv)")


def downgrade() -> None:
    op.execute("DROP TABLE IF EXISTS messages_fts")
    op.drop_index("ix_dispatches_worker_id", table_name="dispatches")
    op.drop_table("dispatches")
    op.drop_index("ix_usage_thread_id", table_name="usage")
    op.drop_table("usage")
    op.drop_table("messages")
    op.drop_index("ix_threads_status", table_name="threads")
    op.drop_index("ix_threads_forked_from_id", table_name="threads")
    op.drop_index("ix_threads_parent_id", table_name="threads")
    op.drop_index("ix_threads_job_id", table_name="threads")
    op.drop_table("threads")
