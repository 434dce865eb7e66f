"""outputs: the whole text of tool outputs too large to keep inline, append-only like messages

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-03

A tool_result longer than ``store._outputs.INLINE_LIMIT`` characters keeps a preview in its
message; its whole text is stored here, UTF-8 in chunks of about 1 MiB (``start``: the chunk's
first character's offset in the output), in the same transaction as the message. The same
triggers as 0003 make the rows append-only for every writer of the database (UPDATE, DELETE and,
on PostgreSQL, TRUNCATE are refused), with the same limits: a PostgreSQL superuser or the SQLite
file's owner can drop them.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

MESSAGE = "outputs are append-only"


def upgrade() -> None:
    op.create_table(
        "outputs",
        sa.Column("thread_id", sa.String(26), nullable=False),
        sa.Column("seq", sa.Integer, nullable=False),
        sa.Column("tool_use_id", sa.Text, nullable=False),
        sa.Column("chunk", sa.Integer, nullable=False),
        sa.Column("start", sa.BigInteger, nullable=False),
        sa.Column("data", sa.LargeBinary, nullable=False),
        sa.PrimaryKeyConstraint("thread_id", "seq", "tool_use_id", "chunk", name="pk_outputs"),
    )
    if op.get_bind().dialect.name == "sqlite":
        for event in ("UPDATE", "DELETE"):
            op.execute(
                f"CREATE TRIGGER outputs_append_only_{event.lower()}"
                f" BEFORE {event} ON outputs"
                f" BEGIN SELECT RAISE(ABORT, '{MESSAGE}'); END"
            )
        return
    op.execute(
        "CREATE FUNCTION outputs_append_only() RETURNS trigger LANGUAGE plpgsql AS $$"
        f" BEGIN RAISE EXCEPTION '{MESSAGE} (% refused)', TG_OP"
        " USING ERRCODE = 'restrict_violation'; END $$"
    )
    op.execute(
        "CREATE TRIGGER outputs_append_only BEFORE UPDATE OR DELETE ON outputs"
        " FOR EACH ROW EXECUTE FUNCTION outputs_append_only()"
    )
    op.execute(
        "CREATE TRIGGER outputs_append_only_truncate BEFORE TRUNCATE ON outputs"
        " FOR EACH STATEMENT EXECUTE FUNCTION outputs_append_only()"
    )


def downgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        op.execute("DROP TRIGGER IF EXISTS outputs_append_only_update")
        op.execute("DROP TRIGGER IF EXISTS outputs_append_only_delete")
    else:
        op.execute("DROP TRIGGER IF EXISTS outputs_append_only_truncate ON outputs")
        op.execute("DROP TRIGGER IF EXISTS outputs_append_only ON outputs")
        op.execute("DROP FUNCTION IF EXISTS outputs_append_only()")
    op.drop_table("outputs")
